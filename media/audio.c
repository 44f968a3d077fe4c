/* audio.c - decode audio with libavformat/libavcodec into mono float PCM,
 * resampled by libswresample; raw PCM buffers and a streaming resampler for
 * WebSocket input. Input comes from memory through a custom AVIOContext, and
 * demuxers may not open anything else (playlists, references), so a hostile
 * upload can only make us read the bytes it came with. */
#include "media/audio.h"

#include "src/core/omni.h"
#include "media/ffio.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "media/audio.c passes little-endian PCM to swresample as native samples"
#endif

/* Input sample rates we accept, from a file's header or a WebSocket
 * client: below 1 kHz nothing is speech, and a 1 Hz header would make the
 * resampler write 16000 samples per input sample. */
#define MEDIA_MIN_RATE_HZ 1000
#define MEDIA_MAX_RATE_HZ 384000

/* Output samples one swr_convert call may write: input is fed in pieces of
 * at most this much output, so a frame is never resampled into one giant
 * buffer before the limit check sees it. */
#define MEDIA_SWR_OUT_CHUNK 65536

/* Containers we let libavformat probe for: audio and audio/video files.
 * Everything else (hls, concat, image2, network formats, ...) is refused. */
#define MEDIA_AUDIO_DEMUXERS                                                                   \
    "wav,w64,mp3,mov,mp4,m4a,3gp,3g2,mj2,ogg,flac,matroska,webm,aac,aiff,caf,amr,au,avi,"    \
    "mpeg,mpegts,asf,wv,ape,tta,mpc,mpc8,ac3,eac3,dts,truehd,mlp,gsm,voc,sox,rm,flv"

struct media_audio_params media_audio_default_params(void)
{
    return (struct media_audio_params){
        .sample_rate_hz = 16000,
        .max_input_bytes = (size_t)512 << 20,
        .max_duration_s = 4 * 3600.0,
    };
}

// ---- logging ---------------------------------------------------------------

static void media_av_log(void *avcl, int level, const char *fmt, va_list ap)
{
    (void)avcl;
    if (level > AV_LOG_WARNING)
        return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    if (n)
        OMNI_DEBUG("ffmpeg: %s", line);
}

static void media_log_install(void)
{
    av_log_set_level(AV_LOG_WARNING);
    av_log_set_callback(media_av_log);
}

void media_log_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, media_log_install);
}

static const char *av_err(int code, char buf[AV_ERROR_MAX_STRING_SIZE])
{
    av_strerror(code, buf, AV_ERROR_MAX_STRING_SIZE);
    return buf;
}

// ---- growing output buffer with a sample limit -----------------------------

struct pcm_buf {
    float *v;
    size_t n, cap;  /* samples held / allocated */
    size_t head;    /* first sample not yet pulled (resampler only) */
    size_t max;     /* n - head above this is OMNI_ERR_LIMIT */
};

static int pcm_reserve(struct pcm_buf *b, size_t extra, char *err, size_t errlen)
{
    size_t need;
    if (omni_add_size(b->n, extra, &need) || need > SIZE_MAX / sizeof(float) / 2)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: decoded audio too long");
    if (need <= b->cap)
        return OMNI_OK;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < need)
        cap *= 2;
    /* Doubling stops at the limit (plus one step of slack): a buffer about
     * to fail with OMNI_ERR_LIMIT must not first take twice the memory. */
    size_t ceiling = b->max + MEDIA_SWR_OUT_CHUNK + 64;
    if (cap > ceiling)
        cap = need > ceiling ? need : ceiling;
    float *v = realloc(b->v, cap * sizeof(float));
    if (!v)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory for %zu samples", cap);
    b->v = v;
    b->cap = cap;
    return OMNI_OK;
}

/* What swr_append needs to know about its input to cut it into pieces. */
struct swr_input {
    const uint8_t *const *planes; /* NULL = flush */
    int n;                        /* samples per channel */
    int planes_n;                 /* 1 (packed) or the channel count (planar) */
    int step_bytes;               /* bytes per sample in one plane */
    int in_rate_hz, out_rate_hz;
};

