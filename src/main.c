/* main.c - the omniserve command line: one binary, one subcommand per task. */
#include "src/cli/cli.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <string.h>


struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    { "inspect", cli_inspect, "inspect FILE.gguf            metadata, tokenizer and tensor table" },
    { "tokenize", cli_tokenize, "tokenize -m FILE.gguf TEXT   token ids and pieces" },
    { "run", cli_run, "run -m FILE.gguf -p PROMPT   generate text (or --chat QUESTION)" },
    { "bench", cli_bench, "bench -m FILE.gguf -p N -n N prompt and generation speed" },
    { "serve", cli_serve, "serve -m FILE.gguf [--port N]  OpenAI/Anthropic HTTP server" },
    { "pull", cli_pull, "pull REPO[:FILE] | ALIAS      download a GGUF from Hugging Face into the cache" },
    { "recommend", cli_recommend, "recommend [--ram GIB]         which models and quantizations fit this machine" },
    { "models", cli_models, "models                        the GGUF files in the model cache" },
    { "bench-serve", cli_bench_serve, "bench-serve --url URL        HTTP load generator against a running server" },
    { "bench-engine", cli_bench_engine, "bench-engine -m FILE.gguf   the engine under concurrent load" },
    { "template", cli_template, "template -m FILE.gguf --messages M.json  render the chat template" },
    { "transcribe", cli_transcribe, "transcribe -m ggml-*.bin FILE speech to text (text/json/srt/vtt)" },
    { "speak", cli_speak, "speak [--voice V] TEXT -o OUT   text to speech (espeak-ng voices; wav/mp3/opus/aac/flac/pcm)" },
    { "codec-decode", cli_codec_decode, "codec-decode --codec DAC.gguf --codes C.json -o OUT.wav  neural codec codes to audio" },
    { "voice-clone", cli_voice_clone, "voice-clone REF.wav --text T -o S.json --codec DAC.gguf --stt-model W.bin  OuteTTS speaker from a recording" },
    { "bench-tts", cli_bench_tts, "bench-tts --codec DAC.gguf [--seconds S]  neural codec decode speed (frames/s, x real time)" },
    { "vad", cli_vad, "vad -m silero.bin FILE        speech segments (Silero VAD)" },
    { "bench-stt", cli_bench_stt, "bench-stt -m ggml-*.bin --file F  Whisper encoder/decoder speed and RTF" },
    { "embed", cli_embed, "embed -m FILE.gguf TEXT...      embedding vectors (bert, nomic-bert, Qwen3-Embedding; stdin lines)" },
    { "rerank", cli_rerank, "rerank -m FILE.gguf --query Q DOC...  relevance scores (cross-encoders, Qwen3-Reranker)" },
    { "bench-embed", cli_bench_embed, "bench-embed -m FILE.gguf --batch 1,8,32  embedding throughput per batch size" },
    { "bench-vision", cli_bench_vision, "bench-vision -m LM --mmproj MM --image F  vision encoder, cache and fused-turn speed" },
    { "bench-voice", cli_bench_voice, "bench-voice -m LM --stt-model W --vad-model V --file F  voice-agent latency (end of speech -> first audio)" },
};

static void usage(FILE *f)
{
    fprintf(f, "omniserve %s - local multimodal inference server\n\nusage: omniserve COMMAND [options]\n\n",
            OMNI_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %s\n", commands[i].help);
    fprintf(f, "\nRun 'omniserve COMMAND --help' for the options of a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("omniserve %s\n", OMNI_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "omniserve: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
