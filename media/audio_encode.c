/* audio_encode.c - mono float PCM to wav / flac / mp3 / opus / aac / raw pcm
 * bytes, for the speech-out side (/v1/audio/speech response_format).
 * libavcodec encodes, libswresample converts to the encoder's sample format
 * and rate, an AVAudioFifo cuts frames of the encoder's size, and
 * libavformat muxes either into an in-memory dynamic buffer (one-shot:
 * seekable, so wav/flac/mp3 headers get their final sizes written) or, as
 * the audio arrives, into the caller's write callback (streaming: the muxers
 * write their live-stream forms, e.g. a WAV whose sizes read "unknown"). */
#include "media/audio.h"

#include "src/core/omni.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libswresample/swresample.h>

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct enc_spec {
    const char *name, *mime;
    const char *muxer, *codec; /* NULL for raw pcm, which needs neither */
};

static const struct enc_spec enc_specs[] = {
    [MEDIA_AUDIO_WAV] = { "wav", "audio/wav", "wav", "pcm_s16le" },
    [MEDIA_AUDIO_FLAC] = { "flac", "audio/flac", "flac", "flac" },
    [MEDIA_AUDIO_MP3] = { "mp3", "audio/mpeg", "mp3", "libmp3lame" },
    [MEDIA_AUDIO_OPUS] = { "opus", "audio/ogg", "ogg", "libopus" },
    [MEDIA_AUDIO_AAC] = { "aac", "audio/aac", "adts", "aac" },
    [MEDIA_AUDIO_PCM] = { "pcm", "audio/pcm", NULL, NULL },
};
#define N_ENC_SPECS ((int)(sizeof enc_specs / sizeof enc_specs[0]))

struct media_encode_params media_encode_default_params(void)
{
    return (struct media_encode_params){ .bitrate_bps = 0 };
}

int media_audio_format_from_name(const char *name)
{
    for (int i = 0; name && i < N_ENC_SPECS; i++)
        if (!strcmp(name, enc_specs[i].name))
            return i;
    return -1;
}

const char *media_audio_format_mime(enum media_audio_format fmt)
{
    return (int)fmt >= 0 && (int)fmt < N_ENC_SPECS ? enc_specs[fmt].mime
                                                   : "application/octet-stream";
}

/* Float if the encoder takes it (no extra quantization), else its first. */
static enum AVSampleFormat pick_sample_fmt(const AVCodec *c)
{
    if (!c->sample_fmts)
        return AV_SAMPLE_FMT_S16;
    for (const enum AVSampleFormat *f = c->sample_fmts; *f != AV_SAMPLE_FMT_NONE; f++)
        if (*f == AV_SAMPLE_FMT_FLT || *f == AV_SAMPLE_FMT_FLTP)
            return *f;
    return c->sample_fmts[0];
}

/* The input rate if accepted, else the smallest larger one, else the largest. */
static int pick_rate(const AVCodec *c, int rate)
{
    if (!c->supported_samplerates)
        return rate;
    int above = 0, best_below = 0;
    for (const int *r = c->supported_samplerates; *r; r++) {
        if (*r == rate)
            return rate;
        if (*r > rate && (!above || *r < above))
            above = *r;
        if (*r < rate && *r > best_below)
            best_below = *r;
    }
    return above ? above : best_below;
}

static void pcm16_convert(const float *pcm, size_t n, uint8_t *b)
{
    for (size_t i = 0; i < n; i++) {
        float x = pcm[i] * 32768.0f;
        long v = x != x ? 0 : x >= 32767.0f ? 32767 : x <= -32768.0f ? -32768 : lrintf(x);
        b[2 * i] = (uint8_t)(v & 0xff);
        b[2 * i + 1] = (uint8_t)((v >> 8) & 0xff);
    }
}

#define ENC_CHUNK 4096           /* input samples converted per step */

struct media_audio_encoder {
    enum media_audio_format fmt;
    int rate, enc_rate;
    media_write_fn write;        /* NULL: into the dynamic buffer pb */
    void *user;
    bool failed;                 /* the write callback refused bytes */
    AVFormatContext *oc;
    AVIOContext *pb;
    unsigned char *io_buf;       /* streaming: the AVIOContext's buffer */
    AVCodecContext *ctx;
    AVStream *st;
    SwrContext *swr;
    AVAudioFifo *fifo;
    AVFrame *frame;
    AVPacket *pkt;
    int64_t pts;
    uint8_t *conv;               /* ENC_CHUNK converted samples and the resampler's extra */
    int conv_cap;                /* in samples */
    float clipped[ENC_CHUNK];
    uint8_t pcm16[2 * ENC_CHUNK];
};

