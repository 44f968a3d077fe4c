/* video.c - video frame sampling and ffmpeg still-image decoding.
 * A clip is opened from memory (custom AVIO, no protocols) or a path (file
 * protocol only), both limited to a whitelist of demuxers; frames are taken
 * at uniformly spread target times by seeking back to the keyframe before
 * each target and decoding forward, or by one sequential pass when the
 * container cannot seek; libswscale converts them to RGB. */
#include "media/video.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "media/audio.h"
#include "src/core/omni.h"
#include "media/ffio.h"

#define MEDIA_VIDEO_DEMUXERS                                                                   \
    "mov,matroska,webm,avi,mpegts,flv,ogg,mpeg,gif,webp_pipe,bmp_pipe,tiff_pipe,png_pipe,"     \
    "jpeg_pipe,image2"

struct media_video_params media_video_default_params(void)
{
    return (struct media_video_params){
        .fps = 1.0,
        .max_frames = 16,
        .max_duration_s = 3600.0,
        .max_decoded_frames = 3600 * 120,
        .max_input_bytes = (size_t)512 << 20,
        .image = media_image_default_params(),
    };
}

int media_video_sample_times(double duration_s, double fps, int max_frames, double *times,
                             int max_out)
{
    double want = floor(duration_s * fps);
    int n = want < 1 ? 1 : want > max_frames ? max_frames : (int)want;
    if (n < 1)
        n = 1;
    for (int i = 0; i < n && i < max_out; i++)
        times[i] = (i + 0.5) * duration_s / n;
    return n;
}

void media_video_frames_release(struct media_video_frames *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n_frames; i++)
        media_image_release(&v->frames[i]);
    free(v->frames);
    free(v->time_s);
    memset(v, 0, sizeof *v);
}

// ---- demux + decode ----------------------------------------------------------

struct vdec {
    struct media_mem mem;
    AVFormatContext *fmt;
    AVIOContext *avio;
    AVCodecContext *dec;
    AVFrame *frame;
    AVFrame *last;    /* the most recent decoded frame (kept past end of stream) */
    AVPacket *pkt;
    struct SwsContext *sws;
    int si;           /* video stream index */
    double tb;        /* stream time base, seconds */
    int64_t start;    /* stream start time in tb units (0 if unknown) */
    bool eof_sent;
    int n_decoded;
    double max_time_s;  /* a decoded frame later than this is OMNI_ERR_LIMIT (0: none) */
    int max_decoded;    /* decoding more frames than this is OMNI_ERR_LIMIT (0: none) */
};

static void vdec_close(struct vdec *d)
{
    sws_freeContext(d->sws);
    av_frame_free(&d->frame);
    av_frame_free(&d->last);
    av_packet_free(&d->pkt);
    avcodec_free_context(&d->dec);
    avformat_close_input(&d->fmt);
    if (d->avio) {
        av_freep(&d->avio->buffer);
        avio_context_free(&d->avio);
    }
}

/* The container's duration in seconds, 0 when it does not say. */
static double declared_duration(const AVFormatContext *fmt, const AVStream *st)
{
    if (st && st->duration > 0 && st->duration != AV_NOPTS_VALUE)
        return (double)st->duration * av_q2d(st->time_base);
    if (fmt->duration > 0 && fmt->duration != AV_NOPTS_VALUE)
        return (double)fmt->duration / AV_TIME_BASE;
    return 0.0;
}

/* The best video stream's declared size and the clip's declared duration
 * against the limits (max_duration_s 0: not checked). */
static int check_declared(const AVFormatContext *fmt, int si, const struct media_image_params *ip,
                          double max_duration_s, char *err, size_t errlen)
{
    const AVStream *st = fmt->streams[si];
    int rc;
    if (st->codecpar->width > 0 && st->codecpar->height > 0 &&
        (rc = media_image_check_size(st->codecpar->width, st->codecpar->height, ip, err,
                                     errlen)) < 0)
        return rc;
    double dur = declared_duration(fmt, st);
    if (max_duration_s > 0 && dur > max_duration_s)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "video: %.1f s exceeds the limit of %.1f s",
                         dur, max_duration_s);
    return OMNI_OK;
}