/* Append up to one output chunk's worth of resampled input to b. */
static int swr_append_piece(SwrContext *swr, const uint8_t **in, int n_in, struct pcm_buf *b,
                            double max_duration_s, char *err, size_t errlen)
{
    for (;;) {
        int est = swr_get_out_samples(swr, n_in);
        if (est < 0)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: resampler failed");
        est += 32;
        int rc = pcm_reserve(b, (size_t)est, err, errlen);
        if (rc < 0)
            return rc;
        uint8_t *o = (uint8_t *)(b->v + b->n);
        int got = swr_convert(swr, &o, est, in, n_in);
        if (got < 0) {
            char e[AV_ERROR_MAX_STRING_SIZE];
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: resampler failed (%s)",
                             av_err(got, e));
        }
        b->n += (size_t)got;
        if (b->n - b->head > b->max)
            return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                             "media: audio longer than the %g s limit", max_duration_s);
        /* Input is consumed in one call; a flush may need several. */
        if (in || got == 0)
            return OMNI_OK;
    }
}

/* Resample x (x->planes NULL = flush) and append the result to b, at most
 * MEDIA_SWR_OUT_CHUNK output samples per swr call; fails with
 * OMNI_ERR_LIMIT as soon as b holds more than b->max unpulled samples. */
static int swr_append(SwrContext *swr, const struct swr_input *x, struct pcm_buf *b,
                      double max_duration_s, char *err, size_t errlen)
{
    if (!x->planes)
        return swr_append_piece(swr, NULL, 0, b, max_duration_s, err, errlen);
    int64_t piece = (int64_t)MEDIA_SWR_OUT_CHUNK * x->in_rate_hz / x->out_rate_hz;
    if (piece < 1)
        piece = 1;
    if (x->planes_n < 1 || x->planes_n > 64)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: channels %d is outside 1..64",
                         x->planes_n);
    for (int done = 0; done < x->n;) {
        int k = x->n - done < piece ? x->n - done : (int)piece;
        const uint8_t *in[64];
        for (int c = 0; c < x->planes_n; c++)
            in[c] = x->planes[c] + (size_t)done * x->step_bytes;
        int rc = swr_append_piece(swr, in, k, b, max_duration_s, err, errlen);
        if (rc < 0)
            return rc;
        done += k;
    }
    return OMNI_OK;
}

/* A resampler from (layout, fmt, rate) to mono float at out_rate; several
 * channels are averaged (each weighted 1/n, so nothing clips or grows). */
static int swr_open(SwrContext **out, const AVChannelLayout *layout, enum AVSampleFormat fmt,
                    int rate, int out_rate, char *err, size_t errlen)
{
    AVChannelLayout in_layout = { 0 }, mono = AV_CHANNEL_LAYOUT_MONO;
    int nch = layout->nb_channels;
    if (nch < 1 || nch > 64)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: channels %d is outside 1..64", nch);
    if (rate < MEDIA_MIN_RATE_HZ || rate > MEDIA_MAX_RATE_HZ)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: sample_rate %d Hz is outside %d..%d Hz", rate, MEDIA_MIN_RATE_HZ,
                         MEDIA_MAX_RATE_HZ);
    if (layout->order == AV_CHANNEL_ORDER_UNSPEC)
        av_channel_layout_default(&in_layout, nch);
    else if (av_channel_layout_copy(&in_layout, layout) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    SwrContext *swr = NULL;
    int rc = swr_alloc_set_opts2(&swr, &mono, AV_SAMPLE_FMT_FLT, out_rate, &in_layout, fmt, rate,
                                 0, NULL);
    if (rc >= 0 && nch > 1) {
        double m[64];
        for (int c = 0; c < nch; c++)
            m[c] = 1.0 / nch;
        rc = swr_set_matrix(swr, m, nch);
    }
    if (rc >= 0)
        rc = swr_init(swr);
    av_channel_layout_uninit(&in_layout);
    if (rc < 0) {
        char e[AV_ERROR_MAX_STRING_SIZE];
        swr_free(&swr);
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "media: cannot resample %d channels of %s at %d Hz (%s)", nch,
                         av_get_sample_fmt_name(fmt) ? av_get_sample_fmt_name(fmt) : "?", rate,
                         av_err(rc, e));
    }
    *out = swr;
    return OMNI_OK;
}

