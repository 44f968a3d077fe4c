/* test_media_audio.c - media/audio: decoding real files (wav, mp3, mp4 audio),
 * encode -> decode round trips in every output format, the streaming
 * resampler against whole-buffer conversion, and broken or over-limit input. */
#include "tests/test.h"

#include "media/audio.h"
#include "src/core/omni.h"

#include <stdint.h>
#include <stdlib.h>

/* Power of frequency hz in x (Goertzel), normalised by length. */
static double tone_power(const float *x, size_t n, double hz, int rate)
{
    double w = 2 * M_PI * hz / rate, c = 2 * cos(w), s1 = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double s = x[i] + c * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    return (s1 * s1 + s2 * s2 - c * s1 * s2) / ((double)n * n);
}

static float *sine(size_t n, double hz, int rate, float amp)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = amp * (float)sin(2 * M_PI * hz * (double)i / rate);
    return x;
}

TEST(media_decode_jfk_wav_exact)
{
    SKIP_IF_NO_SHARED();
    char err[256] = "";
    float *pcm;
    size_t n;
    int rc = media_audio_decode_file(test_shared("audio/jfk.wav"), NULL, &pcm, &n, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_EQ(n, 176000);
    /* 16 kHz s16 in, 16 kHz out: exactly x / 32768, as whisper.cpp reads it. */
    size_t len;
    uint8_t *raw = (uint8_t *)test_read_file(test_shared("audio/jfk.wav"), &len);
    CHECK(raw && len == 78 + 2 * 176000);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int16_t s = (int16_t)(raw[78 + 2 * i] | raw[79 + 2 * i] << 8);
        bad += pcm[i] != s / 32768.0f;
    }
    free(raw);
    free(pcm);
    CHECK_EQ(bad, 0);
}