/* Open from memory (data) or a path. The declared frame size (and, with
 * max_duration_s > 0, duration) is checked as soon as the container header
 * is read, again once avformat_find_stream_info has filled in what the
 * header lacked; every decoder (the probing ones included) is told
 * max_pixels, so a frame larger than the limit fails inside ffmpeg
 * before its buffer is allocated. */
static int vdec_open(struct vdec *d, const void *data, size_t len, const char *path,
                     const struct media_image_params *ip, double max_duration_s, char *err,
                     size_t errlen)
{
    char e[AV_ERROR_MAX_STRING_SIZE];
    struct media_image_params def = media_image_default_params();
    if (!ip)
        ip = &def;
    const int64_t max_pixels = ip->max_pixels < INT_MAX ? ip->max_pixels : INT_MAX;
    media_log_init();
    memset(d, 0, sizeof *d);
    d->fmt = avformat_alloc_context();
    if (!d->fmt)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
    AVDictionary *opts = NULL;
    if (data) {
        d->mem = (struct media_mem){ data, len, 0 };
        uint8_t *buf = av_malloc(32768);
        if (!buf || !(d->avio = avio_alloc_context(buf, 32768, 0, &d->mem, media_mem_read, NULL, media_mem_seek))) {
            av_free(buf);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
        }
        d->fmt->pb = d->avio;
        d->fmt->protocol_whitelist = av_strdup("none");
    } else {
        d->fmt->protocol_whitelist = av_strdup("file");
    }
    d->fmt->io_open = data ? media_refuse_io_open : d->fmt->io_open;
    d->fmt->format_whitelist = av_strdup(MEDIA_VIDEO_DEMUXERS);
    int rc = avformat_open_input(&d->fmt, data ? NULL : path, NULL, &opts);
    av_dict_free(&opts);
    if (rc < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: not an image or video ffmpeg can read (%s)",
                         av_make_error_string(e, sizeof e, rc));
    int si = av_find_best_stream(d->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (si >= 0 && (rc = check_declared(d->fmt, si, ip, max_duration_s, err, errlen)) < 0)
        return rc;
    /* Probing decodes a frame or more of each stream: at most max_pixels each. */
    AVDictionary **sopts = av_calloc(d->fmt->nb_streams ? d->fmt->nb_streams : 1, sizeof *sopts);
    if (!sopts)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        av_dict_set_int(&sopts[i], "max_pixels", max_pixels, 0);
    rc = avformat_find_stream_info(d->fmt, sopts);
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        av_dict_free(&sopts[i]);
    av_free(sopts);
    if (rc < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: cannot read stream info (%s)",
                         av_make_error_string(e, sizeof e, rc));
    d->si = av_find_best_stream(d->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (d->si < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: no video stream");
    AVStream *st = d->fmt->streams[d->si];
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        d->fmt->streams[i]->discard = (int)i == d->si ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    if ((rc = check_declared(d->fmt, d->si, ip, max_duration_s, err, errlen)) < 0)
        return rc;
    if (st->codecpar->width <= 0 || st->codecpar->height <= 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "video: the picture size is unknown (a damaged file, or a picture over "
                         "the limit of %lld pixels)", (long long)ip->max_pixels);
    const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "video: no decoder for codec '%s'",
                         avcodec_get_name(st->codecpar->codec_id));
    d->dec = avcodec_alloc_context3(codec);
    d->frame = av_frame_alloc();
    d->last = av_frame_alloc();
    d->pkt = av_packet_alloc();
    if (!d->dec || !d->frame || !d->last || !d->pkt)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
    if ((rc = avcodec_parameters_to_context(d->dec, st->codecpar)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: bad codec parameters (%s)",
                         av_make_error_string(e, sizeof e, rc));
    d->dec->pkt_timebase = st->time_base;
    d->dec->thread_count = 1;
    /* A stream may change its size mid-way: the decoder refuses frames over the limit. */
    d->dec->max_pixels = max_pixels;
    if ((rc = avcodec_open2(d->dec, codec, NULL)) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: cannot open %s decoder (%s)",
                         codec->name, av_make_error_string(e, sizeof e, rc));
    d->tb = av_q2d(st->time_base);
    d->start = st->start_time == AV_NOPTS_VALUE ? 0 : st->start_time;
    return OMNI_OK;
}

static double vdec_frame_time(const struct vdec *d)
{
    int64_t ts = d->last->best_effort_timestamp;
    return ts == AV_NOPTS_VALUE ? 0.0 : (double)(ts - d->start) * d->tb;
}

/* Next decoded frame into d->last: 1, 0 at end of stream, or an error. */
static int vdec_next(struct vdec *d, char *err, size_t errlen)
{
    char e[AV_ERROR_MAX_STRING_SIZE];
    for (;;) {
        int rc = avcodec_receive_frame(d->dec, d->frame);
        if (rc == 0) {
            d->n_decoded++;
            av_frame_unref(d->last);
            av_frame_move_ref(d->last, d->frame);
            /* The container's duration was checked when it was opened; these
             * hold when it lied, or said nothing (a second of slack for
             * timestamps that do not start at zero exactly). */
            if (d->max_time_s > 0 && vdec_frame_time(d) > d->max_time_s + 1.0)
                return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                                 "video: a frame at %.1f s is past the limit of %.1f s",
                                 vdec_frame_time(d), d->max_time_s);
            if (d->max_decoded > 0 && d->n_decoded > d->max_decoded)
                return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                                 "video: more than %d frames decoded (max_decoded_frames)",
                                 d->max_decoded);
            return 1;
        }
        if (rc == AVERROR_EOF)
            return 0;
        if (rc != AVERROR(EAGAIN))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: decoding failed (%s)",
                             av_make_error_string(e, sizeof e, rc));
        if (d->eof_sent)
            return 0;
        rc = av_read_frame(d->fmt, d->pkt);
        if (rc < 0) {
            d->eof_sent = true;
            avcodec_send_packet(d->dec, NULL);
            continue;
        }
        if (d->pkt->stream_index == d->si) {
            rc = avcodec_send_packet(d->dec, d->pkt);
            if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_INVALIDDATA) {
                av_packet_unref(d->pkt);
                return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: decoding failed (%s)",
                                 av_make_error_string(e, sizeof e, rc));
            }
        }
        av_packet_unref(d->pkt);
    }
}

