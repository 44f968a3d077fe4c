/* serve.c - `omniserve serve`: the HTTP server. The main thread becomes the
 * lws service thread and answers at once (/health says "loading"); a loader
 * thread loads the model and starts the engine, then hands it to the API.
 * A hub model (-m hf://REPO/FILE, --hf-repo/--hf-file) is fetched into the
 * model cache first; when that fails the server keeps running without a
 * model and says why (404 model_not_found on generation routes).
 * SIGINT/SIGTERM start a graceful shutdown: /health answers 503 (draining),
 * new generation requests 503, requests in flight get --shutdown-timeout
 * seconds to finish; the process exits 0 after it. A second signal ends the
 * process at once (exit 1). */
#include "src/cli/args.h"
#include "src/cli/cli.h"
#include "src/cli/models.h"

#include "llm/model.h"
#include "audio/codec/dac.h"
#include "audio/tts/tts.h"
#include "src/api/api.h"
#include "src/api/responses_store.h"
#include "src/core/backend.h"
#include "src/core/download.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"
#include "src/embed/embed.h"
#include "src/core/compute.h"
#include "src/core/threadpool.h"
#include "src/stt/stt.h"
#include "src/api/images.h"
#include "src/api/metrics.h"
#include "src/api/realtime_conv.h"
#include "src/api/web.h"
#include "src/mcp/mcp.h"
#include "vision/vision.h"
#include "ws/ws_http.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


struct serve_opts {
    const char *model;
    const char *hf_repo, *hf_file; /* a hub model, fetched into the cache by the loader */
    char hf_quant[32];             /* -m ALIAS: the quantization picked (download_params.quant) */
    char alias_repo[256];          /* -m ALIAS: its repo (hf_repo points here) */
    const char *served_name;
    const char *api_key;
    bool strict_model_id;
    bool max_tokens_reject;       /* --max-tokens-policy reject */
    const char *logit_bias;       /* --logit-bias ID+BIAS,...: default for every request */
    const char *tool_parser;      /* --tool-parser NAME, or NULL */
    int responses_store;          /* --responses-store N */
    long responses_store_mb;      /* --responses-store-mb MB */
    const char *reasoning_format; /* --reasoning-format NAME, or NULL */
    struct ws_server_params wp;
    struct engine_params ep;
    struct stt_params sp;
    const char *mmproj;           /* --mmproj FILE: vision encoder for image parts */
    long vision_cache_mb;         /* --vision-cache-mb N */
    int64_t video_px[3];          /* --video-min/max/total-pixels: Qwen-VL frame bounds (0: the file's) */
    struct api_images_params ip;  /* --max-images, --media-root, --allow-private-urls, ... */
    bool no_tts;                  /* --no-tts: no /v1/audio/speech */
    const char *tts_model, *tts_codec, *voices_dir; /* --tts-model/--tts-codec/--voices-dir: OuteTTS */
    struct realtime_limits rl;    /* --realtime-max-*: Realtime conversations */
    const char *mcp_config;       /* --mcp-config FILE.json: MCP servers for tool_execution server */
    struct mcp_params mcpp;       /* --mcp-tool-timeout, --mcp-max-result, ... */
    long mcp_max_turns;           /* --mcp-max-turns N */
    struct web_params web;        /* --web-root DIR, --no-web: the playground at / */
    const char *embed_files[16];  /* --embedding-model / --rerank-model FILE (repeatable) */
    bool embed_rerank[16];        /* which of them came as --rerank-model */
    int n_embed;
    bool embeddings;              /* --embeddings: the chat model also embeds */
    int embed_pooling;            /* --pooling NAME, or -1: from each file */
    struct embed_params emp;      /* --embedding-batch, --embedding-batch-tokens, --embedding-max-queue */
};

/* Loader thread state: written by the loader, read by main after join. */
struct serve_loader {
    const struct serve_opts *o;
    struct api *api;
    struct ws_server *srv;
    struct llm_model *model;
    struct engine *engine;
    struct embed_service *embed;  /* embedding and rerank models (freed after the engine) */
    struct tts *tts;              /* --tts-model: its voices join these */
    struct llm_model *tts_lm;     /* --tts-model, in the engine */
    struct dac_model *tts_dac;    /* --tts-codec */
    bool tts_added;               /* the tts uses the engine: free it first */
    int failed;
};

/* serve --mmproj: the vision model, its encoder threads and scratch, the cache. */
struct serve_vision {
    struct vision_model *vm;
    struct tpool *tp;
    struct vision_ctx *vc;
    struct vision_cache *cache;
    struct api_images_pool *pool; /* its workers: freed while the engine still runs */
};

static void serve_vision_free(struct serve_vision *v)
{
    api_images_pool_free(v->pool);
    vision_cache_free(v->cache);
    vision_ctx_free(v->vc);
    tpool_free(v->tp);
    vision_model_free(v->vm);
}

static int serve_vision_load(const struct serve_opts *o, struct api *api, struct serve_vision *v)
{
    char err[512];
    double t0 = omni_time_s();
    bool bad_video = false;
    if ((v->vm = vision_model_load(o->mmproj, err, sizeof err)) &&
        (bad_video = vision_model_set_video_limits(v->vm, o->video_px[0], o->video_px[1], o->video_px[2]) < 0))
        snprintf(err, sizeof err, "--video-min-pixels over --video-max-pixels (or the mmproj's)");
    if (!v->vm || bad_video ||
        !(v->tp = tpool_new(compute_size(o->ep.compute), err, sizeof err)) ||
        tpool_attach(v->tp, o->ep.compute, "vision", err, sizeof err) < 0 ||
        !(v->vc = vision_ctx_new(v->vm, v->tp, err, sizeof err))) {
        fprintf(stderr, "serve: %s\n", err);
        serve_vision_free(v);
        return -1;
    }
    if (!(v->cache = vision_cache_new((size_t)o->vision_cache_mb << 20))) {
        fprintf(stderr, "serve: out of memory for the vision cache\n");
        serve_vision_free(v);
        return -1;
    }
    if (!(v->pool = api_images_pool_new(v->vm, v->vc, v->cache, &o->ip, err, sizeof err))) {
        fprintf(stderr, "serve: %s\n", err);
        serve_vision_free(v);
        return -1;
    }
    api_set_images(api, v->pool);
    OMNI_INFO("serve: vision model %s (%s) ready in %.1f s", o->mmproj,
              vision_model_info(v->vm)->projector, omni_time_s() - t0);
    return 0;
}