static int check_params(const struct media_audio_params *p, char *err, size_t errlen)
{
    if (p->sample_rate_hz < MEDIA_MIN_RATE_HZ || p->sample_rate_hz > MEDIA_MAX_RATE_HZ)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "media: sample_rate_hz %d out of range",
                         p->sample_rate_hz);
    if (!(p->max_duration_s > 0) || p->max_duration_s > 1e7)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "media: max_duration_s %g out of range",
                         p->max_duration_s);
    return OMNI_OK;
}

// ---- decoding --------------------------------------------------------------

struct decoder {
    const struct media_audio_params *p;
    const char *name; /* "" or "path: " for messages */
    AVFormatContext *fmt;
    AVIOContext *avio;
    AVCodecContext *dec;
    AVFrame *frame;
    AVPacket *pkt;
    SwrContext *swr;
    AVChannelLayout swr_layout; /* what swr was opened for */
    int swr_format, swr_rate;
    int n_bad;                  /* packets the decoder rejected */
    double decoded_s;           /* input audio decoded so far */
    struct pcm_buf out;
};

static int decoder_flush_swr(struct decoder *d, char *err, size_t errlen)
{
    const struct swr_input flush = { 0 };
    return d->swr ? swr_append(d->swr, &flush, &d->out, d->p->max_duration_s, err, errlen) : 0;
}

/* Convert one decoded frame; reopen the resampler if the stream changed its
 * rate, format or channels mid-way (chained mp3/ogg do). The duration limit
 * is checked on the input before resampling: a header may declare anything,
 * the decoded samples are what counts. */
static int decoder_take_frame(struct decoder *d, char *err, size_t errlen)
{
    AVFrame *f = d->frame;
    int rc;
    if (f->sample_rate < MEDIA_MIN_RATE_HZ || f->sample_rate > MEDIA_MAX_RATE_HZ)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: %sdecoded sample_rate %d Hz is outside %d..%d Hz", d->name,
                         f->sample_rate, MEDIA_MIN_RATE_HZ, MEDIA_MAX_RATE_HZ);
    d->decoded_s += (double)f->nb_samples / f->sample_rate;
    if (d->decoded_s > d->p->max_duration_s)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                         "media: %saudio longer than the %g s limit (decoding stopped at %.1f s)",
                         d->name, d->p->max_duration_s, d->decoded_s);
    if (!d->swr || f->format != d->swr_format || f->sample_rate != d->swr_rate ||
        av_channel_layout_compare(&f->ch_layout, &d->swr_layout)) {
        if ((rc = decoder_flush_swr(d, err, errlen)) < 0)
            return rc;
        swr_free(&d->swr);
        av_channel_layout_uninit(&d->swr_layout);
        if ((rc = swr_open(&d->swr, &f->ch_layout, f->format, f->sample_rate,
                           d->p->sample_rate_hz, err, errlen)) < 0)
            return rc;
        if (av_channel_layout_copy(&d->swr_layout, &f->ch_layout) < 0)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        d->swr_format = f->format;
        d->swr_rate = f->sample_rate;
    }
    const bool planar = av_sample_fmt_is_planar(f->format);
    const struct swr_input x = {
        .planes = (const uint8_t *const *)f->extended_data,
        .n = f->nb_samples,
        .planes_n = planar ? f->ch_layout.nb_channels : 1,
        .step_bytes = av_get_bytes_per_sample(f->format) * (planar ? 1 : f->ch_layout.nb_channels),
        .in_rate_hz = f->sample_rate,
        .out_rate_hz = d->p->sample_rate_hz,
    };
    return swr_append(d->swr, &x, &d->out, d->p->max_duration_s, err, errlen);
}

static int decoder_drain(struct decoder *d, char *err, size_t errlen)
{
    for (;;) {
        int rc = avcodec_receive_frame(d->dec, d->frame);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF)
            return OMNI_OK;
        if (rc < 0) {
            d->n_bad++;
            return OMNI_OK;
        }
        rc = decoder_take_frame(d, err, errlen);
        av_frame_unref(d->frame);
        if (rc < 0)
            return rc;
    }
}

