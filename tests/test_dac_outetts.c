/* test_dac_outetts.c - the OuteTTS 1.0 text side (audio/tts/outetts.c).
 *
 * Fixtures in tests/fixtures/outetts/ (tools/random_outetts.py --prompt-ids,
 * the prompt built in Python from the published interface-v3 format and
 * tokenized byte by byte around the special tokens):
 *   speaker_tiny.json     a 5-word speaker profile
 *   prompt_speaker.json   {"prompt", "ids"} of a messy text with that speaker
 *   prompt_plain.json     the same without a speaker
 * The tiny vocabulary's model (and the tiny 2 x 1024-code DAC of
 * tools/random_dac.py --shape tiny-1024) are written at test time (needs
 * /usr/bin/python3 with numpy; skipped without). */
#include "test.h"

#include "audio/codec/dac.h"
#include "audio/tts/outetts.h"
#include "audio/tts/outetts_clone.h"
#include "audio/tts/outetts_speak.h"
#include "audio/tts/tts.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "src/cli/cli.h"
#include "src/engine/engine.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#define MESSY_TEXT "  Hi \xe2\x80\x9cthere\xe2\x80\x9d \xe2\x80\x94 it\xe2\x80\x99s\xe2\x80\xa6\n\tfine.  "

static void free_spk(void *s) { outetts_speaker_free(s); }
static void free_tok(void *t) { tokenizer_free(t); }
static void free_vocab(void *v) { outetts_vocab_free(v); }

/* tools/random_outetts.py's tiny model, made once per run; NULL to skip */
static const char *tiny_lm(void)
{
    static char path[600];
    static int made = 0;
    if (made == 0) {
        snprintf(path, sizeof path, "%s/outetts_tiny_lm.gguf", test_tmpdir());
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/random_outetts.py -o %s >/dev/null 2>&1",
                 path);
        made = system(cmd) == 0 ? 1 : -1;
    }
    return made == 1 ? path : NULL;
}

/* the prompt (string) of a fixture */
static char *fixture_prompt(const char *name, cJSON **ids)
{
    char *text = test_read_file(test_fixture(name), NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j)
        return NULL;
    char *p = strdup(cJSON_GetObjectItem(j, "prompt")->valuestring);
    *ids = cJSON_DetachItemFromObject(j, "ids");
    cJSON_Delete(j);
    return p;
}

TEST(outetts_prompt_matches_published_format)
{
    char err[256];
    struct outetts_speaker *s = outetts_speaker_load(test_fixture("outetts/speaker_tiny.json"),
                                                     err, sizeof err);
    CHECK_MSG(s, "%s", err);
    test_defer(free_spk, s);
    CHECK_EQ(outetts_speaker_n_words(s), 5);
    CHECK_EQ(outetts_speaker_n_frames(s), 13);
    cJSON *ids1 = NULL, *ids2 = NULL;
    char *want1 = fixture_prompt("outetts/prompt_speaker.json", &ids1);
    char *want2 = fixture_prompt("outetts/prompt_plain.json", &ids2);
    char *got1 = outetts_prompt(MESSY_TEXT, s, err, sizeof err);
    char *got2 = outetts_prompt("\xc3\x9cn\xc3\xaf" "code  text, no speaker!", NULL, err, sizeof err);
    bool ok1 = want1 && got1 && !strcmp(want1, got1), ok2 = want2 && got2 && !strcmp(want2, got2);
    if (!ok1)
        fprintf(stderr, "    want: %s\n    got:  %s\n", want1, got1);
    free(want1), free(want2), free(got1), free(got2);
    cJSON_Delete(ids1);
    cJSON_Delete(ids2);
    CHECK(ok1);
    CHECK(ok2);
}

/* Our tokenizer on our prompt gives the reference ids (special tokens parsed). */
TEST(outetts_prompt_token_ids)
{
    const char *lm = tiny_lm();
    if (!lm)
        SKIP("no /usr/bin/python3 with numpy for tools/random_outetts.py");
    char err[256];
    struct gguf *g = gguf_open(lm, err, sizeof err);
    CHECK_MSG(g, "%s", err);
    struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
    gguf_free(g);
    CHECK_MSG(tok, "%s", err);
    test_defer(free_tok, tok);
    struct outetts_speaker *s = outetts_speaker_load(test_fixture("outetts/speaker_tiny.json"),
                                                     err, sizeof err);
    CHECK(s);
    test_defer(free_spk, s);
    for (int k = 0; k < 2; k++) {
        cJSON *ids = NULL;
        char *want = fixture_prompt(k ? "outetts/prompt_plain.json" : "outetts/prompt_speaker.json",
                                    &ids);
        char *p = outetts_prompt(k ? "\xc3\x9cn\xc3\xaf" "code  text, no speaker!" : MESSY_TEXT,
                                 k ? NULL : s, err, sizeof err);
        int32_t got[4096];
        int n = p ? tokenizer_encode(tok, p, strlen(p), TOK_PARSE_SPECIAL, got, 4096, NULL) : -1;
        bool same = n == cJSON_GetArraySize(ids);
        for (int i = 0; same && i < n; i++)
            same = got[i] == cJSON_GetArrayItem(ids, i)->valueint;
        free(want);
        free(p);
        cJSON_Delete(ids);
        CHECK_MSG(same, "prompt %d: %d ids, or an id differs", k, n);
    }
}