TEST(media_decode_jfk_mp3_matches_wav)
{
    SKIP_IF_NO_SHARED();
    char err[256] = "";
    float *wav, *mp3;
    size_t nw, nm;
    CHECK(media_audio_decode_file(test_shared("audio/jfk.wav"), NULL, &wav, &nw, err, sizeof err) == 0);
    int rc = media_audio_decode_file(test_shared("audio/jfk.mp3"), NULL, &mp3, &nm, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_MSG(nm > 175000 && nm < 16000 * 11.2, "mp3 samples %zu", nm);
    /* Align by the lag with the best correlation, then compare shape and energy. */
    double best = -1, ew = 0, em = 0;
    int best_lag = 0;
    const size_t len = 160000;
    for (int lag = -1200; lag <= 1200; lag++) {
        double xy = 0, yy = 0, xx = 0;
        for (size_t i = 1200; i < len; i += 4) {
            xy += (double)wav[i] * mp3[i + lag];
            xx += (double)wav[i] * wav[i];
            yy += (double)mp3[i + lag] * mp3[i + lag];
        }
        double r = xy / sqrt(xx * yy + 1e-30);
        if (r > best)
            best = r, best_lag = lag, ew = xx, em = yy;
    }
    free(wav);
    free(mp3);
    CHECK_MSG(best > 0.95, "correlation %.4f at lag %d", best, best_lag);
    CHECK_MSG(em / ew > 0.8 && em / ew < 1.25, "energy ratio %.3f", em / ew);
}

TEST(media_decode_mp3_44k_resampled)
{
    SKIP_IF_NO_SHARED();
    char err[256] = "";
    float *pcm;
    size_t n;
    int rc = media_audio_decode_file(test_shared("audio/test-2.mp3"), NULL, &pcm, &n, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_MSG(fabs(n / 16000.0 - 17.48) < 0.05, "%zu samples = %.3f s", n, n / 16000.0);
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e += pcm[i] * pcm[i];
    free(pcm);
    CHECK(e / n > 1e-4); /* speech, not silence */

    /* Another target rate from the same file. */
    struct media_audio_params p = media_audio_default_params();
    p.sample_rate_hz = 24000;
    CHECK(media_audio_decode_file(test_shared("audio/test-2.mp3"), &p, &pcm, &n, err, sizeof err) == 0);
    free(pcm);
    CHECK_MSG(fabs(n / 24000.0 - 17.48) < 0.05, "%zu samples at 24 kHz", n);
}

TEST(media_decode_mp4_audio_track)
{
    SKIP_IF_NO_SHARED();
    char err[256] = "";
    size_t len, n;
    char *data = test_read_file(test_shared("video/sample.mp4"), &len);
    CHECK(data);
    float *pcm;
    int rc = media_audio_decode_memory(data, len, NULL, &pcm, &n, err, sizeof err);
    free(data);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    free(pcm);
    CHECK_MSG(fabs(n / 16000.0 - 4.0) < 0.1, "%zu samples", n);
}

/* Encode a 440 Hz tone in each format, decode it back, check length and pitch. */
static void roundtrip(enum media_audio_format fmt, int rate)
{
    const size_t n = (size_t)rate; /* 1 s */
    float *x = sine(n, 440, rate, 0.5f);
    char err[256] = "";
    uint8_t *enc;
    size_t enc_len;
    int rc = media_audio_encode(x, n, rate, fmt, NULL, &enc, &enc_len, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s: %s", media_audio_format_mime(fmt), err);
    CHECK(enc_len > 100);
    float *y;
    size_t ny;
    if (fmt == MEDIA_AUDIO_PCM) {
        CHECK_EQ(enc_len, 2 * n);
        rc = media_audio_decode_raw(enc, enc_len, MEDIA_PCM_S16LE, rate, NULL, &y, &ny, err, sizeof err);
    } else {
        rc = media_audio_decode_memory(enc, enc_len, NULL, &y, &ny, err, sizeof err);
    }
    free(enc);
    CHECK_MSG(rc == OMNI_OK, "decode %s: %s", media_audio_format_mime(fmt), err);
    /* Lossy codecs add a frame or two of priming/padding at most. */
    CHECK_MSG(fabs((double)ny - 16000.0) < 1600, "%s: %zu samples", media_audio_format_mime(fmt), ny);
    double p440 = tone_power(y + 2000, 12000, 440, 16000);
    double p1000 = tone_power(y + 2000, 12000, 1000, 16000);
    double p300 = tone_power(y + 2000, 12000, 300, 16000);
    CHECK_MSG(p440 > 0.03 && p440 > 1000 * p1000 && p440 > 1000 * p300,
              "%s: tone %.3g vs %.3g / %.3g", media_audio_format_mime(fmt), p440, p1000, p300);
    if ((fmt == MEDIA_AUDIO_WAV || fmt == MEDIA_AUDIO_FLAC || fmt == MEDIA_AUDIO_PCM) && rate == 16000) {
        CHECK_EQ(ny, n);
        for (size_t i = 0; i < n; i++)
            CHECK_NEAR(y[i], x[i], 1.0 / 32768);
    }
    free(x);
    free(y);
}

TEST(media_encode_roundtrip_every_format)
{
    static const enum media_audio_format fmts[] = { MEDIA_AUDIO_WAV, MEDIA_AUDIO_FLAC, MEDIA_AUDIO_MP3,
                                                    MEDIA_AUDIO_OPUS, MEDIA_AUDIO_AAC, MEDIA_AUDIO_PCM };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        roundtrip(fmts[i], 16000);
        if (test_failed_now())
            return;
        roundtrip(fmts[i], 24000); /* TTS voices run at 24 kHz */
        if (test_failed_now())
            return;
    }
}

TEST(media_encode_names)
{
    CHECK_EQ(media_audio_format_from_name("mp3"), MEDIA_AUDIO_MP3);
    CHECK_EQ(media_audio_format_from_name("opus"), MEDIA_AUDIO_OPUS);
    CHECK_EQ(media_audio_format_from_name("pcm"), MEDIA_AUDIO_PCM);
    CHECK_EQ(media_audio_format_from_name("ogg"), -1);
    CHECK_STR_EQ(media_audio_format_mime(MEDIA_AUDIO_WAV), "audio/wav");
    char err[256] = "";
    uint8_t *out;
    size_t len;
    float x = 0;
    CHECK(media_audio_encode(&x, 1, 16000, (enum media_audio_format)42, NULL, &out, &len, err, sizeof err) == OMNI_ERR_ARG);
    CHECK(media_audio_encode(&x, 1, 0, MEDIA_AUDIO_WAV, NULL, &out, &len, err, sizeof err) == OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "sample_rate_hz");
}

TEST(media_decode_bad_inputs)
{
    char err[256] = "";
    float *pcm;
    size_t n;
    CHECK(media_audio_decode_memory("", 0, NULL, &pcm, &n, err, sizeof err) == OMNI_ERR_FORMAT);
    CHECK_STR_CONTAINS(err, "media: empty input");

    uint8_t junk[4096];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)((s = s * 1103515245 + 12345) >> 24);
    CHECK(media_audio_decode_memory(junk, sizeof junk, NULL, &pcm, &n, err, sizeof err) == OMNI_ERR_FORMAT);
    CHECK_STR_CONTAINS(err, "not audio ffmpeg can decode");

    const char *text = "this is a text file, not a sound\n";
    CHECK(media_audio_decode_memory(text, strlen(text), NULL, &pcm, &n, err, sizeof err) == OMNI_ERR_FORMAT);

    CHECK(media_audio_decode_file("/nonexistent/x.wav", NULL, &pcm, &n, err, sizeof err) == OMNI_ERR_IO);
    CHECK_STR_CONTAINS(err, "/nonexistent/x.wav");

    /* A JPEG is a real media file but has no audio for us. */
    if (test_shared_dir()) {
        CHECK(media_audio_decode_file(test_shared("images/test-1.jpeg"), NULL, &pcm, &n, err, sizeof err) < 0);
        CHECK(pcm == NULL && n == 0);
    }
}

TEST(media_decode_truncated)
{
    SKIP_IF_NO_SHARED();
    size_t len;
    char *wav = test_read_file(test_shared("audio/jfk.wav"), &len);
    char *mp3 = test_read_file(test_shared("audio/jfk.mp3"), NULL);
    CHECK(wav && mp3);
    char err[256] = "";
    float *pcm;
    size_t n;
    /* Header only: not decodable. */
    int rc = media_audio_decode_memory(wav, 30, NULL, &pcm, &n, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_FORMAT, "rc %d %s", rc, err);
    /* Cut in the middle: what is there decodes, no more. */
    rc = media_audio_decode_memory(wav, 78 + 2 * 1000 + 1, NULL, &pcm, &n, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_EQ(n, 1000);
    free(pcm);
    for (size_t cut = 100; cut < 20000; cut = cut * 3 + 7) {
        rc = media_audio_decode_memory(mp3, cut, NULL, &pcm, &n, err, sizeof err);
        CHECK_MSG(rc == OMNI_OK || rc == OMNI_ERR_FORMAT, "cut %zu: rc %d", cut, rc);
        CHECK(n < 176000);
        free(pcm);
    }
    free(wav);
    free(mp3);
}

TEST(media_decode_limits)
{
    SKIP_IF_NO_SHARED();
    char err[256] = "";
    float *pcm;
    size_t n;
    struct media_audio_params p = media_audio_default_params();
    p.max_input_bytes = 1000;
    CHECK(media_audio_decode_file(test_shared("audio/jfk.wav"), &p, &pcm, &n, err, sizeof err) == OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "limit 1000");
    size_t len;
    char *mp3 = test_read_file(test_shared("audio/jfk.mp3"), &len);
    CHECK(media_audio_decode_memory(mp3, len, &p, &pcm, &n, err, sizeof err) == OMNI_ERR_LIMIT);
    p = media_audio_default_params();
    p.max_duration_s = 2.5;
    int rc = media_audio_decode_memory(mp3, len, &p, &pcm, &n, err, sizeof err);
    free(mp3);
    CHECK_EQ(rc, OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "2.5 s limit");
    CHECK(pcm == NULL);
    p.sample_rate_hz = 10;
    CHECK(media_audio_decode_file(test_shared("audio/jfk.wav"), &p, &pcm, &n, err, sizeof err) == OMNI_ERR_ARG);
}

/* Pushing odd-sized chunks and pulling as we go equals one whole conversion. */
static void check_stream(enum media_pcm_format fmt, int in_rate, const uint8_t *bytes, size_t len)
{
    char err[256] = "";
    float *whole;
    size_t n_whole;
    CHECK(media_audio_decode_raw(bytes, len, fmt, in_rate, NULL, &whole, &n_whole, err, sizeof err) == 0);
    struct media_resampler *rs = media_resampler_new(fmt, in_rate, NULL, err, sizeof err);
    CHECK_MSG(rs, "%s", err);
    float *got = malloc((n_whole + 64) * sizeof *got);
    size_t n_got = 0, pos = 0, step = 1;
    while (pos < len) {
        size_t k = len - pos < step ? len - pos : step;
        CHECK(media_resampler_push(rs, bytes + pos, k, err, sizeof err) == 0);
        pos += k;
        step = step * 7 % 9973 + 1;
        n_got += media_resampler_pull(rs, got + n_got, n_whole + 64 - n_got);
    }
    CHECK(media_resampler_flush(rs, err, sizeof err) == 0);
    CHECK_EQ(media_resampler_available(rs), n_whole - n_got);
    n_got += media_resampler_pull(rs, got + n_got, n_whole + 64 - n_got);
    media_resampler_free(rs);
    CHECK_EQ(n_got, n_whole);
    for (size_t i = 0; i < n_whole; i++)
        CHECK_NEAR(got[i], whole[i], 1e-6);
    CHECK_MSG(fabs((double)n_whole - (double)(len / (fmt == MEDIA_PCM_S16LE ? 2 : 4)) * 16000 / in_rate) < 2,
              "%zu samples", n_whole);
    free(got);
    free(whole);
}

TEST(media_resampler_stream_equals_whole)
{
    const size_t n = 24000 * 3 + 17;
    uint8_t *s16 = malloc(2 * n), *f32 = malloc(4 * n);
    float *x = sine(n, 440, 24000, 0.4f);
    for (size_t i = 0; i < n; i++) {
        int16_t v = (int16_t)lrintf(x[i] * 32767);
        s16[2 * i] = (uint8_t)(v & 0xff);
        s16[2 * i + 1] = (uint8_t)((uint16_t)v >> 8);
    }
    memcpy(f32, x, 4 * n);
    check_stream(MEDIA_PCM_S16LE, 24000, s16, 2 * n);
    if (!test_failed_now())
        check_stream(MEDIA_PCM_F32LE, 24000, f32, 4 * n);
    if (!test_failed_now())
        check_stream(MEDIA_PCM_S16LE, 16000, s16, 2 * n);
    free(s16);
    free(f32);
    free(x);
}

TEST(media_resampler_limit_and_args)
{
    char err[256] = "";
    CHECK(media_resampler_new(MEDIA_PCM_S16LE, 0, NULL, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "rate");
    CHECK(media_resampler_new((enum media_pcm_format)7, 16000, NULL, err, sizeof err) == NULL);
    struct media_audio_params p = media_audio_default_params();
    p.max_duration_s = 0.5;
    struct media_resampler *rs = media_resampler_new(MEDIA_PCM_S16LE, 16000, &p, err, sizeof err);
    CHECK(rs);
    static uint8_t zeros[4000]; /* 0.125 s each */
    int rc = 0;
    for (int i = 0; i < 8 && rc == 0; i++)
        rc = media_resampler_push(rs, zeros, sizeof zeros, err, sizeof err);
    CHECK_EQ(rc, OMNI_ERR_LIMIT);
    /* Pulling makes room again. */
    static float sink[16000];
    media_resampler_pull(rs, sink, 16000);
    CHECK(media_resampler_push(rs, zeros, sizeof zeros, err, sizeof err) == 0);
    media_resampler_free(rs);
    media_resampler_free(NULL);
}

/* A 16-bit PCM WAV file built by hand: n frames of ch channels at rate. */
static uint8_t *make_wav(const int16_t *frames, uint32_t n, uint16_t ch, uint32_t rate, size_t *len)
{
    uint32_t data = n * ch * 2;
    uint8_t *b = malloc(44 + data);
    uint32_t v32[] = { 36 + data, 16, rate, rate * ch * 2, data };
    uint16_t v16[] = { 1, ch, (uint16_t)(ch * 2), 16 };
    memcpy(b, "RIFF", 4), memcpy(b + 4, &v32[0], 4), memcpy(b + 8, "WAVEfmt ", 8);
    memcpy(b + 16, &v32[1], 4), memcpy(b + 20, &v16[0], 2), memcpy(b + 22, &v16[1], 2);
    memcpy(b + 24, &v32[2], 4), memcpy(b + 28, &v32[3], 4), memcpy(b + 32, &v16[2], 2);
    memcpy(b + 34, &v16[3], 2), memcpy(b + 36, "data", 4), memcpy(b + 40, &v32[4], 4);
    memcpy(b + 44, frames, data);
    *len = 44 + data;
    return b;
}

TEST(media_decode_stereo_44k_averages_channels)
{
    const uint32_t n = 44100;
    int16_t *fr = malloc(n * 2 * sizeof *fr);
    for (uint32_t i = 0; i < n; i++) {
        int16_t s = (int16_t)lrint(16000 * sin(2 * M_PI * 440 * i / 44100.0));
        fr[2 * i] = s;                                                     /* left: tone */
        fr[2 * i + 1] = (int16_t)lrint(8000 * sin(2 * M_PI * 1000 * i / 44100.0)); /* right: other tone */
    }
    size_t len, ny;
    uint8_t *wav = make_wav(fr, n, 2, 44100, &len);
    free(fr);
    char err[256] = "";
    float *y;
    int rc = media_audio_decode_memory(wav, len, NULL, &y, &ny, err, sizeof err);
    free(wav);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_MSG(fabs((double)ny - 16000) < 4, "%zu samples", ny);
    /* Mono = (L + R) / 2: tone amplitudes 16000/2 and 8000/2 of 32768. */
    double a440 = 2 * sqrt(tone_power(y + 1000, 14000, 440, 16000));
    double a1000 = 2 * sqrt(tone_power(y + 1000, 14000, 1000, 16000));
    free(y);
    CHECK_NEAR(a440, 8000 / 32768.0, 0.01);
    CHECK_NEAR(a1000, 4000 / 32768.0, 0.01);
}

/* A mono 16-bit WAV header claiming rate_hz, followed by data_bytes of noise. */
static uint8_t *make_wav_header_rate(uint32_t rate_hz, size_t data_bytes, size_t *len)
{
    uint32_t n = (uint32_t)(data_bytes / 2);
    int16_t *fr = malloc((size_t)n * sizeof *fr);
    uint32_t s = 7;
    for (uint32_t i = 0; i < n; i++)
        fr[i] = (int16_t)((s = s * 1103515245 + 12345) >> 16);
    uint8_t *w = make_wav(fr, n, 1, rate_hz, len);
    free(fr);
    return w;
}

/* Issue 7.4: a 96 KB WAV whose header says 1 Hz used to be decoded and
 * resampled whole (1.6 GB, 8 s) before the duration limit refused it. The
 * header's rate is refused now, naming the field; nothing is decoded. */
TEST(media_decode_refuses_absurd_sample_rate)
{
    char err[256] = "";
    float *pcm = NULL;
    size_t n = 1, len;
    const uint32_t bad[] = { 1, 999, 384001, 4000000 };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint8_t *wav = make_wav_header_rate(bad[i], 96 * 1024, &len);
        int rc = media_audio_decode_memory(wav, len, NULL, &pcm, &n, err, sizeof err);
        free(wav);
        CHECK_MSG(rc == OMNI_ERR_FORMAT, "%u Hz: rc %d %s", bad[i], rc, err);
        CHECK_STR_CONTAINS(err, "sample_rate");
        char want[32];
        snprintf(want, sizeof want, "%u Hz", bad[i]);
        CHECK_STR_CONTAINS(err, want);
        CHECK(pcm == NULL && n == 0);
    }
    /* the edges of the range decode */
    const uint32_t good[] = { 1000, 384000 };
    for (size_t i = 0; i < 2; i++) {
        uint8_t *wav = make_wav_header_rate(good[i], 96 * 1024, &len);
        int rc = media_audio_decode_memory(wav, len, NULL, &pcm, &n, err, sizeof err);
        free(wav);
        CHECK_MSG(rc == OMNI_OK, "%u Hz: %s", good[i], err);
        CHECK_NEAR((double)n, 48.0 * 1024 * 16000 / good[i], 64);
        free(pcm);
    }
    /* raw PCM from a client: the same range */
    CHECK(media_resampler_new(MEDIA_PCM_S16LE, 1, NULL, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "sample_rate 1 Hz");
}

/* The Info/Xing tag of an MP3 says how many frames follow: a tag claiming
 * 16 million is refused from the header, before anything is decoded. */
TEST(media_decode_declared_duration_refused_before_decoding)
{
    const size_t n = 3 * 16000;
    float *x = sine(n, 440, 16000, 0.3f);
    uint8_t *mp3;
    size_t len;
    char err[256] = "";
    CHECK(media_audio_encode(x, n, 16000, MEDIA_AUDIO_MP3, NULL, &mp3, &len, err, sizeof err) == 0);
    free(x);
    size_t tag = 0;
    for (size_t i = 0; i + 16 < len && !tag; i++)
        if (!memcmp(mp3 + i, "Info", 4) || !memcmp(mp3 + i, "Xing", 4))
            tag = i;
    CHECK_MSG(tag && (mp3[tag + 7] & 1), "no Info/Xing tag with a frame count");
    float *pcm = NULL;
    size_t got = 0;
    struct media_audio_params p = media_audio_default_params();
    p.max_duration_s = 60;
    CHECK(media_audio_decode_memory(mp3, len, &p, &pcm, &got, err, sizeof err) == 0);
    free(pcm);
    mp3[tag + 8] = 0x00, mp3[tag + 9] = 0xff, mp3[tag + 10] = 0xff, mp3[tag + 11] = 0xff;
    int rc = media_audio_decode_memory(mp3, len, &p, &pcm, &got, err, sizeof err);
    free(mp3);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "declares");
    CHECK_STR_CONTAINS(err, "60 s limit");
    CHECK(pcm == NULL && got == 0);
}

/* ADTS AAC has no duration in its header (ffmpeg estimates one from the
 * bitrate, which is not trusted to refuse); the limit then holds on the
 * decoded samples, and decoding stops there. */
TEST(media_decode_limit_holds_while_decoding)
{
    const size_t n = 3 * 16000;
    float *x = sine(n, 440, 16000, 0.3f);
    uint8_t *aac;
    size_t len;
    char err[256] = "";
    CHECK(media_audio_encode(x, n, 16000, MEDIA_AUDIO_AAC, NULL, &aac, &len, err, sizeof err) == 0);
    free(x);
    float *pcm = NULL;
    size_t got = 0;
    struct media_audio_params p = media_audio_default_params();
    p.max_duration_s = 2;
    int rc = media_audio_decode_memory(aac, len, &p, &pcm, &got, err, sizeof err);
    free(aac);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "decoding stopped");
    CHECK(pcm == NULL && got == 0);
}

/* 1 kHz in, 384 kHz out: each swr call writes at most one chunk, and a
 * limit reached mid-frame fails without first resampling the whole frame. */
TEST(media_resampler_upsampling_stays_bounded)
{
    char err[256] = "";
    struct media_audio_params p = media_audio_default_params();
    p.sample_rate_hz = 384000;
    p.max_duration_s = 1;
    static int16_t pcm[4000]; /* 4 s at 1 kHz */
    float *y = NULL;
    size_t ny = 0;
    int rc = media_audio_decode_raw(pcm, sizeof pcm, MEDIA_PCM_S16LE, 1000, &p, &y, &ny, err,
                                    sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK(y == NULL);
    p.max_duration_s = 5;
    rc = media_audio_decode_raw(pcm, sizeof pcm, MEDIA_PCM_S16LE, 1000, &p, &y, &ny, err, sizeof err);
    CHECK_MSG(rc == OMNI_OK, "%s", err);
    CHECK_NEAR((double)ny, 4 * 384000.0, 400);
    free(y);
}

/* G.711: the code points every implementation agrees on, round trips within
 * half a quantization step (which grows with the segment), monotonic codes. */
TEST(media_g711_ulaw_alaw)
{
    CHECK(media_g711_ulaw_from_s16(0) == 0xFF);
    CHECK(media_g711_alaw_from_s16(0) == 0xD5);
    CHECK(media_g711_ulaw_from_s16(32767) == 0x80);
    CHECK(media_g711_ulaw_from_s16(-32768) == 0x00);
    CHECK(media_g711_alaw_from_s16(32767) == 0xAA);
    CHECK(media_g711_alaw_from_s16(-32768) == 0x2A);
    CHECK(media_g711_ulaw_to_s16(0xFF) == 0 && media_g711_alaw_to_s16(0xD5) == 8);
    int prev_u = -40000, prev_a = -40000;
    for (int x = -32768; x <= 32767; x += 7) {
        int u = media_g711_ulaw_to_s16(media_g711_ulaw_from_s16((int16_t)x));
        int a = media_g711_alaw_to_s16(media_g711_alaw_from_s16((int16_t)x));
        int ax = x < 0 ? -x : x;
        /* step: 2^(segment+1) for mu-law (at most 1024), 2^(segment+1) for A-law */
        double tol = ax < 64 ? 16 : ax / 16.0 + 16;
        if (ax <= 32635)
            CHECK_MSG(abs(u - x) <= tol, "ulaw %d -> %d", x, u);
        if (ax <= 32256)
            CHECK_MSG(abs(a - x) <= tol, "alaw %d -> %d", x, a);
        CHECK_MSG(u >= prev_u && a >= prev_a, "monotonic at %d", x);
        prev_u = u;
        prev_a = a;
    }
    for (int b = 0; b < 256; b++) {   /* every code decodes to a value that encodes back */
        int16_t u = media_g711_ulaw_to_s16((uint8_t)b), a = media_g711_alaw_to_s16((uint8_t)b);
        CHECK_MSG(media_g711_ulaw_from_s16(u) == b || (b == 0x7F && u == 0), "ulaw code %d", b);
        CHECK_MSG(media_g711_alaw_from_s16(a) == b, "alaw code %d", b);
    }
}
