/* audio_encode.c - mono float PCM to wav / flac / mp3 / opus / aac / raw pcm
 * bytes, for the speech-out side (/v1/audio/speech response_format).
 * libavcodec encodes, libswresample converts to the encoder's sample format
 * and rate, and libavformat muxes into an in-memory dynamic buffer (seekable,
 * so wav/flac/mp3 headers get their final sizes written). */
#include "media/audio.h"

#include "src/core/omni.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswresample/swresample.h>

#include <limits.h>
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

static int encode_pcm16(const float *pcm, size_t n, uint8_t **out, size_t *out_len, char *err,
                        size_t errlen)
{
    uint8_t *b = malloc(n ? n * 2 : 1);
    if (!b)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    for (size_t i = 0; i < n; i++) {
        float x = pcm[i] * 32768.0f;
        long v = x != x ? 0 : x >= 32767.0f ? 32767 : x <= -32768.0f ? -32768 : lrintf(x);
        b[2 * i] = (uint8_t)(v & 0xff);
        b[2 * i + 1] = (uint8_t)((v >> 8) & 0xff);
    }
    *out = b;
    *out_len = n * 2;
    return OMNI_OK;
}

struct encoder {
    AVFormatContext *oc;
    AVIOContext *pb;
    AVCodecContext *ctx;
    AVStream *st;
    SwrContext *swr;
    AVFrame *frame;
    AVPacket *pkt;
    uint8_t *conv; /* input converted to the encoder's format and rate */
    float *clipped;
};

static int write_packets(struct encoder *e, char *err, size_t errlen)
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
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: muxer failed (%s)",
                             av_make_error_string(m, sizeof m, rc));
    }
}

