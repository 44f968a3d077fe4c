/* test_audio_encode.c - media's audio encoders, one-shot and streaming: every
 * response format of /v1/audio/speech decodes with libavformat at the rate
 * and duration it was made with, a stream fed in odd pieces gives the same
 * audio, and a write callback that refuses stops the encoder cleanly. */
#include "test.h"

#include "media/audio.h"
#include "src/core/omni.h"

#include <libavformat/avformat.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct enc_buf {
    uint8_t *data;
    size_t len, cap;
    size_t refuse_after;       /* nonzero: refuse once this many bytes came */
    int calls;
};

static int enc_collect(void *user, const uint8_t *data, size_t len)
{
    struct enc_buf *b = user;
    b->calls++;
    if (b->refuse_after && b->len + len > b->refuse_after)
        return 1;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + len)
            cap *= 2;
        uint8_t *nd = realloc(b->data, cap);
        if (!nd)
            return 1;
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

/* A 440 Hz tone with a 3 Hz tremolo: not silence, not constant. */
static float *enc_tone(size_t n, int rate)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) {
        double t = (double)i / rate;
        x[i] = (float)(0.5 * sin(2 * M_PI * 440 * t) * (0.6 + 0.4 * sin(2 * M_PI * 3 * t)));
    }
    return x;
}

struct enc_probe {
    int rate;
    double duration_s;         /* from the decoded samples */
};

/* A forward-only reader over a buffer: libavformat sees the bytes as a
 * client receives them, without seeking. */
struct enc_src {
    const uint8_t *p;
    size_t n, off;
};

static int enc_read(void *opaque, uint8_t *buf, int size)
{
    struct enc_src *s = opaque;
    size_t k = s->n - s->off < (size_t)size ? s->n - s->off : (size_t)size;
    if (!k)
        return AVERROR_EOF;
    memcpy(buf, s->p + s->off, k);
    s->off += k;
    return (int)k;
}

/* The encoded bytes through libavformat: the stream's sample rate, and the
 * duration of what media's decoder gets out of them at that rate. */