/* The stream's declared rate, channels and duration against the limits,
 * before anything is decoded. A duration ffmpeg only estimated from the
 * bitrate (mp3 without a Xing header, ADTS) may be off either way, so it is
 * refused only past twice the limit; the decoded samples are checked
 * exactly anyway (decoder_take_frame). */
static int decoder_check_declared(const struct decoder *d, const AVStream *st, char *err,
                                  size_t errlen)
{
    const AVCodecParameters *cp = st->codecpar;
    if (cp->sample_rate != 0 &&
        (cp->sample_rate < MEDIA_MIN_RATE_HZ || cp->sample_rate > MEDIA_MAX_RATE_HZ))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: %sheader sample_rate %d Hz is outside %d..%d Hz", d->name,
                         cp->sample_rate, MEDIA_MIN_RATE_HZ, MEDIA_MAX_RATE_HZ);
    if (cp->ch_layout.nb_channels > 64)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: %sheader channels %d is outside 1..64",
                         d->name, cp->ch_layout.nb_channels);
    double dur = 0;
    if (st->duration > 0 && st->duration != AV_NOPTS_VALUE)
        dur = (double)st->duration * av_q2d(st->time_base);
    else if (d->fmt->duration > 0 && d->fmt->duration != AV_NOPTS_VALUE)
        dur = (double)d->fmt->duration / AV_TIME_BASE;
    const bool estimate = d->fmt->duration_estimation_method == AVFMT_DURATION_FROM_BITRATE;
    if (dur > d->p->max_duration_s * (estimate ? 2 : 1))
        return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                         "media: %sthe file declares %.1f s of audio%s, longer than the %g s limit",
                         d->name, dur, estimate ? " (estimated from its bitrate)" : "",
                         d->p->max_duration_s);
    return OMNI_OK;
}