/* Streaming output: libavformat hands over its buffer as it fills. */
static int enc_io_write(void *opaque, uint8_t *buf, int len)
{
    struct media_audio_encoder *e = opaque;
    if (e->failed || e->write(e->user, buf, (size_t)len) != 0) {
        e->failed = true;
        return AVERROR(EIO);
    }
    return len;
}

static int write_packets(struct media_audio_encoder *e, char *err, size_t errlen)
{
    char m[AV_ERROR_MAX_STRING_SIZE];
    for (;;) {
        int rc = avcodec_receive_packet(e->ctx, e->pkt);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF)
            return OMNI_OK;
        if (rc < 0)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: encoder failed (%s)",
                             av_make_error_string(m, sizeof m, rc));
        av_packet_rescale_ts(e->pkt, e->ctx->time_base, e->st->time_base);
        e->pkt->stream_index = e->st->index;
        rc = av_interleaved_write_frame(e->oc, e->pkt);
        if (rc < 0)
            return omni_fail(err, errlen, e->failed ? OMNI_ERR_IO : OMNI_ERR_FORMAT,
                             "media: muxer failed (%s)", e->failed ? "the output was closed"
                             : av_make_error_string(m, sizeof m, rc));
    }
}

/* Encodes frames of the encoder's size from the fifo; with last set also the
 * short remainder (libavcodec pads it). */
static int enc_drain_fifo(struct media_audio_encoder *e, bool last, char *err, size_t errlen)
{
    char m[AV_ERROR_MAX_STRING_SIZE];
    int frame_size = e->ctx->frame_size > 0 ? e->ctx->frame_size : ENC_CHUNK;
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    while (av_audio_fifo_size(e->fifo) >= frame_size || (last && av_audio_fifo_size(e->fifo) > 0)) {
        int k = av_audio_fifo_size(e->fifo) < frame_size ? av_audio_fifo_size(e->fifo) : frame_size;
        av_frame_unref(e->frame);
        e->frame->nb_samples = k;
        e->frame->format = e->ctx->sample_fmt;
        e->frame->sample_rate = e->enc_rate;
        if (av_channel_layout_copy(&e->frame->ch_layout, &mono) < 0 ||
            av_frame_get_buffer(e->frame, 0) < 0)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        if (av_audio_fifo_read(e->fifo, (void **)e->frame->data, k) != k)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: audio fifo underrun");
        e->frame->pts = e->pts;
        e->pts += k;
        int rc = avcodec_send_frame(e->ctx, e->frame);
        if (rc < 0)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: encoder rejected a frame (%s)",
                             av_make_error_string(m, sizeof m, rc));
        if ((rc = write_packets(e, err, errlen)) < 0)
            return rc;
    }
    return OMNI_OK;
}