/* d->last as RGB; pixels with alpha are composited onto white. */
static int vdec_to_rgb(struct vdec *d, const struct media_image_params *ip, struct media_image *out,
                       char *err, size_t errlen)
{
    AVFrame *f = d->last;
    int rc = media_image_check_size(f->width, f->height, ip, err, errlen);
    if (rc < 0)
        return rc;
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f->format);
    bool alpha = desc && (desc->flags & AV_PIX_FMT_FLAG_ALPHA);
    d->sws = sws_getCachedContext(d->sws, f->width, f->height, f->format, f->width, f->height,
                                  alpha ? AV_PIX_FMT_RGBA : AV_PIX_FMT_RGB24,
                                  SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL,
                                  NULL);
    if (!d->sws)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "video: cannot convert pixel format %s",
                         desc ? desc->name : "?");
    if ((rc = media_image_alloc(out, f->width, f->height, err, errlen)) < 0)
        return rc;
    uint8_t *rgba = NULL;
    if (alpha && !(rgba = malloc((size_t)f->width * f->height * 4))) {
        media_image_release(out);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
    }
    uint8_t *dst[4] = { alpha ? rgba : out->rgb };
    int stride[4] = { f->width * (alpha ? 4 : 3) };
    sws_scale(d->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, stride);
    if (alpha) {
        media_image_composite_white(rgba, out);
        free(rgba);
    }
    return OMNI_OK;
}

int media_video_first_frame(const void *data, size_t len, const struct media_image_params *p,
                            struct media_image *out, char *err, size_t errlen)
{
    struct vdec d;
    memset(out, 0, sizeof *out);
    int rc = vdec_open(&d, data, len, NULL, p, 0, err, errlen);
    if (rc >= 0) {
        rc = vdec_next(&d, err, errlen);
        if (rc == 0)
            rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: no picture could be decoded");
        if (rc > 0)
            rc = vdec_to_rgb(&d, p, out, err, errlen);
    }
    vdec_close(&d);
    return rc;
}