static int decoder_open(struct decoder *d, struct media_mem *r, char *err, size_t errlen)
{
    char e[AV_ERROR_MAX_STRING_SIZE];
    const size_t avio_size = 32768;
    uint8_t *avio_buf = av_malloc(avio_size);
    d->fmt = avformat_alloc_context();
    if (!avio_buf || !d->fmt) {
        av_free(avio_buf);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    }
    d->avio = avio_alloc_context(avio_buf, (int)avio_size, 0, r, media_mem_read, NULL, media_mem_seek);
    if (!d->avio) {
        av_free(avio_buf);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    }
    d->fmt->pb = d->avio;
    d->fmt->io_open = media_refuse_io_open;
    d->fmt->format_whitelist = av_strdup(MEDIA_AUDIO_DEMUXERS);
    d->fmt->protocol_whitelist = av_strdup("none");
    int rc = avformat_open_input(&d->fmt, NULL, NULL, NULL);
    if (rc < 0) /* on failure libavformat freed the context */
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: %sdata is not audio ffmpeg can decode (%s)", d->name,
                         av_err(rc, e));
    if ((rc = avformat_find_stream_info(d->fmt, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: %sdata is not audio ffmpeg can decode (%s)", d->name,
                         av_err(rc, e));
    int si = av_find_best_stream(d->fmt, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (si < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: %sno audio stream", d->name);
    AVStream *st = d->fmt->streams[si];
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        d->fmt->streams[i]->discard = (int)i == si ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    if ((rc = decoder_check_declared(d, st, err, errlen)) < 0)
        return rc;
    const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "media: %sno decoder for codec '%s'",
                         d->name, avcodec_get_name(st->codecpar->codec_id));
    d->dec = avcodec_alloc_context3(codec);
    if (!d->dec)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    if ((rc = avcodec_parameters_to_context(d->dec, st->codecpar)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: %sbad codec parameters (%s)",
                         d->name, av_err(rc, e));
    d->dec->pkt_timebase = st->time_base;
    d->dec->thread_count = 1;
    if ((rc = avcodec_open2(d->dec, codec, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: %scannot open %s decoder (%s)",
                         d->name, codec->name, av_err(rc, e));
    d->frame = av_frame_alloc();
    d->pkt = av_packet_alloc();
    if (!d->frame || !d->pkt)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
    return si;
}

static int decoder_run(struct decoder *d, int si, char *err, size_t errlen)
{
    int rc;
    for (;;) {
        rc = av_read_frame(d->fmt, d->pkt);
        if (rc < 0) /* end of file, or a truncated/corrupt tail: keep what we have */
            break;
        if (d->pkt->stream_index == si) {
            rc = avcodec_send_packet(d->dec, d->pkt);
            if (rc < 0 && rc != AVERROR(EAGAIN))
                d->n_bad++;
        }
        av_packet_unref(d->pkt);
        if ((rc = decoder_drain(d, err, errlen)) < 0)
            return rc;
    }
    avcodec_send_packet(d->dec, NULL);
    if ((rc = decoder_drain(d, err, errlen)) < 0)
        return rc;
    if ((rc = decoder_flush_swr(d, err, errlen)) < 0)
        return rc;
    if (d->out.n == 0 && d->n_bad > 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "media: %sdata is not audio ffmpeg can decode (%d bad packets)",
                         d->name, d->n_bad);
    return OMNI_OK;
}

static int decode(const void *data, size_t len, const struct media_audio_params *p,
                  const char *name, float **pcm, size_t *n_samples, char *err, size_t errlen)
{
    struct media_audio_params defaults = media_audio_default_params();
    if (!p)
        p = &defaults;
    *pcm = NULL;
    *n_samples = 0;
    int rc = check_params(p, err, errlen);
    if (rc < 0)
        return rc;
    if (!data || len == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: %sempty input", name);
    if (len > p->max_input_bytes)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: %sinput is %zu bytes, limit %zu",
                         name, len, p->max_input_bytes);
    media_log_init();

    struct media_mem r = { .data = data, .len = len };
    struct decoder d = { .p = p, .name = name };
    d.out.max = (size_t)(p->max_duration_s * p->sample_rate_hz);
    rc = decoder_open(&d, &r, err, errlen);
    if (rc >= 0)
        rc = decoder_run(&d, rc, err, errlen);

    swr_free(&d.swr);
    av_channel_layout_uninit(&d.swr_layout);
    av_packet_free(&d.pkt);
    av_frame_free(&d.frame);
    avcodec_free_context(&d.dec);
    avformat_close_input(&d.fmt);
    if (d.avio) {
        av_freep(&d.avio->buffer);
        avio_context_free(&d.avio);
    }
    if (rc < 0) {
        free(d.out.v);
        return rc;
    }
    *pcm = d.out.v;
    *n_samples = d.out.n;
    return OMNI_OK;
}

int media_audio_decode_memory(const void *data, size_t len, const struct media_audio_params *p,
                              float **pcm, size_t *n_samples, char *err, size_t errlen)
{
    return decode(data, len, p, "", pcm, n_samples, err, errlen);
}

int media_audio_decode_file(const char *path, const struct media_audio_params *p, float **pcm,
                            size_t *n_samples, char *err, size_t errlen)
{
    struct media_audio_params defaults = media_audio_default_params();
    if (!p)
        p = &defaults;
    *pcm = NULL;
    *n_samples = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: %s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > p->max_input_bytes) {
        fclose(f);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: %s: %lld bytes, limit %zu", path,
                         (long long)st.st_size, p->max_input_bytes);
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        fclose(f);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: %s: out of memory", path);
    }
    size_t got = fread(buf, 1, len, f);
    fclose(f);
    if (got != len) {
        free(buf);
        return omni_fail(err, errlen, OMNI_ERR_IO, "media: %s: short read", path);
    }
    char name[512];
    snprintf(name, sizeof name, "%s: ", path);
    int rc = decode(buf, len, p, name, pcm, n_samples, err, errlen);
    free(buf);
    return rc;
}

// ---- raw PCM and the streaming resampler -----------------------------------

#define RS_CHUNK 4096 /* input samples converted per swr call */

struct media_resampler {
    SwrContext *swr;
    int bytes_per_sample;
    int in_rate_hz, out_rate_hz;
    double max_duration_s;
    uint8_t partial[4]; /* bytes of a sample split across pushes */
    int n_partial;
    void *scratch;      /* RS_CHUNK aligned input samples */
    struct pcm_buf out;
};

struct media_resampler *media_resampler_new(enum media_pcm_format fmt, int in_rate_hz,
                                            const struct media_audio_params *p, char *err,
                                            size_t errlen)
{
    struct media_audio_params defaults = media_audio_default_params();
    if (!p)
        p = &defaults;
    if (check_params(p, err, errlen) < 0)
        return NULL;
    if (fmt != MEDIA_PCM_S16LE && fmt != MEDIA_PCM_F32LE) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "media: unknown raw PCM format %d", (int)fmt);
        return NULL;
    }
    if (in_rate_hz < MEDIA_MIN_RATE_HZ || in_rate_hz > MEDIA_MAX_RATE_HZ) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "media: input sample_rate %d Hz is outside %d..%d Hz",
                  in_rate_hz, MEDIA_MIN_RATE_HZ, MEDIA_MAX_RATE_HZ);
        return NULL;
    }
    media_log_init();
    struct media_resampler *rs = calloc(1, sizeof *rs);
    if (!rs) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        return NULL;
    }
    rs->bytes_per_sample = fmt == MEDIA_PCM_S16LE ? 2 : 4;
    rs->in_rate_hz = in_rate_hz;
    rs->out_rate_hz = p->sample_rate_hz;
    rs->max_duration_s = p->max_duration_s;
    rs->out.max = (size_t)(p->max_duration_s * p->sample_rate_hz);
    rs->scratch = malloc(RS_CHUNK * 4);
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    if (!rs->scratch) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "media: out of memory");
        goto fail;
    }
    if (swr_open(&rs->swr, &mono, fmt == MEDIA_PCM_S16LE ? AV_SAMPLE_FMT_S16 : AV_SAMPLE_FMT_FLT,
                 in_rate_hz, p->sample_rate_hz, err, errlen) < 0)
        goto fail;
    return rs;