/* Resamples n clipped samples (NULL: the resampler's delayed tail) into the fifo. */
static int enc_convert(struct media_audio_encoder *e, const float *in, int n, char *err,
                       size_t errlen)
{
    int bps = av_get_bytes_per_sample(e->ctx->sample_fmt);
    int need = swr_get_out_samples(e->swr, n) + 64;
    if (need > e->conv_cap) {
        uint8_t *nc = realloc(e->conv, (size_t)need * (size_t)bps);
        if (!nc)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        e->conv = nc;
        e->conv_cap = need;
    }
    const uint8_t *src[1] = { (const uint8_t *)in };
    uint8_t *dst[1] = { e->conv };
    int got = swr_convert(e->swr, dst, e->conv_cap, in ? src : NULL, in ? n : 0);
    if (got < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: resampler failed");
    if (got > 0 && av_audio_fifo_write(e->fifo, (void **)dst, got) != got)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    return got;
}

static int enc_open(struct media_audio_encoder *e, const struct enc_spec *spec,
                    const struct media_encode_params *p, char *err, size_t errlen)
{
    char m[AV_ERROR_MAX_STRING_SIZE];
    int rc;
    const AVCodec *codec = avcodec_find_encoder_by_name(spec->codec);
    if (!codec)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "media: this ffmpeg has no %s encoder for %s", spec->codec, spec->name);
    if (avformat_alloc_output_context2(&e->oc, NULL, spec->muxer, NULL) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "media: cannot create %s muxer",
                         spec->muxer);
    if (e->write) {
        if (!(e->io_buf = av_malloc(4096)) ||
            !(e->pb = avio_alloc_context(e->io_buf, 4096, 1, e, NULL, enc_io_write, NULL)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        e->io_buf = NULL;                        /* the context owns it now */
        e->pb->seekable = 0;
    } else if (avio_open_dyn_buf(&e->pb) < 0) {
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    }
    e->oc->pb = e->pb;
    if (!(e->st = avformat_new_stream(e->oc, NULL)) || !(e->ctx = avcodec_alloc_context3(codec)) ||
        !(e->frame = av_frame_alloc()) || !(e->pkt = av_packet_alloc()))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");

    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    e->enc_rate = pick_rate(codec, e->rate);
    e->ctx->sample_rate = e->enc_rate;
    e->ctx->sample_fmt = pick_sample_fmt(codec);
    e->ctx->time_base = (AVRational){ 1, e->enc_rate };
    if (p->bitrate_bps > 0)
        e->ctx->bit_rate = p->bitrate_bps;
    if ((rc = av_channel_layout_copy(&e->ctx->ch_layout, &mono)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    if (e->oc->oformat->flags & AVFMT_GLOBALHEADER)
        e->ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((rc = avcodec_open2(e->ctx, codec, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "media: cannot open %s encoder at %d Hz (%s)", spec->codec, e->enc_rate,
                         av_make_error_string(m, sizeof m, rc));
    if ((rc = avcodec_parameters_from_context(e->st->codecpar, e->ctx)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    e->st->time_base = e->ctx->time_base;
    if ((rc = avformat_write_header(e->oc, NULL)) < 0)
        return omni_fail(err, errlen, e->failed ? OMNI_ERR_IO : OMNI_ERR_FORMAT,
                         "media: cannot write %s header (%s)", spec->muxer,
                         av_make_error_string(m, sizeof m, rc));
    if ((rc = swr_alloc_set_opts2(&e->swr, &mono, e->ctx->sample_fmt, e->enc_rate, &mono,
                                  AV_SAMPLE_FMT_FLT, e->rate, 0, NULL)) < 0 ||
        (rc = swr_init(e->swr)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "media: cannot resample to %d Hz",
                         e->enc_rate);
    if (!(e->fifo = av_audio_fifo_alloc(e->ctx->sample_fmt, 1, ENC_CHUNK)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    if (e->write)
        avio_flush(e->pb);
    if (e->failed)
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed");
    return OMNI_OK;
}

static struct media_audio_encoder *enc_new(enum media_audio_format fmt, int sample_rate_hz,
                                           const struct media_encode_params *p,
                                           media_write_fn write, void *user, int *code,
                                           char *err, size_t errlen)
{
    struct media_encode_params defaults = media_encode_default_params();
    if (!p)
        p = &defaults;
    *code = OMNI_OK;
    if ((int)fmt < 0 || (int)fmt >= N_ENC_SPECS) {
        *code = omni_fail(err, errlen, OMNI_ERR_ARG, "media: unknown output format %d", (int)fmt);
        return NULL;
    }
    if (sample_rate_hz < 1000 || sample_rate_hz > 384000) {
        *code = omni_fail(err, errlen, OMNI_ERR_ARG, "media: sample_rate_hz %d out of range",
                          sample_rate_hz);
        return NULL;
    }
    struct media_audio_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        *code = omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        return NULL;
    }
    e->fmt = fmt;
    e->rate = sample_rate_hz;
    e->write = write;
    e->user = user;
    if (fmt == MEDIA_AUDIO_PCM)
        return e;
    media_log_init();
    if ((*code = enc_open(e, &enc_specs[fmt], p, err, errlen)) < 0) {
        media_audio_encoder_free(e);
        return NULL;
    }
    return e;
}

struct media_audio_encoder *media_audio_encoder_new(enum media_audio_format fmt, int sample_rate_hz,
                                                    const struct media_encode_params *p,
                                                    media_write_fn write, void *user, char *err,
                                                    size_t errlen)
{
    if (!write) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "media: a streaming encoder needs a write callback");
        return NULL;
    }
    int code;
    return enc_new(fmt, sample_rate_hz, p, write, user, &code, err, errlen);
}

/* Raw pcm: converted and written (or collected by the one-shot caller) at once. */
static int enc_push_pcm16(struct media_audio_encoder *e, const float *pcm, size_t n, char *err,
                          size_t errlen)
{
    for (size_t off = 0; off < n; off += ENC_CHUNK) {
        size_t k = n - off < ENC_CHUNK ? n - off : ENC_CHUNK;
        pcm16_convert(pcm + off, k, e->pcm16);
        if (e->write(e->user, e->pcm16, 2 * k) != 0) {
            e->failed = true;
            return omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed");
        }
    }
    return OMNI_OK;
}

int media_audio_encoder_push(struct media_audio_encoder *e, const float *pcm, size_t n, char *err,
                             size_t errlen)
{
    if (e->failed)
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed");
    if (e->fmt == MEDIA_AUDIO_PCM)
        return enc_push_pcm16(e, pcm, n, err, errlen);
    for (size_t off = 0; off < n; off += ENC_CHUNK) {
        int k = (int)(n - off < ENC_CHUNK ? n - off : ENC_CHUNK);
        for (int i = 0; i < k; i++) {            /* clip: encoders wrap out-of-range floats */
            float x = pcm[off + (size_t)i];
            e->clipped[i] = x != x ? 0.0f : x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
        }
        int rc = enc_convert(e, e->clipped, k, err, errlen);
        if (rc < 0 || (rc = enc_drain_fifo(e, false, err, errlen)) < 0)
            return rc;
    }
    if (e->write)                                /* what is encoded leaves now */
        avio_flush(e->pb);
    return e->failed ? omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed") : OMNI_OK;
}

int media_audio_encoder_finish(struct media_audio_encoder *e, char *err, size_t errlen)
{
    char m[AV_ERROR_MAX_STRING_SIZE];
    if (e->failed)
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed");
    if (e->fmt == MEDIA_AUDIO_PCM)
        return OMNI_OK;
    int rc;
    while ((rc = enc_convert(e, NULL, 0, err, errlen)) > 0)   /* the resampler's delay */
        ;
    if (rc < 0 || (rc = enc_drain_fifo(e, true, err, errlen)) < 0)
        return rc;
    avcodec_send_frame(e->ctx, NULL);
    if ((rc = write_packets(e, err, errlen)) < 0)
        return rc;
    if ((rc = av_write_trailer(e->oc)) < 0)
        return omni_fail(err, errlen, e->failed ? OMNI_ERR_IO : OMNI_ERR_FORMAT,
                         "media: cannot finish %s (%s)", enc_specs[e->fmt].muxer,
                         av_make_error_string(m, sizeof m, rc));
    if (e->write)
        avio_flush(e->pb);
    return e->failed ? omni_fail(err, errlen, OMNI_ERR_IO, "media: the output was closed") : OMNI_OK;
}

void media_audio_encoder_free(struct media_audio_encoder *e)
{
    if (!e)
        return;
    if (e->oc)
        e->oc->pb = NULL;
    avformat_free_context(e->oc);
    if (e->write && e->pb) {
        av_freep(&e->pb->buffer);
        avio_context_free(&e->pb);
    } else if (e->pb) {
        uint8_t *buf = NULL;
        avio_close_dyn_buf(e->pb, &buf);
        av_free(buf);
    }
    av_free(e->io_buf);
    avcodec_free_context(&e->ctx);
    swr_free(&e->swr);
    av_audio_fifo_free(e->fifo);
    av_frame_free(&e->frame);
    av_packet_free(&e->pkt);
    free(e->conv);
    free(e);
}

int media_audio_encode(const float *pcm, size_t n_samples, int sample_rate_hz,
                       enum media_audio_format fmt, const struct media_encode_params *p,
                       uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    if (n_samples > (size_t)INT_MAX / 8 || (n_samples && !pcm))
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: %zu samples too many to encode",
                         n_samples);
    if (fmt == MEDIA_AUDIO_PCM) {
        if (sample_rate_hz < 1000 || sample_rate_hz > 384000)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "media: sample_rate_hz %d out of range",
                             sample_rate_hz);
        if (!(*out = malloc(n_samples ? n_samples * 2 : 1)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        pcm16_convert(pcm, n_samples, *out);
        *out_len = n_samples * 2;
        return OMNI_OK;
    }
    int rc;
    struct media_audio_encoder *e = enc_new(fmt, sample_rate_hz, p, NULL, NULL, &rc, err, errlen);
    if (!e)
        return rc;
    rc = media_audio_encoder_push(e, pcm, n_samples, err, errlen);
    if (rc >= 0)
        rc = media_audio_encoder_finish(e, err, errlen);
    if (rc >= 0) {
        uint8_t *buf = NULL;
        int len = avio_close_dyn_buf(e->pb, &buf);
        e->pb = NULL;
        *out = malloc(len > 0 ? (size_t)len : 1);
        if (!*out)
            rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        else {
            memcpy(*out, buf, (size_t)(len > 0 ? len : 0));
            *out_len = (size_t)(len > 0 ? len : 0);
        }
        av_free(buf);
    }
    media_audio_encoder_free(e);
    return rc;
}