static int enc_probe_bytes(const uint8_t *data, size_t len, struct enc_probe *pr)
{
    struct enc_src src = { data, len, 0 };
    uint8_t *iobuf = av_malloc(4096);
    AVIOContext *io = iobuf ? avio_alloc_context(iobuf, 4096, 0, &src, enc_read, NULL, NULL) : NULL;
    AVFormatContext *fc = io ? avformat_alloc_context() : NULL;
    int rc = -1;
    if (!fc)
        goto out;
    fc->pb = io;
    if (avformat_open_input(&fc, NULL, NULL, NULL) < 0 || avformat_find_stream_info(fc, NULL) < 0)
        goto out;
    int si = av_find_best_stream(fc, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (si < 0)
        goto out;
    pr->rate = fc->streams[si]->codecpar->sample_rate;
    struct media_audio_params p = media_audio_default_params();
    p.sample_rate_hz = pr->rate;
    float *pcm = NULL;
    size_t n = 0;
    char err[256];
    if (media_audio_decode_memory(data, len, &p, &pcm, &n, err, sizeof err) < 0)
        goto out;
    free(pcm);
    pr->duration_s = (double)n / pr->rate;
    rc = 0;
out:
    if (fc)
        avformat_close_input(&fc);
    if (io) {
        av_freep(&io->buffer);
        avio_context_free(&io);
    } else {
        av_free(iobuf);
    }
    return rc;
}

TEST(audio_encode_streaming_every_format)
{
    const int rate = 24000;
    const size_t n = 3 * 24000 + 123;                     /* 3.005 s */
    float *x = enc_tone(n, rate);
    CHECK(x);
    static const char *formats[] = { "wav", "mp3", "opus", "aac", "flac" };
    char err[256];
    for (int f = 0; f < 5; f++) {
        enum media_audio_format fmt = (enum media_audio_format)media_audio_format_from_name(formats[f]);
        struct enc_buf b = { 0 };
        struct media_audio_encoder *e = media_audio_encoder_new(fmt, rate, NULL, enc_collect, &b,
                                                                err, sizeof err);
        CHECK_MSG(e, "%s: %s", formats[f], err);
        /* Odd-sized pieces, as sentences come from the synthesizer. */
        size_t piece[] = { 1, 999, 4096, 5000, 17, 30000 };
        size_t off = 0;
        int calls_before_finish = 0;
        for (int k = 0; off < n; k++) {
            size_t m = piece[k % 6] < n - off ? piece[k % 6] : n - off;
            CHECK_MSG(media_audio_encoder_push(e, x + off, m, err, sizeof err) == 0, "%s: %s",
                      formats[f], err);
            off += m;
            calls_before_finish = b.calls;
        }
        CHECK_MSG(calls_before_finish > 1, "%s: bytes left only at the end", formats[f]);
        CHECK_MSG(media_audio_encoder_finish(e, err, sizeof err) == 0, "%s: %s", formats[f], err);
        media_audio_encoder_free(e);
        struct enc_probe pr;
        CHECK_MSG(enc_probe_bytes(b.data, b.len, &pr) == 0, "%s: does not decode", formats[f]);
        /* Opus always decodes at 48 kHz (its header keeps the input rate). */
        CHECK_MSG(pr.rate == (fmt == MEDIA_AUDIO_OPUS ? 48000 : rate), "%s: %d Hz", formats[f], pr.rate);
        /* Encoders add a little priming/padding; never seconds. */
        CHECK_MSG(fabs(pr.duration_s - 3.005) < 0.1, "%s: %.3f s", formats[f], pr.duration_s);
        /* The one-shot encoder gives a file of the same audio. */
        uint8_t *one = NULL;
        size_t one_len = 0;
        CHECK(media_audio_encode(x, n, rate, fmt, NULL, &one, &one_len, err, sizeof err) == 0);
        struct enc_probe po;
        CHECK(enc_probe_bytes(one, one_len, &po) == 0);
        CHECK_MSG(po.rate == pr.rate && fabs(po.duration_s - 3.005) < 0.1, "%s: %.3f vs %.3f",
                  formats[f], po.duration_s, pr.duration_s);
        free(one);
        free(b.data);
    }
    free(x);
}

TEST(audio_encode_streaming_pcm_and_refusal)
{
    const size_t n = 10000;
    float *x = enc_tone(n, 24000);
    char err[256];
    struct enc_buf b = { 0 };
    struct media_audio_encoder *e = media_audio_encoder_new(MEDIA_AUDIO_PCM, 24000, NULL,
                                                            enc_collect, &b, err, sizeof err);
    CHECK(x && e);
    CHECK(media_audio_encoder_push(e, x, n, err, sizeof err) == 0);
    CHECK(media_audio_encoder_finish(e, err, sizeof err) == 0);
    media_audio_encoder_free(e);
    CHECK_EQ(b.len, 2 * n);                       /* s16le, no header */
    int16_t s0;
    memcpy(&s0, b.data + 2 * 100, 2);
    CHECK(abs(s0 - (int)lrintf(x[100] * 32768.0f)) <= 1);
    free(b.data);

    /* The client leaves: the callback refuses, the encoder reports IO. */
    for (int f = 0; f < 2; f++) {
        struct enc_buf r = { .refuse_after = 3000 };
        e = media_audio_encoder_new(f ? MEDIA_AUDIO_MP3 : MEDIA_AUDIO_PCM, 24000, NULL, enc_collect,
                                    &r, err, sizeof err);
        CHECK(e);
        int rc = 0;
        for (int k = 0; k < 10 && rc == 0; k++)
            rc = media_audio_encoder_push(e, x, n, err, sizeof err);
        CHECK_EQ(rc, OMNI_ERR_IO);
        CHECK(media_audio_encoder_finish(e, err, sizeof err) == OMNI_ERR_IO);
        media_audio_encoder_free(e);
        free(r.data);
    }
    CHECK(media_audio_encoder_new(MEDIA_AUDIO_WAV, 24000, NULL, NULL, NULL, err, sizeof err) == NULL);
    CHECK(media_audio_encoder_new(MEDIA_AUDIO_WAV, 10, NULL, enc_collect, &b, err, sizeof err) == NULL);
    free(x);
}