fail:
    media_resampler_free(rs);
    return NULL;
}

int media_resampler_push(struct media_resampler *rs, const void *data, size_t len, char *err,
                         size_t errlen)
{
    const uint8_t *in = data;
    const size_t bps = (size_t)rs->bytes_per_sample;
    /* Drop consumed output first so the buffer does not grow forever. */
    if (rs->out.head > 0 && rs->out.head >= rs->out.n / 2) {
        memmove(rs->out.v, rs->out.v + rs->out.head, (rs->out.n - rs->out.head) * sizeof(float));
        rs->out.n -= rs->out.head;
        rs->out.head = 0;
    }
    while (len > 0 || rs->n_partial == (int)bps) {
        /* Assemble up to RS_CHUNK whole samples in the aligned scratch. */
        uint8_t *s = rs->scratch;
        size_t have = (size_t)rs->n_partial;
        memcpy(s, rs->partial, have);
        size_t take = RS_CHUNK * bps - have;
        if (take > len)
            take = len;
        memcpy(s + have, in, take);
        in += take;
        len -= take;
        have += take;
        size_t n = have / bps;
        rs->n_partial = (int)(have - n * bps);
        memcpy(rs->partial, s + n * bps, (size_t)rs->n_partial);
        if (n == 0)
            break;
        const uint8_t *planes[1] = { s };
        const struct swr_input x = { .planes = planes, .n = (int)n, .planes_n = 1,
                                     .step_bytes = (int)bps, .in_rate_hz = rs->in_rate_hz,
                                     .out_rate_hz = rs->out_rate_hz };
        int rc = swr_append(rs->swr, &x, &rs->out, rs->max_duration_s, err, errlen);
        if (rc < 0)
            return rc;
    }
    return OMNI_OK;
}

int media_resampler_flush(struct media_resampler *rs, char *err, size_t errlen)
{
    rs->n_partial = 0;
    const struct swr_input flush = { 0 };
    int rc = swr_append(rs->swr, &flush, &rs->out, rs->max_duration_s, err, errlen);
    if (rc < 0)
        return rc;
    /* swr is done with this stream; re-init so pushes after a flush start clean. */
    swr_close(rs->swr);
    if (swr_init(rs->swr) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "media: resampler re-init failed");
    return OMNI_OK;
}