TEST(outetts_text_normalization)
{
    static const struct { const char *in, *out; } cases[] = {
        { "  a\t\n b  ", "a b" },
        { "wait\xe2\x80\xa6 what", "wait... what" },
        { "\xe2\x80\x98q\xe2\x80\x99 \xe2\x80\x9c" "dq\xe2\x80\x9d a\xe2\x80\x93" "b\xe2\x80\x94" "c",
          "'q' \"dq\" a-b-c" },
        { "x\x01y\x7f" "z\xc2\x85w", "xyz w" },      /* U+0085 is whitespace first */
        { "\xe3\x80\x80" "full\xe3\x80\x80" "width ", "full width" },
        { "", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o = outetts_normalize(cases[i].in, strlen(cases[i].in));
        bool same = o && !strcmp(o, cases[i].out);
        if (!same)
            fprintf(stderr, "    case %zu: '%s'\n", i, o ? o : "(null)");
        free(o);
        CHECK(same);
    }
    CHECK(outetts_normalize("\xff", 1) == NULL);
}

TEST(outetts_speaker_separators)
{
    char err[256];
    /* ends in '.': a space, the last word unchanged; CJK without an end: "。" */
    static const char *spk_dot = "{\"text\":\"It is.\",\"words\":[{\"word\":\"is.\",\"duration\":0.1,"
                                 "\"c1\":[1],\"c2\":[2]}]}";
    static const char *spk_cjk = "{\"text\":\"\xe4\xbd\xa0\xe5\xa5\xbd\",\"words\":[{\"word\":"
                                 "\"\xe4\xbd\xa0\xe5\xa5\xbd\",\"duration\":0.1,\"c1\":[1],\"c2\":[2]}]}";
    struct outetts_speaker *a = outetts_speaker_parse(spk_dot, strlen(spk_dot), "dot", err, sizeof err);
    struct outetts_speaker *b = outetts_speaker_parse(spk_cjk, strlen(spk_cjk), "cjk", err, sizeof err);
    CHECK(a && b);
    test_defer(free_spk, a);
    test_defer(free_spk, b);
    char *pa = outetts_prompt("Next", a, err, sizeof err), *pb = outetts_prompt("Go", b, err, sizeof err);
    bool ok = pa && strstr(pa, "<|text_start|>It is. Next<|text_end|>") &&
              strstr(pa, "<|word_start|>is.<|features|>") &&
              pb && strstr(pb, "<|text_start|>\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82" "Go<|text_end|>") &&
              strstr(pb, "<|word_start|>\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82<|features|>");
    free(pa);
    free(pb);
    CHECK(ok);
}

TEST(outetts_rejects_bad_input)
{
    char err[256];
    static const struct { const char *json, *msg; } bad[] = {
        { "[1,2]", "not a JSON object" },
        { "{\"words\":[]}", "'text'" },
        { "{\"text\":\"a\"}", "'words'" },
        { "{\"text\":\"a\",\"words\":[]}", "'words'" },
        { "{\"text\":\"a\",\"words\":[{\"word\":\"a\",\"duration\":0.1,\"c1\":[1,2],\"c2\":[3]}]}",
          "c1 has 2 codes, c2 1" },
        { "{\"text\":\"a\",\"words\":[{\"word\":\"a\",\"duration\":0.1,\"c1\":[1024],\"c2\":[3]}]}",
          "c1[0] is not a code" },
        { "{\"text\":\"a\",\"words\":[{\"word\":\"a\",\"duration\":-1,\"c1\":[1],\"c2\":[3]}]}",
          "'duration'" },
        { "{\"text\":\"a\",\"words\":[{\"word\":\"a\",\"duration\":0.1,\"c2\":[3]}]}", "'c1'" },
        { "{\"text\":", "not a JSON object" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        struct outetts_speaker *s = outetts_speaker_parse(bad[i].json, strlen(bad[i].json), "x.json",
                                                          err, sizeof err);
        outetts_speaker_free(s);
        CHECK_MSG(!s, "case %zu parsed", i);
        CHECK_STR_CONTAINS(err, bad[i].msg);
        CHECK_STR_CONTAINS(err, "x.json");
    }
    CHECK(outetts_speaker_load("/nonexistent/s.json", err, sizeof err) == NULL);
    CHECK(outetts_prompt(" \n\t ", NULL, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "empty text");
    char *big = malloc(OUTETTS_MAX_TEXT_BYTES + 2);
    CHECK(big);
    memset(big, 'a', OUTETTS_MAX_TEXT_BYTES + 1);
    big[OUTETTS_MAX_TEXT_BYTES + 1] = 0;
    char *p = outetts_prompt(big, NULL, err, sizeof err);
    free(big);
    CHECK(p == NULL);
    CHECK(outetts_prompt("\xc3", NULL, err, sizeof err) == NULL);
}

/* Generated ids -> (c1, c2) frames per word: lone or doubled halves of a
 * pair dropped, the word's end and the audio's end reported. */
TEST(outetts_parser_frames)
{
    const char *lm = tiny_lm();
    if (!lm)
        SKIP("no /usr/bin/python3 with numpy for tools/random_outetts.py");
    char err[256];
    struct gguf *g = gguf_open(lm, err, sizeof err);
    CHECK(g);
    struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
    gguf_free(g);
    CHECK(tok);
    test_defer(free_tok, tok);
    struct outetts_vocab *v = outetts_vocab_new(tok, err, sizeof err);
    CHECK_MSG(v, "%s", err);
    test_defer(free_vocab, v);
    const char *gen = "hi<|features|><|t_0.20|><|code|><|c1_5|><|c2_6|><|c1_7|><|c2_8|>"
                      "<|c2_9|><|c1_1|><|c1_2|><|c2_3|><|word_end|>\n<|word_start|>yo<|code|>"
                      "<|c1_1023|><|c2_0|><|audio_end|>";
    int32_t ids[256];
    int n = tokenizer_encode(tok, gen, strlen(gen), TOK_PARSE_SPECIAL, ids, 256, NULL);
    CHECK(n > 0);
    struct outetts_parser p;
    outetts_parser_init(&p);
    int words = 0, ended = 0;
    int32_t want0[3][2] = { { 5, 6 }, { 7, 8 }, { 2, 3 } };
    for (int i = 0; i < n; i++) {
        enum outetts_event ev = outetts_parser_push(&p, v, ids[i]);
        if (ev == OUTETTS_WORD_END) {
            CHECK_EQ(words, 0);
            CHECK_EQ(p.n_frames, 3);
            for (int f = 0; f < 3; f++) {
                CHECK_EQ(p.frames[f][0], want0[f][0]);
                CHECK_EQ(p.frames[f][1], want0[f][1]);
            }
            p.n_frames = 0;
            words++;
        } else if (ev == OUTETTS_AUDIO_END) {
            CHECK_EQ(p.n_frames, 1);
            CHECK_EQ(p.frames[0][0], 1023);
            CHECK_EQ(p.frames[0][1], 0);
            ended = 1;
        }
    }
    CHECK(ended && words == 1 && p.total_frames == 4);
    int32_t stop[2];
    CHECK_EQ(outetts_vocab_stop_tokens(v, stop), 2);
    CHECK_EQ(stop[0], tokenizer_find(tok, "<|audio_end|>", 13));
}

// ---- end to end: tiny random LM + tiny codec through the engine ----

static void free_model(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }
static void free_dac_model(void *d) { dac_free(d); }

/* the tiny decoder with 2 codebooks of 1024 (tools/random_dac.py --shape tiny-1024) */
static const char *tiny_codec(void)
{
    static char path[600];
    static int made = 0;
    if (made == 0) {
        snprintf(path, sizeof path, "%s/outetts_tiny_dac.gguf", test_tmpdir());
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/random_dac.py --shape tiny-1024 -o %s "
                 ">/dev/null 2>&1", path);
        made = system(cmd) == 0 ? 1 : -1;
    }
    return made == 1 ? path : NULL;
}

/* The tiny LM and codec, and an engine of 2 threads serving the LM as
 * "outetts" (deterministic when asked): all freed after the test. */
struct tiny_tts {
    struct llm_model *m;
    struct dac_model *dac;
    struct engine *e;
};

static void tiny_tts_start(struct tiny_tts *t, const char *lm, const char *codec, bool deterministic)
{
    char err[256];
    memset(t, 0, sizeof *t);
    t->m = llm_model_load(lm, NULL, err, sizeof err);
    CHECK_MSG(t->m, "%s", err);
    test_defer(free_model, t->m);
    t->dac = dac_load(codec, err, sizeof err);
    CHECK_MSG(t->dac, "%s", err);
    test_defer(free_dac_model, t->dac);
    struct engine_params ep = engine_default_params();
    ep.n_threads = 2;
    ep.kv_memory_bytes = 16 << 20;
    ep.deterministic = deterministic;
    t->e = engine_new(&ep, err, sizeof err);
    CHECK_MSG(t->e, "%s", err);
    test_defer(free_engine, t->e);
    CHECK_MSG(engine_add_model(t->e, t->m, "outetts", err, sizeof err) == 0, "%s", err);
    CHECK_MSG(engine_start(t->e, err, sizeof err) == 0, "%s", err);
}

struct collected {
    int64_t n, calls;
    int stop_after;   /* > 0: stop after this many chunks */
};

static int collect(void *user, const float *pcm, size_t n)
{
    struct collected *c = user;
    for (size_t i = 0; i < n; i++)
        if (!(pcm[i] >= -1.0f && pcm[i] <= 1.0f))
            return 1;
    c->n += (int64_t)n;
    c->calls++;
    return c->stop_after > 0 && c->calls >= c->stop_after;
}

/* The audio is as long as the frames the model wrote; the second request
 * with the same speaker reuses the speaker prompt's KV blocks; a stopped
 * request frees its sequence. */
TEST(outetts_speak_end_to_end)
{
    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    char err[256];
    struct outetts_speaker *s = outetts_speaker_load(test_fixture("outetts/speaker_tiny.json"),
                                                     err, sizeof err);
    CHECK(s);
    test_defer(free_spk, s);
    struct tiny_tts tt;
    tiny_tts_start(&tt, lm, codec, false);
    if (test_failed_now())
        return;
    struct dac_model *dac = tt.dac;
    struct engine *e = tt.e;

    struct outetts_speak_params p = outetts_speak_default_params();
    p.text = "Hello there, how are you today?";
    p.speaker = s;
    p.max_tokens = 200;
    p.seed = 7;
    p.first_chunk_frames = 4;
    p.chunk_frames = 8;
    struct outetts_speak_stats st1, st2;
    struct collected c1 = { 0 }, c2 = { 0 };
    CHECK_MSG(outetts_speak(e, 0, dac, NULL, &p, collect, &c1, &st1, err, sizeof err) == 0, "%s",
              err);
    CHECK(st1.frames > 0);   /* the tiny model favours code tokens */
    CHECK_EQ(c1.n, dac_samples_for_frames(dac, st1.frames));
    CHECK_EQ(st1.samples, c1.n);
    CHECK_EQ(st1.completion_tokens, 200);
    CHECK(st1.prompt_tokens > 100);
    /* same text and speaker, same seed: the prompt comes from the prefix
     * cache (the format puts the text before the speaker's words, so only
     * a repeated text shares the speaker's part), the same audio length */
    CHECK(outetts_speak(e, 0, dac, NULL, &p, collect, &c2, &st2, err, sizeof err) == 0);
    CHECK(st2.cached_tokens >= 64);
    CHECK_EQ(st2.frames, st1.frames);
    CHECK_EQ(c2.n, c1.n);
    /* a client that leaves after its first chunk: cancelled, nothing left running */
    struct collected c3 = { .stop_after = 1 };
    struct outetts_speak_stats st3;
    p.max_tokens = 2000;
    CHECK(outetts_speak(e, 0, dac, NULL, &p, collect, &c3, &st3, err, sizeof err) == 0);
    CHECK_EQ(c3.calls, 1);
    CHECK(st3.completion_tokens < 2000);
    struct engine_stats es;
    for (int i = 0; i < 2000; i++) {   /* the engine retires it at its next step */
        engine_stats(e, &es);
        if (es.running == 0)
            break;
        usleep(5000);
    }
    CHECK_EQ(es.running, 0);
    CHECK_EQ(es.waiting, 0);
    /* long text: chunks of whole sentences, one request each */
    struct collected c4 = { 0 };
    struct outetts_speak_stats st4;
    p.max_tokens = 40;
    p.text = "This is the first sentence of a longer text, and it goes on for a while. "
             "Here comes the second one, which is also rather long for a test like this. "
             "The third sentence makes sure that the text is over the chunk size by now. "
             "And a fourth, short one. Then the fifth sentence brings us near the end. "
             "Finally the sixth sentence closes the whole thing.";
    CHECK_MSG(outetts_speak(e, 0, dac, NULL, &p, collect, &c4, &st4, err, sizeof err) == 0, "%s",
              err);
    CHECK_EQ(st4.completion_tokens, 80);     /* two chunks of 40 tokens */
    CHECK_EQ(c4.n, st4.samples);
    /* bad input: empty text, a codec with too small codebooks */
    p.text = "   ";
    CHECK(outetts_speak(e, 0, dac, NULL, &p, collect, &c3, &st3, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "empty text");
    struct dac_model *small = dac_load(test_fixture("dac/random_tiny.gguf"), err, sizeof err);
    CHECK(small);
    p.text = "Hi.";
    int rc = outetts_speak(e, 0, small, NULL, &p, collect, &c3, &st3, err, sizeof err);
    dac_free(small);
    CHECK(rc < 0);
    CHECK_STR_CONTAINS(err, "needs 2 of 1024");
}

/* The benchmark script: every word as the format writes it, the counts it
 * reports; spoken through the engine, the audio holds exactly its frames, the
 * model wrote exactly its tokens and ended the audio itself. */
TEST(outetts_scripted_words)
{
    char err[256];
    int words = 0, frames = 0;
    char *sc = outetts_script("  Hi there,  world! ", false, 3, &words, &frames, err, sizeof err);
    CHECK_MSG(sc, "%s", err);
    test_defer(free, sc);
    CHECK_EQ(words, 3);
    CHECK_STR_CONTAINS(sc, "<|word_start|>Hi<|features|><|t_");
    CHECK_STR_CONTAINS(sc, "<|word_end|>\n<|word_start|>there,<|features|>");
    CHECK_STR_CONTAINS(sc, "<|word_start|>world!<|features|>");
    CHECK(strstr(sc, "<|code|><|c1_") != NULL);
    const char *tail = "<|word_end|>\n<|audio_end|>";
    CHECK(strlen(sc) > strlen(tail) && !strcmp(sc + strlen(sc) - strlen(tail), tail));
    int c1 = 0;
    for (const char *q = sc; (q = strstr(q, "<|c1_")); q++)
        c1++;
    CHECK_EQ(c1, frames);
    CHECK(frames >= 3 * 15);   /* at least 0.12 s + 60 ms a character a word */
    char *sc2 = outetts_script("Hi there", true, 3, NULL, NULL, err, sizeof err);
    CHECK(sc2);
    CHECK(!strncmp(sc2, "Hi<|features|>", 14));   /* the prompt wrote the first <|word_start|> */
    free(sc2);
    CHECK(!outetts_script(" \t ", false, 3, NULL, NULL, err, sizeof err));

    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    struct tiny_tts tt;
    tiny_tts_start(&tt, lm, codec, false);
    if (test_failed_now())
        return;
    struct outetts_speak_params p = outetts_speak_default_params();
    p.text = "Hi there, world!";
    p.scripted = true;
    p.seed = 3;
    p.first_chunk_frames = 4;
    p.chunk_frames = 8;
    struct outetts_speak_stats st;
    struct collected c = { 0 };
    CHECK_MSG(outetts_speak(tt.e, 0, tt.dac, NULL, &p, collect, &c, &st, err, sizeof err) == 0,
              "%s", err);
    CHECK_EQ(st.frames, frames);
    CHECK_EQ(st.words, 3);
    CHECK(st.audio_end);
    CHECK_EQ(c.n, dac_samples_for_frames(tt.dac, frames));
    struct gguf *g = gguf_open(lm, err, sizeof err);
    CHECK(g);
    struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
    gguf_free(g);
    CHECK(tok);
    test_defer(free_tok, tok);
    int32_t ids[4096];
    int n = tokenizer_encode(tok, sc, strlen(sc), TOK_PARSE_SPECIAL, ids, 4096, NULL);
    CHECK_EQ(st.completion_tokens, n);   /* the stop token, forced, counts */
}

/* speak -m ... -o out.wav: a wav of the samples the frames give */
TEST(outetts_cli_speak)
{
    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    char out[600];
    snprintf(out, sizeof out, "%s/outetts_speak.wav", test_tmpdir());
    char *a_lm = strdup(lm), *a_codec = strdup(codec);
    char *a_voice = strdup(test_fixture("outetts/speaker_tiny.json"));
    char *argv[] = { "speak", "-m", a_lm, "--codec", a_codec, "--voice", a_voice, "--max-tokens",
                     "120", "--threads", "2", "--seed", "3", "Good morning.", "-o", out };
    int rc = cli_speak(16, argv);
    char *bad_argv[] = { "speak", "-m", a_lm, "--voice", a_voice, "Hi", "-o", out };
    int rc_bad = cli_speak(8, bad_argv);   /* no --codec */
    free(a_lm), free(a_codec), free(a_voice);
    CHECK_EQ(rc, 0);
    CHECK(rc_bad != 0);
    struct stat stt;
    CHECK(stat(out, &stt) == 0);
    CHECK(stt.st_size >= 44);
}

/* The voice backend: speaker files of a voices directory are voices beside
 * the espeak ones and speak through the engine; a bad speaker file is named. */
TEST(outetts_tts_backend)
{
    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    char err[512], dir[600], path[700], bad_dir[600];
    snprintf(dir, sizeof dir, "%s/voices", test_tmpdir());
    snprintf(bad_dir, sizeof bad_dir, "%s/voices_bad", test_tmpdir());
    mkdir(dir, 0755);
    mkdir(bad_dir, 0755);
    size_t len;
    char *spk = test_read_file(test_fixture("outetts/speaker_tiny.json"), &len);
    CHECK(spk);
    snprintf(path, sizeof path, "%s/alice.json", dir);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(spk, 1, len, f) == len;
    if (f)
        fclose(f);
    free(spk);
    snprintf(path, sizeof path, "%s/broken.json", bad_dir);
    f = fopen(path, "wb");
    if (f) {
        fputs("{\"text\": 3}", f);
        fclose(f);
    }
    CHECK(ok);
    struct tiny_tts tt;
    tiny_tts_start(&tt, lm, codec, false);
    if (test_failed_now())
        return;
    struct dac_model *dac = tt.dac;
    struct engine *e = tt.e;
    struct tts *t = tts_new(NULL, err, sizeof err);
    if (!t)
        SKIP("no espeak-ng data for the tts core");
    int rc_bad = tts_add_outetts(t, e, 0, dac, bad_dir, err, sizeof err);
    bool named = strstr(err, "broken.json") != NULL;
    int rc = tts_add_outetts(t, e, 0, dac, dir, err, sizeof err);
    struct tts_voice_info vi;
    int found = tts_voice_find(t, "alice", &vi, err, sizeof err);
    int found2 = tts_voice_find(t, "outetts", &vi, err, sizeof err);
    struct tts_stream_params sp = tts_stream_default_params();
    sp.voice = "alice";
    float *pcm = NULL;
    size_t n = 0;
    int rate = 0;
    int rs = tts_synthesize(t, &sp, "Hi there. This is a test.", &pcm, &n, &rate, err, sizeof err);
    free(pcm);
    tts_free(t);
    CHECK(rc_bad < 0 && named);
    CHECK_EQ(rc, 0);
    CHECK_EQ(found, 0);
    CHECK_EQ(found2, 0);
    CHECK_MSG(rs == 0, "%s", err);
    CHECK_EQ(rate, 24000);
}

struct chat_collect {
    int32_t toks[256];
    int n;
    bool done;
};

static void chat_event(void *user, const struct engine_event *ev)
{
    struct chat_collect *c = user;
    if (ev->type == ENGINE_EV_TOKEN && c->n < 256)
        c->toks[c->n++] = ev->token;
    else if (ev->type != ENGINE_EV_TOKEN)
        __atomic_store_n(&c->done, true, __ATOMIC_RELEASE);
}

/* --deterministic: a TTS request batched with a chat request gives the same
 * audio, and the chat the same tokens, as each alone. */
TEST(outetts_deterministic_with_chat)
{
    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    char err[256];
    struct tiny_tts tt;
    tiny_tts_start(&tt, lm, codec, true);
    if (test_failed_now())
        return;
    struct dac_model *dac = tt.dac;
    struct engine *e = tt.e;
    int32_t chat_prompt[40];
    for (int i = 0; i < 40; i++)
        chat_prompt[i] = 32 + (i * 7) % 90;
    struct engine_request rq = engine_default_request();
    rq.prompt = chat_prompt;
    rq.n_prompt = 40;
    rq.max_tokens = 120;
    rq.sampling.seed = 5;
    rq.on_event = chat_event;
    struct outetts_speak_params p = outetts_speak_default_params();
    p.text = "Deterministic speech, please.";
    p.max_tokens = 150;
    p.seed = 11;
    struct collected a1 = { 0 }, a2 = { 0 };
    struct outetts_speak_stats s1, s2;
    struct chat_collect c1 = { .n = 0 }, c2 = { .n = 0 };
    /* alone: chat, then speech */
    rq.user = &c1;
    CHECK(engine_generate(e, &rq, err, sizeof err) == 0);
    CHECK(outetts_speak(e, 0, dac, NULL, &p, collect, &a1, &s1, err, sizeof err) == 0);
    /* together: the chat is submitted first and runs while the speech does */
    rq.user = &c2;
    uint64_t id;
    CHECK(engine_submit(e, &rq, &id, err, sizeof err) == 0);
    int rc = outetts_speak(e, 0, dac, NULL, &p, collect, &a2, &s2, err, sizeof err);
    for (int i = 0; i < 4000 && !__atomic_load_n(&c2.done, __ATOMIC_ACQUIRE); i++)
        usleep(5000);
    CHECK(__atomic_load_n(&c2.done, __ATOMIC_ACQUIRE));
    CHECK_EQ(rc, 0);
    CHECK_EQ(c1.n, c2.n);
    CHECK(memcmp(c1.toks, c2.toks, (size_t)c1.n * sizeof *c1.toks) == 0);
    CHECK_EQ(s1.completion_tokens, s2.completion_tokens);
    CHECK_EQ(s1.frames, s2.frames);
    CHECK_EQ(a1.n, a2.n);
}

// ---- several TTS streams at once (tts engine workers) ----

struct conc_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float *pcm;
    size_t n, cap;
    bool done, failed, got_audio;
    struct conc_stream *wait_for;   /* on the first audio, block until this one has audio */
    bool waited_ok;
    struct tts_stream *self;
};

static void conc_event(void *user, const struct tts_event *ev)
{
    struct conc_stream *c = user;
    if (ev->type == TTS_EV_AUDIO) {
        pthread_mutex_lock(&c->mu);
        bool first = !c->got_audio;
        c->got_audio = true;
        if (c->n + ev->n > c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 4096;
            while (cap < c->n + ev->n)
                cap *= 2;
            float *p = realloc(c->pcm, cap * sizeof *p);
            if (!p)
                c->failed = true;
            else {
                c->pcm = p;
                c->cap = cap;
            }
        }
        if (!c->failed) {
            memcpy(c->pcm + c->n, ev->pcm, ev->n * sizeof *ev->pcm);
            c->n += ev->n;
        }
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        if (first && c->wait_for) {
            /* Only a second worker can give the other stream audio while
             * this one's worker is held here; the deadline is for failure */
            struct conc_stream *o = c->wait_for;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 60;
            pthread_mutex_lock(&o->mu);
            while (!o->got_audio && !o->done)
                if (pthread_cond_timedwait(&o->cv, &o->mu, &ts) != 0)
                    break;
            c->waited_ok = o->got_audio;
            pthread_mutex_unlock(&o->mu);
        }
    } else if (ev->type == TTS_EV_DONE) {
        pthread_mutex_lock(&c->mu);
        c->done = true;
        c->failed = c->failed || ev->error != NULL;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

static void conc_wait(struct conc_stream *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static struct tts_stream *conc_start(struct tts *t, struct conc_stream *c, const char *text)
{
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    struct tts_stream_params sp = tts_stream_default_params();
    sp.voice = "outetts";
    char err[256];
    int code = 0;
    struct tts_stream *s = tts_stream_new(t, &sp, conc_event, c, &code, err, sizeof err);
    if (!s)
        return NULL;
    c->self = s;
    tts_stream_push(s, text, strlen(text));
    tts_stream_finish(s);
    return s;
}

static void conc_free(struct conc_stream *c)
{
    free(c->pcm);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static void free_tts(void *t) { tts_free(t); }

/* --deterministic: two OuteTTS streams in flight at once (the first one's
 * worker is held until the second has audio, which only a second worker
 * can give it) both give the audio each gives alone; a stream cancelled
 * at its first audio frees its sequence while another one speaks. */
TEST(outetts_tts_streams_concurrent)
{
    const char *lm = tiny_lm(), *codec = tiny_codec();
    if (!lm || !codec)
        SKIP("no /usr/bin/python3 with numpy for the tiny models");
    char err[256];
    struct tiny_tts tt;
    tiny_tts_start(&tt, lm, codec, true);
    if (test_failed_now())
        return;
    struct dac_model *dac = tt.dac;
    struct engine *e = tt.e;
    struct tts_params tp = tts_default_params();
    tp.engine_max_tokens = 120;
    struct tts *t = tts_new(&tp, err, sizeof err);
    if (!t)
        SKIP("no espeak-ng data for the tts core");
    test_defer(free_tts, t);
    CHECK_MSG(tts_add_outetts(t, e, 0, dac, NULL, err, sizeof err) == 0, "%s", err);
    const char *ta = "The first voice speaks here.", *tb = "A second one, at the same time.";

    /* alone, one after the other */
    struct conc_stream a1 = { 0 }, b1 = { 0 };
    struct tts_stream *s = conc_start(t, &a1, ta);
    CHECK(s);
    conc_wait(&a1);
    tts_stream_free(s);
    s = conc_start(t, &b1, tb);
    CHECK(s);
    conc_wait(&b1);
    tts_stream_free(s);
    CHECK(!a1.failed && !b1.failed);
    CHECK(a1.n > 0 && b1.n > 0);

    /* together */
    struct conc_stream a2 = { 0 }, b2 = { 0 };
    a2.wait_for = &b2;
    struct tts_stream *sa = conc_start(t, &a2, ta);
    struct tts_stream *sb = conc_start(t, &b2, tb);
    CHECK(sa && sb);
    conc_wait(&a2);
    conc_wait(&b2);
    tts_stream_free(sa);
    tts_stream_free(sb);
    CHECK(a2.waited_ok);   /* b spoke while a's worker was busy */
    CHECK(!a2.failed && !b2.failed);
    CHECK_EQ(a2.n, a1.n);
    CHECK_EQ(b2.n, b1.n);
    CHECK(a2.n == a1.n && memcmp(a2.pcm, a1.pcm, a1.n * sizeof *a1.pcm) == 0);
    CHECK(b2.n == b1.n && memcmp(b2.pcm, b1.pcm, b1.n * sizeof *b1.pcm) == 0);

    /* a cancelled stream beside a speaking one: its sequence goes */
    struct conc_stream c3 = { 0 }, b3 = { 0 };
    struct tts_stream *sc = conc_start(t, &c3, ta);
    struct tts_stream *sb3 = conc_start(t, &b3, tb);
    CHECK(sc && sb3);
    tts_stream_cancel(sc);   /* while its model writes (this one says its words at the end) */
    conc_wait(&c3);
    conc_wait(&b3);
    tts_stream_free(sc);
    tts_stream_free(sb3);
    CHECK(b3.n == b1.n && memcmp(b3.pcm, b1.pcm, b1.n * sizeof *b1.pcm) == 0);
    CHECK(c3.n < a1.n);
    struct engine_stats es;
    for (int i = 0; i < 2000; i++) {   /* the engine retires it at its next step */
        engine_stats(e, &es);
        if (es.running == 0 && es.waiting == 0)
            break;
        usleep(5000);
    }
    CHECK_EQ(es.running, 0);
    CHECK_EQ(es.waiting, 0);
    CHECK_EQ(es.kv_blocks_used, 0);   /* no block held by a sequence (cached ones may stay) */
    conc_free(&a1), conc_free(&b1), conc_free(&a2), conc_free(&b2), conc_free(&c3), conc_free(&b3);
}

// ---- voice cloning: features, word alignment, the CLI ----

/* outetts' features of a 200 Hz sine of amplitude 0.5: RMS 0.354, the
 * centroid at 200 Hz of 12 kHz, pitch (200 - 75) / 525 */
TEST(outetts_clone_features)
{
    enum { N = 24000 };
    float *x = malloc(N * sizeof *x);
    CHECK(x);
    for (int i = 0; i < N; i++)
        x[i] = 0.5f * sinf(2 * (float)M_PI * 200 * i / 24000.0f);
    struct outetts_features f;
    outetts_features(x, N, 24000, &f);
    free(x);
    CHECK_EQ(f.energy, 35);
    CHECK(f.spectral_centroid >= 1 && f.spectral_centroid <= 3);
    CHECK(f.pitch >= 23 && f.pitch <= 25);   /* the window's taper pulls the peak lag a little */
    outetts_features(NULL, 0, 24000, &f);
    CHECK(f.energy == 0 && f.spectral_centroid == 0 && f.pitch == 0);
    float nan_x[8] = { 0, NAN };
    outetts_features(nan_x, 8, 24000, &f);
    CHECK(f.energy == 0 && f.pitch == 0);
}

/* The transcript's words take the times of the recognized words they align
 * with; an unheard one shares the gap; punctuation and case do not matter. */
TEST(outetts_clone_alignment)
{
    struct outetts_clone_word ww[3] = { { "hello", 0.10, 0.50 }, { "wurld", 0.70, 1.00 } };
    struct outetts_clone_word out[8];
    int n = 0;
    char err[256];
    CHECK(outetts_clone_align("Hello,  big world!", ww, 2, out, &n, 8, err, sizeof err) == 0);
    CHECK_EQ(n, 3);
    CHECK_STR_CONTAINS(out[0].word, "Hello,");
    CHECK(fabs(out[0].t0_s - 0.10) < 1e-9 && fabs(out[0].t1_s - 0.50) < 1e-9);
    CHECK(fabs(out[1].t0_s - 0.50) < 1e-9 && fabs(out[1].t1_s - 0.70) < 1e-9);   /* unheard */
    CHECK(fabs(out[2].t0_s - 0.70) < 1e-9 && fabs(out[2].t1_s - 1.00) < 1e-9);   /* misheard */
    CHECK_STR_CONTAINS(out[2].word, "world!");
    CHECK(outetts_clone_align("  \t ", ww, 3, out, &n, 8, err, sizeof err) == OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "empty transcript");
    CHECK(outetts_clone_align("a b c", ww, 0, out, &n, 8, err, sizeof err) == OMNI_ERR_ARG);
    CHECK(outetts_clone_align("a b c", ww, 3, out, &n, 2, err, sizeof err) == OMNI_ERR_ARG);
}

static int write_silence_wav(const char *path, int seconds)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint32_t n = (uint32_t)seconds * 16000, bytes = n * 2;
    unsigned char h[44] = "RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data";
    uint32_t riff = 36 + bytes;
    memcpy(h + 4, &riff, 4);
    memcpy(h + 40, &bytes, 4);
    int ok = fwrite(h, 1, 44, f) == 44;
    short z[1600] = { 0 };
    for (uint32_t i = 0; ok && i < n; i += 1600)
        ok = fwrite(z, 2, 1600, f) == 1600;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* voice-clone on an espeak clip with the tiny encoder-carrying DAC and the
 * espeak-trained Whisper (trained without timestamps: the fallback spreads
 * the words); the speaker file loads; bad input is refused. */
TEST(outetts_cli_voice_clone)
{
    SKIP_IF_NO_SHARED();
    char wav[600], whisper[600], out[600], longwav[600];
    snprintf(wav, sizeof wav, "%s", test_shared("audio/turn-on-the-kitchen-lights.wav"));
    snprintf(whisper, sizeof whisper, "%s",
             test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"));
    snprintf(out, sizeof out, "%s/cloned.json", test_tmpdir());
    snprintf(longwav, sizeof longwav, "%s/long21.wav", test_tmpdir());
    char *codec = strdup(test_fixture("dac/hf_tiny_enc.gguf"));
    char *dec_only = strdup(test_fixture("dac/random_tiny.gguf"));
    char *not_audio = strdup(test_fixture("outetts/speaker_tiny.json"));
    char *text = strdup("Turn on the kitchen lights.");
    char *argv[] = { "voice-clone", wav, "--text", text, "-o", out, "--codec", codec,
                     "--stt-model", whisper };
    int rc = cli_voice_clone(10, argv);
    char *empty_argv[] = { "voice-clone", wav, "--text", "  ", "-o", out, "--codec", codec,
                           "--stt-model", whisper };
    int rc_empty = cli_voice_clone(10, empty_argv);
    char *na_argv[] = { "voice-clone", not_audio, "--text", text, "-o", out, "--codec", codec,
                        "--stt-model", whisper };
    int rc_na = cli_voice_clone(10, na_argv);
    char *dec_argv[] = { "voice-clone", wav, "--text", text, "-o", out, "--codec", dec_only,
                         "--stt-model", whisper };
    int rc_dec = cli_voice_clone(10, dec_argv);
    int rc_long = -1;
    if (write_silence_wav(longwav, 21) == 0) {
        char *long_argv[] = { "voice-clone", longwav, "--text", text, "-o", out, "--codec",
                              codec, "--stt-model", whisper };
        rc_long = cli_voice_clone(10, long_argv);
    }
    free(codec), free(dec_only), free(not_audio), free(text);
    CHECK_EQ(rc, 0);
    CHECK(rc_empty != 0);
    CHECK(rc_na != 0);
    CHECK(rc_dec != 0);
    CHECK(rc_long != 0);
    char err[256];
    /* rc_* above rewrote nothing: the failures come before the output */
    struct outetts_speaker *s = outetts_speaker_load(out, err, sizeof err);
    CHECK_MSG(s, "%s", err);
    CHECK_EQ(outetts_speaker_n_words(s), 5);
    CHECK(outetts_speaker_n_frames(s) > 0);
    CHECK_STR_CONTAINS(outetts_speaker_text(s), "kitchen");
    outetts_speaker_free(s);
    size_t len = 0;
    char *json = test_read_file(out, &len);
    CHECK(json);
    cJSON *j = cJSON_Parse(json);
    free(json);
    CHECK(j);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "global_features");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(g, "pitch")));
    cJSON_Delete(j);
}