static int encoder_run(struct encoder *e, const struct enc_spec *spec, const float *pcm, size_t n,
                       int rate, const struct media_encode_params *p, char *err, size_t errlen)
{
    char m[AV_ERROR_MAX_STRING_SIZE];
    int rc;
    const AVCodec *codec = avcodec_find_encoder_by_name(spec->codec);
    if (!codec)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "media: this ffmpeg has no %s encoder for %s", spec->codec, spec->name);
    if (avio_open_dyn_buf(&e->pb) < 0 ||
        avformat_alloc_output_context2(&e->oc, NULL, spec->muxer, NULL) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "media: cannot create %s muxer",
                         spec->muxer);
    e->oc->pb = e->pb;
    if (!(e->st = avformat_new_stream(e->oc, NULL)) || !(e->ctx = avcodec_alloc_context3(codec)) ||
        !(e->frame = av_frame_alloc()) || !(e->pkt = av_packet_alloc()))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");

    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    int enc_rate = pick_rate(codec, rate);
    e->ctx->sample_rate = enc_rate;
    e->ctx->sample_fmt = pick_sample_fmt(codec);
    e->ctx->time_base = (AVRational){ 1, enc_rate };
    if (p->bitrate_bps > 0)
        e->ctx->bit_rate = p->bitrate_bps;
    if ((rc = av_channel_layout_copy(&e->ctx->ch_layout, &mono)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    if (e->oc->oformat->flags & AVFMT_GLOBALHEADER)
        e->ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((rc = avcodec_open2(e->ctx, codec, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "media: cannot open %s encoder at %d Hz (%s)", spec->codec, enc_rate,
                         av_make_error_string(m, sizeof m, rc));
    if ((rc = avcodec_parameters_from_context(e->st->codecpar, e->ctx)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    e->st->time_base = e->ctx->time_base;
    if ((rc = avformat_write_header(e->oc, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: cannot write %s header (%s)",
                         spec->muxer, av_make_error_string(m, sizeof m, rc));

    /* Convert the whole input at once: clip, then resample to the encoder. */
    if (!(e->clipped = malloc((n ? n : 1) * sizeof(float))))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    for (size_t i = 0; i < n; i++) {
        float x = pcm[i];
        e->clipped[i] = x != x ? 0.0f : x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
    }
    if ((rc = swr_alloc_set_opts2(&e->swr, &mono, e->ctx->sample_fmt, enc_rate, &mono,
                                  AV_SAMPLE_FMT_FLT, rate, 0, NULL)) < 0 ||
        (rc = swr_init(e->swr)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "media: cannot resample to %d Hz",
                         enc_rate);
    int bps = av_get_bytes_per_sample(e->ctx->sample_fmt);
    int64_t cap = swr_get_out_samples(e->swr, (int)n) + 256;
    if (cap <= 0 || !(e->conv = malloc((size_t)cap * (size_t)bps)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    const uint8_t *in[1] = { (const uint8_t *)e->clipped };
    uint8_t *o[1] = { e->conv };
    int64_t total = 0;
    int got = swr_convert(e->swr, o, (int)cap, in, (int)n);
    while (got > 0) { /* then drain the resampler's delay */
        total += got;
        o[0] = e->conv + total * bps;
        got = swr_convert(e->swr, o, (int)(cap - total), NULL, 0);
    }
    if (got < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: resampler failed");

    /* Encoders with a fixed frame size take exactly that many samples per
     * frame (libavcodec pads the last one). */
    int frame_size = e->ctx->frame_size > 0 ? e->ctx->frame_size : 4096;
    for (int64_t pos = 0; pos < total; pos += frame_size) {
        int k = (int)(total - pos < frame_size ? total - pos : frame_size);
        av_frame_unref(e->frame);
        e->frame->nb_samples = k;
        e->frame->format = e->ctx->sample_fmt;
        e->frame->sample_rate = enc_rate;
        if ((rc = av_channel_layout_copy(&e->frame->ch_layout, &mono)) < 0 ||
            (rc = av_frame_get_buffer(e->frame, 0)) < 0)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        memcpy(e->frame->data[0], e->conv + pos * bps, (size_t)k * (size_t)bps);
        e->frame->pts = pos;
        if ((rc = avcodec_send_frame(e->ctx, e->frame)) < 0)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: encoder rejected a frame (%s)",
                             av_make_error_string(m, sizeof m, rc));
        if ((rc = write_packets(e, err, errlen)) < 0)
            return rc;
    }
    avcodec_send_frame(e->ctx, NULL);
    if ((rc = write_packets(e, err, errlen)) < 0)
        return rc;
    if ((rc = av_write_trailer(e->oc)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: cannot finish %s (%s)",
                         spec->muxer, av_make_error_string(m, sizeof m, rc));
    return OMNI_OK;
}

int media_audio_encode(const float *pcm, size_t n_samples, int sample_rate_hz,
                       enum media_audio_format fmt, const struct media_encode_params *p,
                       uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    struct media_encode_params defaults = media_encode_default_params();
    if (!p)
        p = &defaults;
    *out = NULL;
    *out_len = 0;
    if ((int)fmt < 0 || (int)fmt >= N_ENC_SPECS)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "media: unknown output format %d", (int)fmt);
    if (sample_rate_hz < 1000 || sample_rate_hz > 384000)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "media: sample_rate_hz %d out of range",
                         sample_rate_hz);
    if (n_samples > (size_t)INT_MAX / 8 || (n_samples && !pcm))
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: %zu samples too many to encode",
                         n_samples);
    if (fmt == MEDIA_AUDIO_PCM)
        return encode_pcm16(pcm, n_samples, out, out_len, err, errlen);
    media_log_init();

    struct encoder e = { 0 };
    int rc = encoder_run(&e, &enc_specs[fmt], pcm, n_samples, sample_rate_hz, p, err, errlen);
    uint8_t *buf = NULL;
    int len = e.pb ? avio_close_dyn_buf(e.pb, &buf) : 0;
    if (rc >= 0) {
        *out = malloc(len > 0 ? (size_t)len : 1);
        if (!*out)
            rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        else {
            memcpy(*out, buf, (size_t)(len > 0 ? len : 0));
            *out_len = (size_t)(len > 0 ? len : 0);
        }
    }
    av_free(buf);
    if (e.oc)
        e.oc->pb = NULL;
    avformat_free_context(e.oc);
    avcodec_free_context(&e.ctx);
    swr_free(&e.swr);
    av_frame_free(&e.frame);
    av_packet_free(&e.pkt);
    free(e.conv);
    free(e.clipped);
    return rc;
}