size_t media_resampler_available(const struct media_resampler *rs)
{
    return rs->out.n - rs->out.head;
}

size_t media_resampler_pull(struct media_resampler *rs, float *out, size_t max)
{
    size_t n = rs->out.n - rs->out.head;
    if (n > max)
        n = max;
    if (n == 0)
        return 0;
    memcpy(out, rs->out.v + rs->out.head, n * sizeof(float));
    rs->out.head += n;
    if (rs->out.head == rs->out.n)
        rs->out.head = rs->out.n = 0;
    return n;
}

void media_resampler_free(struct media_resampler *rs)
{
    if (!rs)
        return;
    swr_free(&rs->swr);
    free(rs->scratch);
    free(rs->out.v);
    free(rs);
}

int media_audio_decode_raw(const void *data, size_t len, enum media_pcm_format fmt, int in_rate_hz,
                           const struct media_audio_params *p, float **pcm, size_t *n_samples,
                           char *err, size_t errlen)
{
    struct media_audio_params defaults = media_audio_default_params();
    if (!p)
        p = &defaults;
    *pcm = NULL;
    *n_samples = 0;
    if (len > p->max_input_bytes)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "media: raw input is %zu bytes, limit %zu",
                         len, p->max_input_bytes);
    struct media_resampler *rs = media_resampler_new(fmt, in_rate_hz, p, err, errlen);
    if (!rs)
        return OMNI_ERR_ARG;
    int rc = media_resampler_push(rs, data, len, err, errlen);
    if (rc >= 0)
        rc = media_resampler_flush(rs, err, errlen);
    if (rc >= 0) {
        /* Hand over the resampler's buffer instead of copying it. */
        *pcm = rs->out.v;
        *n_samples = rs->out.n;
        rs->out.v = NULL;
    }
    media_resampler_free(rs);
    return rc;
}

// ---- G.711 -----------------------------------------------------------------------

/* mu-law: the magnitude plus a bias of 132 is a float with a 3-bit exponent
 * (the segment) and a 4-bit mantissa; bytes are sent inverted. */
#define G711_ULAW_BIAS 0x84
#define G711_ULAW_CLIP 32635

uint8_t media_g711_ulaw_from_s16(int16_t x)
{
    int v = x, sign = 0;
    if (v < 0) {
        v = -v;
        sign = 0x80;
    }
    if (v > G711_ULAW_CLIP)
        v = G711_ULAW_CLIP;
    v += G711_ULAW_BIAS;
    int exp = 7;
    for (int mask = 0x4000; !(v & mask) && exp > 0; mask >>= 1)
        exp--;
    int mant = (v >> (exp + 3)) & 0x0F;
    return (uint8_t)~(sign | exp << 4 | mant);
}

int16_t media_g711_ulaw_to_s16(uint8_t u)
{
    u = (uint8_t)~u;
    int exp = (u >> 4) & 7, mant = u & 0x0F;
    int v = (((mant << 3) + G711_ULAW_BIAS) << exp) - G711_ULAW_BIAS;
    return (int16_t)(u & 0x80 ? -v : v);
}

/* A-law: 13-bit magnitude, segment 0 and 1 linear, then a 3-bit exponent;
 * even bits are inverted (XOR 0x55) on the wire. */
uint8_t media_g711_alaw_from_s16(int16_t x)
{
    int v = x, mask = 0xD5;
    if (v < 0) {
        v = -v - 1;
        mask = 0x55;
    }
    int seg = 0;
    while (seg < 8 && v >= (0x100 << seg))
        seg++;
    if (seg >= 8)
        return (uint8_t)(0x7F ^ mask);
    int a = seg << 4 | ((seg < 2 ? v >> 4 : v >> (seg + 3)) & 0x0F);
    return (uint8_t)(a ^ mask);
}

int16_t media_g711_alaw_to_s16(uint8_t a)
{
    a ^= 0x55;
    int t = (a & 0x0F) << 4, seg = (a & 0x70) >> 4;
    if (seg == 0)
        t += 8;
    else
        t = (t + 0x108) << (seg - 1);
    return (int16_t)(a & 0x80 ? t : -t);
}
