/* video.h - frames out of video clips through ffmpeg: sample a clip at `fps`
 * frames per second, at most `max_frames`, spread uniformly over its
 * duration, seeking to each target time instead of decoding the whole file
 * when the container allows it; frames come out as RGB media_images.
 *
 *   struct media_video_params p = media_video_default_params();  // 1 fps, 16 frames
 *   struct media_video_frames v;
 *   if (media_video_sample_file("clip.mp4", &p, &v, err, sizeof err) < 0) ...
 *   for (int i = 0; i < v.n_frames; i++) use(&v.frames[i], v.time_s[i]);
 *   media_video_frames_release(&v);
 *
 * The declared frame size is checked against p->image before decoding (ffmpeg's
 * decoder then refuses larger frames itself) and the declared duration
 * against p->max_duration_s; while decoding, a frame timestamped past
 * max_duration_s or more than max_decoded_frames frames stop it with
 * OMNI_ERR_LIMIT. Thread safety: reentrant. Errors: negative enum omni_err
 * plus one line in err. */
#ifndef MEDIA_VIDEO_H
#define MEDIA_VIDEO_H

#include <stdbool.h>
#include <stddef.h>

#include "media/image.h"

struct media_video_params {
    double fps;                /* frames sampled per second of video (default 1) */
    int max_frames;            /* at most this many frames (default 16) */
    double max_duration_s;     /* longer clips fail: the declared duration before decoding,
                                  frame timestamps while decoding (default 3600:
                                  --max-video-seconds) */
    int max_decoded_frames;    /* decoding more frames than this fails, whatever the
                                  timestamps say (default 432000: an hour at 120 fps) */
    size_t max_input_bytes;    /* larger inputs fail (default 512 MiB) */
    struct media_image_params image; /* per-frame pixel limits */
};

struct media_video_params media_video_default_params(void);

struct media_video_frames {
    int n_frames;
    struct media_image *frames; /* [n_frames] */
    double *time_s;             /* [n_frames] presentation time of each frame */
    double duration_s;          /* of the clip */
    int n_decoded;              /* frames the decoder produced (for tests: seeking skips most) */
    bool seeked;                /* the sampler seeked instead of decoding everything */
};

/* What opening a clip tells, before sampling. */
struct media_video_info {
    int width, height;   /* of the video stream */
    double duration_s;   /* declared; 0 when the container does not say */
    int n_frames;        /* frames media_video_sample will take (at most, when
                            duration_s is 0) */
};

/* Open a clip in memory and check it against p's limits (size, declared
 * duration, bytes) without sampling: ffmpeg reads the headers and decodes
 * what it needs to learn the stream parameters, no more. */
int media_video_probe(const void *data, size_t len, const struct media_video_params *p,
                      struct media_video_info *info, char *err, size_t errlen);

/* Sample frames from a clip in memory / on disk. On success *out owns the
 * frames (release with media_video_frames_release). p NULL = defaults. */
int media_video_sample(const void *data, size_t len, const struct media_video_params *p,
                       struct media_video_frames *out, char *err, size_t errlen);
int media_video_sample_file(const char *path, const struct media_video_params *p,
                            struct media_video_frames *out, char *err, size_t errlen);
void media_video_frames_release(struct media_video_frames *v);

/* The first frame of the first video stream (WebP, GIF, BMP, TIFF, or a
 * video): what media_image_decode uses for formats without their own
 * library. */
int media_video_first_frame(const void *data, size_t len, const struct media_image_params *p,
                            struct media_image *out, char *err, size_t errlen);

/* The times (seconds) media_video_sample picks for a clip of duration_s:
 * n = clamp(floor(duration_s * fps), 1, max_frames) centres of equal
 * slices. Writes at most max_out times; returns n. */
int media_video_sample_times(double duration_s, double fps, int max_frames, double *times,
                             int max_out);

#endif