// ---- sampling ----------------------------------------------------------------

static double clip_duration(const struct vdec *d)
{
    return declared_duration(d->fmt, d->fmt->streams[d->si]);
}

static int check_params(const struct media_video_params *p, char *err, size_t errlen)
{
    if (!(p->fps > 0) || p->max_frames < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "video: fps must be > 0 and max_frames >= 1");
    if (!(p->max_duration_s > 0) || p->max_decoded_frames < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "video: max_duration_s and max_decoded_frames must be positive");
    return OMNI_OK;
}

/* Open for sampling: the limits that hold while decoding come from p. */
static int vdec_open_for(struct vdec *d, const void *data, size_t len, const char *path,
                         const struct media_video_params *p, char *err, size_t errlen)
{
    int rc = vdec_open(d, data, len, path, &p->image, p->max_duration_s, err, errlen);
    d->max_time_s = p->max_duration_s;
    d->max_decoded = p->max_decoded_frames;
    return rc;
}

static int take(struct vdec *d, const struct media_video_params *p, struct media_video_frames *v,
                char *err, size_t errlen)
{
    int rc = vdec_to_rgb(d, &p->image, &v->frames[v->n_frames], err, errlen);
    if (rc < 0)
        return rc;
    v->time_s[v->n_frames++] = vdec_frame_time(d);
    return OMNI_OK;
}

/* Seek to the keyframe at or before each target and decode up to it (or
 * keep decoding forward when that keyframe is not past the frames already
 * decoded); a target past the last frame takes the last frame. */
static int sample_seeking(struct vdec *d, const struct media_video_params *p, const double *times,
                          int n, struct media_video_frames *v, char *err, size_t errlen)
{
    AVStream *st = d->fmt->streams[d->si];
    int64_t cur = AV_NOPTS_VALUE; /* timestamp of the last decoded frame */
    for (int i = 0; i < n; i++) {
        int64_t ts = d->start + (int64_t)(times[i] / d->tb);
        int k = av_index_search_timestamp(st, ts, AVSEEK_FLAG_BACKWARD);
        const AVIndexEntry *key = k >= 0 ? avformat_index_get_entry(st, k) : NULL;
        if (cur == AV_NOPTS_VALUE || !key || key->timestamp > cur) {
            if (av_seek_frame(d->fmt, d->si, ts, AVSEEK_FLAG_BACKWARD) < 0)
                return i == 0 ? 1 : omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: seek failed");
            avcodec_flush_buffers(d->dec);
            d->eof_sent = false;
        }
        int rc;
        while ((rc = vdec_next(d, err, errlen)) > 0 && vdec_frame_time(d) + 1e-6 < times[i])
            ;
        if (rc < 0)
            return rc;
        if (!d->last->buf[0])
            return i == 0 ? 1 : omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: no frame at %.2f s", times[i]);
        cur = d->last->best_effort_timestamp;
        if ((rc = take(d, p, v, err, errlen)) < 0)
            return rc;
    }
    v->seeked = true;
    return OMNI_OK;
}