static struct ws_server *serve_server; /* for the signal handler */
static volatile sig_atomic_t serve_stopping; /* set by the signal handler: stops a download */

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve serve -m FILE.gguf [options]\n"
            "  -m, --model FILE           GGUF language model (without it the server starts and\n"
            "                             answers generation routes with 404); hf://REPO/FILE\n"
            "                             fetches it from Hugging Face into ~/.cache/omniserve\n"
            "  --hf-repo REPO             a hub model: owner/name ($HF_ENDPOINT, $HF_TOKEN)\n"
            "  --hf-file FILE             its GGUF file (default: its only or its Q4_K_M GGUF)\n"
            "  --host ADDR                listen address (default 127.0.0.1)\n"
            "  --port N                   port (default 8000)\n"
            "  --api-key KEY              require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                             (also $OMNISERVE_API_KEY); /health stays open\n"
            "  --cors-origin ORIGIN       send CORS headers for ORIGIN ('*' for any); default off\n"
            "  --allowed-hosts H1,H2      more Host header names accepted while bound to loopback\n"
            "                             (besides localhost, 127.0.0.1, [::1], 0.0.0.0): DNS-rebinding\n"
            "                             guard\n"
            "  --tls-cert FILE            PEM certificate (chain): HTTPS and WSS on the port, no plain\n"
            "                             HTTP; with --tls-key\n"
            "  --tls-key FILE             its PEM private key (unencrypted)\n"
            "  --served-model-name NAME   model id for clients (default: file name without .gguf)\n"
            "  --strict-model-id          unknown 'model' in a request -> 404\n"
            "  --responses-store N        /v1/responses answers kept for GET and\n"
            "                             previous_response_id, least recently used out\n"
            "                             first (default 1024; 0 keeps none)\n"
            "  --responses-store-mb MB    and at most this much of them (default 64)\n"
            "  --max-tokens-policy P      max_tokens past the context: clamp (default: the answer\n"
            "                             ends at the context's end) or reject (400)\n"
            "  --logit-bias ID+B,ID-B     default logit biases for every request (B in -100..100,\n"
            "                             ID-inf bans); a request's own logit_bias wins per token\n"
            "  --mcp-config FILE.json     MCP servers ({\"mcpServers\": {name: {command, args, env} |\n"
            "                             {url, headers}}}) whose tools chat requests with\n"
            "                             \"tool_execution\": \"server\" use (docs/mcp.md)\n"
            "  --mcp-max-turns N          generations per such request, the last without tools\n"
            "                             (default 8)\n"
            "  --mcp-tool-timeout S       a tool call's answer within S seconds, else an error\n"
            "                             result for the model (default 60)\n"
            "  --mcp-init-timeout S       an MCP server's initialize and tools/list answers within\n"
            "                             S seconds, else it counts as failed (default 30)\n"
            "  --mcp-max-result BYTES     tool output given to the model, cut past it (default 32K)\n"
            "  --mcp-max-message BYTES    one message from an MCP server (default 16M)\n"
            "  --mcp-restart-delay S      first restart delay of a failed MCP server, doubling up\n"
            "                             to --mcp-restart-max S (defaults 1 and 60)\n"
            "  --tool-parser NAME         tool-call format: json, hermes, qwen3_coder, llama3, mistral,\n"
            "                             deepseek, functionary, granite, gemma, pythonic, none;\n"
            "                             family names too: qwen3, qwen3.5, smollm3, gpt-oss (harmony),\n"
            "                             lfm2, lfm2.5, llama4, gemma3 (default: from the chat template)\n"
            "  --reasoning-format NAME    none, think, mistral, harmony (default: from the chat template)\n"
            "  --max-body BYTES           request body limit, K/M/G suffixes (default 32M) -> 413\n"
            "  --shutdown-timeout S       on SIGINT/SIGTERM wait S seconds for requests (default 10);\n"
            "                             meanwhile /health is 503 and new generations get 503\n"
            "  --sse-keepalive S          comment on idle streams every S seconds (default 15)\n"
            "  --http-workers N           threads that parse and prepare requests (default 4)\n"
            "  --max-conns-per-ip N       open connections per client address (default 128; 0: no\n"
            "                             cap, e.g. behind a local reverse proxy)\n"
            "  --request-timeout S        headers and body must arrive within S seconds, else 408\n"
            "                             (default 30)\n"
            "  --web-root DIR             serve the web playground (GET /) from DIR instead of the\n"
            "                             copy built into the binary\n"
            "  --no-web                   no web playground (GET / answers 404)\n"
            "speech:\n"
            "  --stt-model FILE           whisper.cpp ggml model for /v1/audio/transcriptions,\n"
            "                             /v1/audio/translations and /v1/realtime (with or without -m)\n"
            "  --vad-model FILE           Silero VAD (whisper.cpp ggml): trims silence, segments turns\n"
            "  --stt-workers N            transcriptions in flight at once, sharing batched passes (default 4)\n"
            "  --stt-threads N            at most N of the --threads for the speech model (default: all)\n"
            "  --stt-device cpu|cuda|cuda:N  where the speech model runs (default: as --device)\n"
            "  --no-tts                   no speech synthesis (/v1/audio/speech answers 503)\n"
            "  --tts-model FILE           OuteTTS 1.0 GGUF: neural voices, run by the engine beside chat\n"
            "  --tts-codec FILE           its DAC codec GGUF (tools/hf_dac_to_gguf.py)\n"
            "  --voices-dir DIR           OuteTTS speaker files NAME.json: voice NAME (besides 'outetts')\n"
            "  --realtime-max-items N     items kept per Realtime conversation (default 256)\n"
            "  --realtime-max-item-bytes N  text of one conversation item (default 65536)\n"
            "  --realtime-max-audio-s S   input audio without a commit (default 300)\n"
            "  --realtime-max-output-tokens N  a response's tokens when it asks for \"inf\" (default 1024)\n"
            "vision:\n"
            "  --mmproj FILE              llama.cpp mmproj GGUF (LLaVA CLIP+MLP, SmolVLM/Idefics3):\n"
            "                             image_url / video_url parts in chat messages\n"
            "  --vision-cache-mb N        cache of image embeddings, by content (default 256)\n"
            "  --max-images N             images + video frames per request (default 64)\n"
            "  --max-image-pixels N       pixels per image or frame (default 50000000)\n"
            "  --video-min-pixels N, --video-max-pixels N, --video-total-pixels N\n"
            "                             Qwen-VL video frame bounds (default: the mmproj's or the\n"
            "                             reference's; docs/vision.md)\n"
            "  --max-video-seconds S      longer clips are refused (default 3600)\n"
            "  --max-request-media BYTES  image and video bytes of one request, K/M/G (default 256M) -> 413\n"
            "  --media-root DIR           file:// URLs are read from inside DIR (default: refused)\n"
            "  --allow-private-urls       http(s) URLs may reach loopback/private addresses\n"
            "embeddings and reranking (POST /v1/embeddings, /v1/rerank; docs/embeddings.md):\n"
            "  --embedding-model FILE     an embedding model (bert, nomic-bert, jina-bert-v2, or a\n"
            "                             decoder such as Qwen3-Embedding); repeatable, with or\n"
            "                             without -m; 'model' in a request picks one by file name\n"
            "  --rerank-model FILE        a reranker (a bert cross-encoder, or Qwen3-Reranker);\n"
            "                             repeatable\n"
            "  --embeddings               the chat model (-m) embeds too (last-token pooling)\n"
            "  --pooling cls|mean|last    pooling of the embedding models (default: from each file)\n"
            "  --embedding-batch N        encoder inputs per forward, and decoder inputs of one request\n"
            "                             in the engine at once (default 32)\n"
            "  --embedding-batch-tokens N encoder tokens per forward (default 8192)\n"
            "  --embedding-max-queue N    encoder inputs waiting before 429 (default 16384)\n"
            "engine:\n"
            "  --threads N                compute threads, one budget shared by the engine, speech,\n"
            "                             vision and TTS (default: physical cores)\n"
            "  --kv-block-size N          tokens per KV block (default 16)\n"
            "  --state-snapshot-interval TOKENS|auto|off  hybrid models (qwen3next, qwen35, lfm2):\n"
            "                             tokens between the prefix cache's recurrent-state\n"
            "                             snapshots (auto: every KV block; 0/off: no prefix\n"
            "                             cache for them)\n"
            "  --state-snapshot-memory BYTES|auto  hybrids: memory of those snapshots, thinned\n"
            "                             when full (auto: a quarter of the KV budget; under\n"
            "                             --kv-memory a quarter of it, beside it; 0: none)\n"
            "  --kv-type f16|f32|q8_0     KV cache type (default f16; q8_0 about half)\n"
            "  --kv-memory BYTES          KV pool size, K/M/G suffixes (default: from free RAM)\n"
            "  --max-batch-tokens N       tokens per engine step (default 512)\n"
            "  --max-seqs N               sequences generated at once (default 16)\n"
            "  --max-queue N              waiting requests before 429 (default 256)\n"
            "  --deterministic            results independent of batch composition\n"
            "  --device cpu|cuda|cuda:N   where the language model runs (default: cuda when this\n"
            "                             build has it (make CUDA=1) and a GPU answers, else cpu)\n"
            "  --gpu-memory-fraction F    share of free GPU memory for the KV pool (default 0.9)\n"
            "  --prefix-cache-dir DIR     keep hot prompt prefixes on disk across restarts\n");
}