/* One pass from the start: the first frame at or after each target. */
static int sample_sequential(struct vdec *d, const struct media_video_params *p,
                             const double *times, int n, struct media_video_frames *v, char *err,
                             size_t errlen)
{
    int rc = 0;
    while (v->n_frames < n && (rc = vdec_next(d, err, errlen)) > 0)
        if (vdec_frame_time(d) + 1e-6 >= times[v->n_frames] &&
            (rc = take(d, p, v, err, errlen)) < 0)
            return rc;
    if (rc < 0)
        return rc;
    if (v->n_frames == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: no frame could be decoded");
    return OMNI_OK;
}

static int sample(const void *data, size_t len, const char *path, const struct media_video_params *p,
                  struct media_video_frames *v, char *err, size_t errlen)
{
    struct media_video_params def = media_video_default_params();
    if (!p)
        p = &def;
    memset(v, 0, sizeof *v);
    int rc = check_params(p, err, errlen);
    if (rc < 0)
        return rc;
    struct vdec d;
    if ((rc = vdec_open_for(&d, data, len, path, p, err, errlen)) < 0)
        goto fail;
    double dur = clip_duration(&d);
    if (dur > p->max_duration_s) {
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "video: %.1f s exceeds the limit of %.1f s", dur,
                       p->max_duration_s);
        goto fail;
    }
    v->duration_s = dur;
    double *times = malloc(sizeof *times * p->max_frames);
    v->frames = calloc(p->max_frames, sizeof *v->frames);
    v->time_s = calloc(p->max_frames, sizeof *v->time_s);
    if (!times || !v->frames || !v->time_s) {
        free(times);
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "video: out of memory");
        goto fail;
    }
    int n = media_video_sample_times(dur, p->fps, p->max_frames, times, p->max_frames);
    rc = dur > 0 ? sample_seeking(&d, p, times, n, v, err, errlen) : 1;
    if (rc == 1) { /* cannot seek (or unknown duration): decode from the start */
        for (int i = 0; i < v->n_frames; i++)
            media_image_release(&v->frames[i]);
        v->n_frames = 0;
        if (dur <= 0)
            for (int i = 0; i < p->max_frames; i++)
                times[i] = i / p->fps;
        else if (av_seek_frame(d.fmt, d.si, d.start, AVSEEK_FLAG_BACKWARD) < 0) {
            vdec_close(&d);
            if ((rc = vdec_open_for(&d, data, len, path, p, err, errlen)) < 0) {
                free(times);
                goto fail;
            }
        }
        avcodec_flush_buffers(d.dec);
        d.eof_sent = false;
        rc = sample_sequential(&d, p, times, dur > 0 ? n : p->max_frames, v, err, errlen);
    }
    free(times);
    if (rc < 0)
        goto fail;
    v->n_decoded = d.n_decoded;
    vdec_close(&d);
    return OMNI_OK;
fail:
    vdec_close(&d);
    media_video_frames_release(v);
    return rc;
}

int media_video_probe(const void *data, size_t len, const struct media_video_params *p,
                      struct media_video_info *info, char *err, size_t errlen)
{
    struct media_video_params def = media_video_default_params();
    if (!p)
        p = &def;
    memset(info, 0, sizeof *info);
    if (!data || len == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: empty input");
    if (len > p->max_input_bytes)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "video: %zu bytes exceeds the limit of %zu",
                         len, p->max_input_bytes);
    int rc = check_params(p, err, errlen);
    if (rc < 0)
        return rc;
    struct vdec d;
    if ((rc = vdec_open_for(&d, data, len, NULL, p, err, errlen)) == OMNI_OK) {
        const AVCodecParameters *cp = d.fmt->streams[d.si]->codecpar;
        info->width = cp->width;
        info->height = cp->height;
        info->duration_s = clip_duration(&d);
        info->n_frames = info->duration_s > 0
                             ? media_video_sample_times(info->duration_s, p->fps, p->max_frames,
                                                        NULL, 0)
                             : p->max_frames;
    }
    vdec_close(&d);
    return rc;
}

int media_video_sample(const void *data, size_t len, const struct media_video_params *p,
                       struct media_video_frames *out, char *err, size_t errlen)
{
    size_t max = p ? p->max_input_bytes : media_video_default_params().max_input_bytes;
    memset(out, 0, sizeof *out);
    if (!data || len == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "video: empty input");
    if (len > max)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "video: %zu bytes exceeds the limit of %zu",
                         len, max);
    return sample(data, len, NULL, p, out, err, errlen);
}

int media_video_sample_file(const char *path, const struct media_video_params *p,
                            struct media_video_frames *out, char *err, size_t errlen)
{
    size_t max = p ? p->max_input_bytes : media_video_default_params().max_input_bytes;
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(path, &st) != 0)
        return omni_fail(err, errlen, OMNI_ERR_IO, "video: %s: cannot open", path);
    if ((uint64_t)st.st_size > max)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "video: %s: %lld bytes exceeds the limit of %zu",
                         path, (long long)st.st_size, max);
    return sample(NULL, 0, path, p, out, err, errlen);
}