/* 0 ok, 1 help printed, 2 usage error (message printed). */
static int serve_parse(int argc, char **argv, struct serve_opts *o)
{
    o->wp = ws_default_params();
    o->ep = engine_default_params();
    o->sp = stt_default_params();
    o->vision_cache_mb = 256;
    o->embed_pooling = -1;
    o->emp = embed_default_params();
    o->responses_store = RESPONSES_STORE_DEFAULT_MAX;
    o->responses_store_mb = (long)(RESPONSES_STORE_DEFAULT_BYTES >> 20);
    o->ip = api_images_default_params();
    o->rl = realtime_default_limits();
    o->mcpp = mcp_default_params();
    o->mcp_max_turns = 8;
    o->api_key = getenv("OMNISERVE_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--no-tts")) {
            o->no_tts = true;
            continue;
        }
        if (!strcmp(a, "--no-web")) {
            o->web.disabled = true;
            continue;
        }
        if (!strcmp(a, "--strict-model-id")) {
            o->strict_model_id = true;
            continue;
        }
        if (!strcmp(a, "--deterministic")) {
            o->ep.deterministic = true;
            continue;
        }
        if (!strcmp(a, "--embeddings")) {
            o->embeddings = true;
            continue;
        }
        if (!strcmp(a, "--allow-private-urls")) {
            o->ip.allow_private_urls = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "serve: %s: %s\n", a,
                    a[0] == '-' ? "unknown option or missing value" : "unexpected argument");
            return 2;
        }
        const char *v = argv[++i];
        long n = 0;
        double d = 0;
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--hf-repo"))
            o->hf_repo = v;
        else if (!strcmp(a, "--hf-file"))
            o->hf_file = v;
        else if (!strcmp(a, "--host"))
            o->wp.host = v;
        else if (!strcmp(a, "--responses-store")) {
            rc = cli_long("serve", a, v, 0, 1 << 20, &n);
            o->responses_store = (int)n;
        } else if (!strcmp(a, "--responses-store-mb"))
            rc = cli_long("serve", a, v, 1, 1 << 20, &o->responses_store_mb);
        else if (!strcmp(a, "--logit-bias"))
            o->logit_bias = v;
        else if (!strcmp(a, "--max-tokens-policy")) {
            if (strcmp(v, "clamp") && strcmp(v, "reject")) {
                fprintf(stderr, "serve: --max-tokens-policy: clamp or reject, got '%s'\n", v);
                rc = -1;
            }
            o->max_tokens_reject = !strcmp(v, "reject");
        }
        else if (!strcmp(a, "--port")) {
            rc = cli_long("serve", a, v, 1, 65535, &n);
            o->wp.port = (int)n;
        } else if (!strcmp(a, "--api-key"))
            o->api_key = v;
        else if (!strcmp(a, "--cors-origin"))
            o->wp.cors_origin = v;
        else if (!strcmp(a, "--allowed-hosts"))
            o->wp.allowed_hosts = v;
        else if (!strcmp(a, "--tls-cert"))
            o->wp.tls_cert = v;
        else if (!strcmp(a, "--tls-key"))
            o->wp.tls_key = v;
        else if (!strcmp(a, "--http-workers")) {
            rc = cli_long("serve", a, v, 1, 256, &n);
            o->wp.worker_threads = (int)n;
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            rc = cli_long("serve", a, v, 0, 1L << 20, &n);
            o->wp.max_conns_per_ip = (int)n;
        } else if (!strcmp(a, "--request-timeout"))
            rc = cli_double("serve", a, v, 0.001, 86400, &o->wp.request_timeout_s);
        else if (!strcmp(a, "--web-root"))
            o->web.root = v;
        else if (!strcmp(a, "--served-model-name"))
            o->served_name = v;
        else if (!strcmp(a, "--mcp-config"))
            o->mcp_config = v;
        else if (!strcmp(a, "--mcp-max-turns"))
            rc = cli_long("serve", a, v, 1, 1000, &o->mcp_max_turns);
        else if (!strcmp(a, "--mcp-tool-timeout"))
            rc = cli_double("serve", a, v, 0.001, 86400, &o->mcpp.tool_timeout_s);
        else if (!strcmp(a, "--mcp-init-timeout"))
            rc = cli_double("serve", a, v, 0.001, 86400, &o->mcpp.init_timeout_s);
        else if (!strcmp(a, "--mcp-max-result"))
            rc = cli_size("serve", a, v, 64, &o->mcpp.max_result_bytes);
        else if (!strcmp(a, "--mcp-max-message"))
            rc = cli_size("serve", a, v, 1024, &o->mcpp.max_message_bytes);
        else if (!strcmp(a, "--mcp-restart-delay"))
            rc = cli_double("serve", a, v, 0.001, 86400, &o->mcpp.restart_min_s);
        else if (!strcmp(a, "--mcp-restart-max"))
            rc = cli_double("serve", a, v, 0.001, 86400, &o->mcpp.restart_max_s);
        else if (!strcmp(a, "--tool-parser")) {
            o->tool_parser = v;
            if (tools_format_from_name(v) < 0) {
                fprintf(stderr, "serve: --tool-parser expects one of %s; got '%s'\n",
                        tools_format_names(), v);
                rc = -1;
            }
        } else if (!strcmp(a, "--reasoning-format")) {
            o->reasoning_format = v;
            if (reasoning_format_from_name(v) < 0) {
                fprintf(stderr, "serve: --reasoning-format expects none, think, mistral or harmony; got '%s'\n", v);
                rc = -1;
            }
        }
        else if (!strcmp(a, "--max-body"))
            rc = cli_size("serve", a, v, 0, &o->wp.max_body_bytes);
        else if (!strcmp(a, "--shutdown-timeout"))
            rc = cli_double("serve", a, v, 0, 86400, &o->wp.shutdown_timeout_s);
        else if (!strcmp(a, "--sse-keepalive")) {
            rc = cli_double("serve", a, v, 0, 86400, &d);
            o->wp.sse_keepalive_ms = (int)(d * 1000);
        } else if (!strcmp(a, "--threads")) {
            rc = cli_long("serve", a, v, 1, 1024, &n);
            o->ep.n_threads = (int)n;
        } else if (!strcmp(a, "--kv-block-size")) {
            rc = cli_long("serve", a, v, 1, 4096, &n);
            o->ep.kv_block_size = (int)n;
        } else if (!strcmp(a, "--state-snapshot-interval")) {
            if (!strcmp(v, "auto"))
                o->ep.state_snapshot_interval = 0;
            else if (!strcmp(v, "off"))
                o->ep.state_snapshot_interval = -1;
            else if (!(rc = cli_long("serve", a, v, 0, 1L << 20, &n)))
                o->ep.state_snapshot_interval = n ? (int)n : -1;
        } else if (!strcmp(a, "--state-snapshot-memory")) {
            size_t sz;
            if (!strcmp(v, "auto"))
                o->ep.state_snapshot_memory = 0;
            else if (!(rc = cli_size("serve", a, v, 0, &sz)))
                o->ep.state_snapshot_memory = !sz ? -1 : sz > INT64_MAX ? INT64_MAX : (int64_t)sz;
        } else if (!strcmp(a, "--kv-type")) {
            if ((o->ep.kv_type = engine_kv_type_from_name(v)) < 0) {
                fprintf(stderr, "serve: --kv-type expects f16, f32 or q8_0, got '%s'\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--device")) {
            o->ep.device = v;
        } else if (!strcmp(a, "--gpu-memory-fraction")) {
            rc = cli_double("serve", a, v, 0.01, 1.0, &o->ep.gpu_memory_fraction);
        } else if (!strcmp(a, "--kv-memory"))
            rc = cli_size("serve", a, v, 0, &o->ep.kv_memory_bytes);
        else if (!strcmp(a, "--max-batch-tokens")) {
            rc = cli_long("serve", a, v, 1, 65536, &n);
            o->ep.max_batch_tokens = (int)n;
        } else if (!strcmp(a, "--max-seqs")) {
            rc = cli_long("serve", a, v, 1, 4096, &n);
            o->ep.max_seqs = (int)n;
        } else if (!strcmp(a, "--max-queue")) {
            rc = cli_long("serve", a, v, 0, 1L << 20, &n);
            o->ep.max_queue = (int)n;
        } else if (!strcmp(a, "--stt-model"))
            o->sp.model_path = v;
        else if (!strcmp(a, "--tts-model"))
            o->tts_model = v;
        else if (!strcmp(a, "--tts-codec"))
            o->tts_codec = v;
        else if (!strcmp(a, "--voices-dir"))
            o->voices_dir = v;
        else if (!strcmp(a, "--vad-model"))
            o->sp.vad_path = v;
        else if (!strcmp(a, "--realtime-max-items")) {
            rc = cli_long("serve", a, v, 2, 100000, &n);
            o->rl.max_items = (int)n;
        } else if (!strcmp(a, "--realtime-max-item-bytes")) {
            rc = cli_long("serve", a, v, 64, 16L << 20, &n);
            o->rl.max_item_bytes = (size_t)n;
        } else if (!strcmp(a, "--realtime-max-audio-s")) {
            rc = cli_long("serve", a, v, 1, 3600, &n);
            o->rl.max_buffered_audio_s = (int)n;
        } else if (!strcmp(a, "--realtime-max-output-tokens")) {
            rc = cli_long("serve", a, v, 1, 1L << 20, &n);
            o->rl.max_output_tokens = (int)n;
        } else if (!strcmp(a, "--stt-workers")) {
            rc = cli_long("serve", a, v, 1, 64, &n);
            o->sp.n_workers = (int)n;
        } else if (!strcmp(a, "--stt-threads")) {
            rc = cli_long("serve", a, v, 1, 1024, &n);
            o->sp.n_threads = (int)n;
        } else if (!strcmp(a, "--stt-device")) {
            o->sp.device = v;
        } else if (!strcmp(a, "--mmproj"))
            o->mmproj = v;
        else if (!strcmp(a, "--vision-cache-mb")) {
            rc = cli_long("serve", a, v, 0, 1L << 20, &n);
            o->vision_cache_mb = n;
        } else if (!strcmp(a, "--max-images")) {
            rc = cli_long("serve", a, v, 1, 4096, &n);
            o->ip.max_images = (int)n;
        } else if (!strcmp(a, "--max-image-pixels")) {
            rc = cli_long("serve", a, v, 1, 1L << 40, &n);
            o->ip.max_image_pixels = n;
        } else if (!strcmp(a, "--video-min-pixels") || !strcmp(a, "--video-max-pixels") ||
                   !strcmp(a, "--video-total-pixels")) {
            rc = cli_long("serve", a, v, 1, 1L << 31, &n);
            o->video_px[!strcmp(a, "--video-min-pixels") ? 0 : !strcmp(a, "--video-max-pixels") ? 1 : 2] = n;
        } else if (!strcmp(a, "--max-video-seconds")) {
            rc = cli_double("serve", a, v, 0.001, 1e7, &d);
            o->ip.max_video_seconds = d;
        } else if (!strcmp(a, "--max-request-media")) {
            rc = cli_size("serve", a, v, 1, &o->ip.max_request_media_bytes);
        } else if (!strcmp(a, "--media-root")) {
            o->ip.media_root = v;
        } else if (!strcmp(a, "--embedding-model") || !strcmp(a, "--rerank-model")) {
            if (o->n_embed == (int)(sizeof o->embed_files / sizeof *o->embed_files)) {
                fprintf(stderr, "serve: at most %d --embedding-model / --rerank-model\n",
                        o->n_embed);
                rc = -1;
            } else {
                o->embed_rerank[o->n_embed] = !strcmp(a, "--rerank-model");
                o->embed_files[o->n_embed++] = v;
            }
        } else if (!strcmp(a, "--embedding-batch")) {
            rc = cli_long("serve", a, v, 1, 4096, &n);
            o->emp.max_batch_inputs = o->emp.window = (int)n;
        } else if (!strcmp(a, "--embedding-batch-tokens")) {
            rc = cli_long("serve", a, v, 1, 1L << 20, &n);
            o->emp.max_batch_tokens = (int)n;
        } else if (!strcmp(a, "--embedding-max-queue")) {
            rc = cli_long("serve", a, v, 1, 1L << 24, &n);
            o->emp.max_queue_inputs = (int)n;
        } else if (!strcmp(a, "--pooling")) {
            o->embed_pooling = embed_pooling_from_name(v);
            if (o->embed_pooling != EMBED_POOL_CLS && o->embed_pooling != EMBED_POOL_MEAN &&
                o->embed_pooling != EMBED_POOL_LAST) {
                fprintf(stderr, "serve: --pooling expects cls, mean or last; got '%s'\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--prefix-cache-dir")) {
            o->ep.prefix_cache_dir = v;
        } else {
            fprintf(stderr, "serve: unknown option '%s'\n", a);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!o->ep.device && omni_backend_available("cuda")) {
        /* no --device: the GPU when this build has CUDA and one answers */
        char err[256];
        struct omni_backend *be = omni_backend_new("cuda", 0, err, sizeof err);
        o->ep.device = be ? "cuda" : "cpu";
        if (!be)
            OMNI_INFO("serve: no usable GPU (%s): the language model runs on the CPU", err);
        omni_backend_free(be);
    }
    if (!o->sp.device)
        o->sp.device = o->ep.device; /* the speech model goes where the language model does */
    return 0;
}

/* "dir/Qwen2.5-0.5B.Q4_K_M.gguf" -> "Qwen2.5-0.5B.Q4_K_M" */
static void serve_default_name(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

static int serve_cancel_download(void *user)
{
    (void)user;
    return serve_stopping;
}

/* Fetch the hub model into the cache; its path into path. On failure the
 * server stays up without a model and says so in one paragraph (on stderr
 * and in every 404). */
static int serve_fetch(struct serve_loader *L, char *path, size_t cap)
{
    char repo[512], file[1024], err[1024];
    struct download_params dp = download_default_params();
    dp.cancel = serve_cancel_download;
    int rc = 0;
    if (L->o->hf_quant[0])
        dp.quant = L->o->hf_quant;
    if (L->o->hf_repo) {
        snprintf(repo, sizeof repo, "%s", L->o->hf_repo);
        snprintf(file, sizeof file, "%s", L->o->hf_file ? L->o->hf_file : "");
    } else {
        rc = download_parse_ref(L->o->model, repo, sizeof repo, file, sizeof file, err,
                                sizeof err);
    }
    if (!rc)
        rc = download_hf_file(&dp, repo, file, path, cap, err, sizeof err);
    if (!rc)
        return 0;
    if (serve_stopping)
        return -1;
    const char *cause = strncmp(err, "download: ", 10) ? err : err + 10;
    char why[3072];
    snprintf(why, sizeof why,
             "could not download the model %.200s%s%.200s from %.200s (%.600s). The server "
             "runs without it: /health, /metrics and /v1/models answer, generation routes "
             "return 404 model_not_found. To serve a local GGUF, restart with 'omniserve serve -m "
             "path/to/model.gguf' (or 'make run MODEL=path/to/model.gguf'). To get this one, "
             "check the network (HF_ENDPOINT names a mirror, HF_TOKEN a token for gated repos) "
             "and restart, or run 'omniserve pull %.200s%s%.200s'; downloads resume.",
             repo, *file ? "/" : "", file, dp.endpoint, cause, repo, *file ? ":" : "", file);
    fprintf(stderr, "serve: %s\n", why);
    /* the API's message is shorter: the cause and the way out */
    snprintf(why, sizeof why, "could not download %.200s%s%.200s (%.300s); restart with "
             "'omniserve serve -m path/to/model.gguf' to serve a local GGUF",
             repo, *file ? "/" : "", file, cause);
    api_set_unavailable(L->api, why);
    return -1;
}

static void *serve_load(void *arg)
{
    struct serve_loader *L = arg;
    const struct serve_opts *o = L->o;
    char err[512] = "", path[4096];
    double t0 = omni_time_s();
    const char *model = o->model;
    const bool chat = o->model || o->hf_repo;
    if (chat && (o->hf_repo || download_is_hf_ref(model))) {
        if (serve_fetch(L, path, sizeof path))
            return NULL;
        model = path;
    }
    /* Embedding models: encoders beside the engine, decoders in it (batched
     * with chat in its steps); the chat model is the engine's model 0. */
    bool need_engine = chat, ok = true;
    for (int i = 0; i < o->n_embed && !need_engine; i++)
        need_engine = embed_file_is_encoder(o->embed_files[i], err, sizeof err) == 0;
    if (chat && !(L->model = llm_model_load(model, NULL, err, sizeof err)))
        ok = false;
    if (ok && need_engine && !(L->engine = engine_new(&o->ep, err, sizeof err)))
        ok = false;
    if (ok && chat && engine_add_model(L->engine, L->model, o->served_name, err, sizeof err) < 0)
        ok = false;
    int tts_idx = -1;   /* --tts-model: a model of the same engine, batched with chat */
    if (ok && o->tts_model && L->tts &&
        (!(L->tts_dac = dac_load(o->tts_codec, err, sizeof err)) ||
         !(L->tts_lm = llm_model_load(o->tts_model, NULL, err, sizeof err)) ||
         (!L->engine && !(L->engine = engine_new(&o->ep, err, sizeof err))) ||
         (tts_idx = engine_add_model(L->engine, L->tts_lm, "outetts", err, sizeof err)) < 0))
        ok = false;
    if (ok && (o->n_embed || o->embeddings) && !(L->embed = embed_service_new(&o->emp, err, sizeof err)))
        ok = false;
    /* the chat model first: the default of requests that name no model */
    if (ok && o->embeddings && chat)
        ok = embed_service_add_engine(L->embed, L->engine, 0, o->served_name, EMBED_ROLE_EMBED,
                                      o->embed_pooling, -1, err, sizeof err) >= 0;
    for (int i = 0; ok && i < o->n_embed; i++)
        ok = embed_service_load(L->embed, o->embed_files[i],
                                o->embed_rerank[i] ? EMBED_ROLE_RERANK : EMBED_ROLE_EMBED,
                                L->engine, o->ep.compute, NULL, o->embed_pooling, -1, err,
                                sizeof err) >= 0;
    if (ok && L->engine)
        ok = engine_start(L->engine, err, sizeof err) == 0;
    if (ok && tts_idx >= 0) {
        ok = tts_add_outetts(L->tts, L->engine, tts_idx, L->tts_dac, o->voices_dir, err,
                             sizeof err) == 0;
        L->tts_added = ok;
        if (ok)
            OMNI_INFO("serve: OuteTTS voices from %s ready", o->tts_model);
    }
    if (ok && L->embed)
        ok = embed_service_start(L->embed, err, sizeof err) == 0;
    if (ok) {
        if (L->embed) {
            api_set_embed(L->api, L->embed);
            for (int i = 0; i < embed_service_n_models(L->embed); i++) {
                const struct embed_model_info *mi = embed_service_model(L->embed, i);
                OMNI_INFO("serve: %s model '%s' (%s, %s%s pooling, %d dims) ready",
                          mi->role == EMBED_ROLE_RERANK ? "rerank" : "embedding", mi->name,
                          mi->arch, mi->decoder ? "engine, " : "",
                          embed_pooling_name(mi->pooling), mi->n_embd);
            }
        }
        if (chat) {
            api_set_engine(L->api, L->engine, 0);
            OMNI_INFO("serve: model '%s' ready in %.1f s", o->served_name, omni_time_s() - t0);
        } else {
            api_set_unavailable(L->api, "the server was started with embedding models only; "
                                        "restart it with -m FILE.gguf to chat");
        }
        return NULL;
    }
    /* A model the user named that cannot be served is fatal: say why, stop. */
    fprintf(stderr, "serve: %s\n", err);
    L->failed = 1;
    api_set_unavailable(L->api, err);
    ws_server_stop(L->srv);
    return NULL;
}

/* First SIGINT/SIGTERM: drain (ws_server_stop is async-signal-safe). A
 * second one: the operator does not want to wait - leave now. */
static void serve_on_signal(int sig)
{
    (void)sig;
    if (serve_stopping) {
        static const char msg[] = "serve: second signal: exiting without waiting for requests\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(1);
    }
    serve_stopping = 1;
    if (serve_server)
        ws_server_stop(serve_server);
}

int cli_serve(int argc, char **argv)
{
    struct serve_opts o = { 0 };
    int rc = serve_parse(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc == 2) {
        fprintf(stderr, "serve: see 'omniserve serve --help'\n");
        return 2;
    }
    char name[256], err[512];
    if (o.hf_repo && o.model) {
        fprintf(stderr, "serve: give -m or --hf-repo, not both\n");
        return 2;
    }
    if (o.hf_file && !o.hf_repo) {
        fprintf(stderr, "serve: --hf-file needs --hf-repo\n");
        return 2;
    }
    /* -m qwen3-4b (not a file): the catalog's repo, in the quantization
     * that fits this machine (or -m ALIAS:QUANT) */
    if (o.model && access(o.model, F_OK) != 0) {
        const char *alias = o.model;
        rc = models_resolve_alias(alias, 8192, o.alias_repo, sizeof o.alias_repo, o.hf_quant,
                                  sizeof o.hf_quant, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, "serve: %s\n", err);
            return 2;
        }
        if (rc == 1) {
            fprintf(stderr, "serve: %s is %s, %s\n", alias, o.alias_repo, o.hf_quant);
            o.hf_repo = o.alias_repo;
            o.model = NULL;
            if (!o.served_name)
                o.served_name = alias;
        }
    }
    if (o.embeddings && !o.model && !o.hf_repo) {
        fprintf(stderr, "serve: --embeddings makes the chat model (-m) embed; give -m, or "
                        "--embedding-model FILE for an embedding model\n");
        return 2;
    }
    if (!o.wp.tls_cert != !o.wp.tls_key) {
        fprintf(stderr, "serve: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (!o.served_name) {
        serve_default_name(o.hf_repo ? (o.hf_file ? o.hf_file : o.hf_repo)
                                     : o.model ? o.model : "none", name, sizeof name);
        o.served_name = name;
    }
    /* A bad MCP config stops the server here, naming the file and field. */
    struct mcp_config *mcp_cfg = NULL;
    if (o.mcp_config && mcp_config_load(o.mcp_config, &mcp_cfg, err, sizeof err) < 0) {
        fprintf(stderr, "serve: --mcp-config %s\n", err);
        return 2;
    }
    struct api_params ap = api_default_params();
    ap.api_key = o.api_key;
    ap.served_model_name = o.served_name;
    ap.strict_model_id = o.strict_model_id;
    ap.responses_store_max = o.responses_store;
    ap.responses_store_bytes = (size_t)o.responses_store_mb << 20;
    ap.max_tokens_reject = o.max_tokens_reject;
    if (apireq_set_default_bias(o.logit_bias, err, sizeof err) < 0) {
        fprintf(stderr, "serve: %s\n", err);
        return 2;
    }
    ap.tool_parser = o.tool_parser;
    ap.reasoning_format = o.reasoning_format;
    ap.version = OMNI_VERSION;
    struct api *api = api_new(&ap, err, sizeof err);
    if (!api) {
        fprintf(stderr, "serve: %s\n", err);
        return 1;
    }
    if (o.ep.device && !strncmp(o.ep.device, "cuda", 4)) /* /metrics: its memory, utilisation */
        metrics_gpu(api_metrics(api), o.ep.device[4] == ':' ? atoi(o.ep.device + 5) : 0);
    if (web_configure(&o.web, err, sizeof err) < 0) {
        fprintf(stderr, "serve: %s\n", err);
        api_free(api);
        return 1;
    }
    o.wp.handler = api_handle;
    o.wp.on_done = api_on_done;
    o.wp.upgrade = api_upgrade;
    o.wp.user = api;
    if (o.tts_model && !o.tts_codec) {
        fprintf(stderr, "serve: --tts-model needs --tts-codec DAC.gguf\n");
        api_free(api);
        return 2;
    }
    if (o.sp.vad_path && !o.sp.model_path) {
        fprintf(stderr, "serve: --vad-model needs --stt-model\n");
        api_free(api);
        return 2;
    }
    /* One compute budget: the engine, speech, vision and TTS take their
     * threads from it per unit of work, never more than --threads at once. */
    struct compute_params cp = compute_default_params();
    cp.n_threads = o.ep.n_threads;
    struct compute *budget = compute_new(&cp, err, sizeof err);
    if (!budget) {
        fprintf(stderr, "serve: %s\n", err);
        api_free(api);
        return 1;
    }
    compute_set_default(budget);
    o.ep.compute = o.sp.compute = budget;
    struct stt *stt = NULL;
    if (o.sp.model_path) {
        double t0 = omni_time_s();
        if (!(stt = stt_new(&o.sp, err, sizeof err))) {
            fprintf(stderr, "serve: %s\n", err);
            api_free(api);
            compute_free(budget);
            return 1;
        }
        api_set_stt(api, stt);
        OMNI_INFO("serve: speech model %s ready in %.1f s (%d workers%s)", o.sp.model_path,
                  omni_time_s() - t0, stt_n_workers(stt), o.sp.vad_path ? ", VAD" : "");
    }
    realtime_set_limits(&o.rl);
    /* espeak-ng voices need no download: speech out is on unless --no-tts. */
    struct tts *tts = NULL;
    if (!o.no_tts) {
        if (!(tts = tts_new(NULL, err, sizeof err)))
            OMNI_WARN("serve: no speech synthesis: %s", err);
        api_set_tts(api, tts);
    }
    struct serve_vision vis = { 0 };
    if (o.mmproj && serve_vision_load(&o, api, &vis) < 0) {
        tts_free(tts);
        stt_free(stt);
        api_free(api);
        compute_free(budget);
        return 1;
    }
    struct ws_server *srv = ws_server_new(&o.wp, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "serve: %s\n", err);
        tts_free(tts);
        stt_free(stt);
        api_free(api);
        serve_vision_free(&vis);
        compute_free(budget);
        return 1;
    }

    /* Only the service thread takes the signals: block them while the
     * loader (and through it the engine and its workers) are created. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    /* MCP servers connect in the background; their children are ours to
     * stop (mcp_free below) */
    struct mcp *mcp = NULL;
    if (mcp_cfg) {
        o.mcpp.client_version = OMNI_VERSION;
        if (!(mcp = mcp_new(mcp_cfg, &o.mcpp, err, sizeof err)))
            OMNI_WARN("serve: no MCP tools: %s", err);
        api_set_mcp(api, mcp, (int)o.mcp_max_turns);
        mcp_config_free(mcp_cfg);
        mcp_cfg = NULL;
    }
    struct serve_loader L = { .o = &o, .api = api, .srv = srv, .tts = tts };
    pthread_t loader;
    bool have_loader = false;
    if (o.model || o.hf_repo || o.n_embed || o.tts_model) {
        have_loader = pthread_create(&loader, NULL, serve_load, &L) == 0;
        if (!have_loader) {
            fprintf(stderr, "serve: cannot start the loader thread\n");
            L.failed = 1;
            ws_server_stop(srv);
        }
    } else {
        api_set_unavailable(api, "the server was started without a model; restart it with "
                                 "'omniserve serve -m FILE.gguf' (or 'make run MODEL=FILE.gguf')");
    }
    serve_server = srv;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = serve_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    OMNI_INFO("serve: listening on %s://%s:%d (model %s%s%s)", o.wp.tls_cert ? "https" : "http",
              o.wp.host, o.wp.port,
              o.hf_repo ? o.hf_repo : o.model ? o.model : "none", o.hf_file ? "/" : "",
              o.hf_file ? o.hf_file : "");
    ws_server_run(srv);
    serve_stopping = 1; /* a download still running gives up (the .part stays) */
    OMNI_INFO("serve: stopped");

    if (have_loader)
        pthread_join(loader, NULL);
    /* MCP before the engine: tool loops still running end (their next turn
     * would go to the engine) and the MCP children are stopped and reaped. */
    mcp_free(mcp);
    /* Vision workers first (one may be submitting), then the engine: its
     * final events still find their responses, which the server's teardown
     * then releases. */
    api_images_pool_free(vis.pool);
    vis.pool = NULL;
    if (L.tts_added) {            /* its voices speak through the engine: stop them first */
        tts_free(tts);
        tts = NULL;
    }
    engine_free(L.engine);
    /* after the engine: its final events reached the jobs; queued encoder
     * jobs end here, while their responses still exist */
    embed_service_free(L.embed);
    /* Speech workers finish or fail their jobs while the responses and
     * sockets they write to still exist. */
    stt_free(stt);
    tts_free(tts);                /* cancels what is still speaking; its responses end */
    serve_server = NULL;
    ws_server_free(srv);
    api_free(api);
    serve_vision_free(&vis);
    compute_free(budget);         /* every client is gone; also clears the default */
    llm_model_free(L.model);
    llm_model_free(L.tts_lm);
    dac_free(L.tts_dac);
    apireq_set_default_bias(NULL, err, sizeof err);
    return L.failed ? 1 : 0;
}
