/* fuzz_audio.c - audio decoding of media/audio.c: whole files through
 * ffmpeg (media_audio_decode_memory: any container and codec it probes),
 * raw PCM buffers (media_audio_decode_raw) and the streaming resampler the
 * WebSocket paths use (push in chunks, pull, flush).
 *
 * Input: byte 0 selects: 0-127 a file; otherwise bits 0 f32 instead of s16,
 * bit 1 resampler instead of one buffer, bytes 1-2 the input rate; then
 * the bytes. */
#include "tests/fuzz/fz_util.h"

#include "media/audio.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct media_audio_params p = media_audio_default_params();
    p.max_duration_s = 20;   /* bounds the work and memory of one input */
    char err[256];
    float *pcm = NULL;
    size_t n = 0;
    if (data[0] < 128) {
        /* ffmpeg is not instrumented: the file ends at an unreadable page */
        uint8_t *in = fz_guarded_copy(data + 1, size - 1);
        if (media_audio_decode_memory(in, size - 1, &p, &pcm, &n, err, sizeof err) == 0 && n) {
            volatile float last = pcm[n - 1];
            (void)last;
        }
        free(pcm);
        fz_guarded_free(in, size - 1);
        return 0;
    }
    const uint8_t mode = data[0];
    enum media_pcm_format fmt = mode & 1 ? MEDIA_PCM_F32LE : MEDIA_PCM_S16LE;
    int rate = 4000 + (data[1] | data[2] << 8) * 2;   /* 4 kHz .. 135 kHz: both sides of the limits */
    data += 3, size -= 3;
    if (!(mode & 2)) {
        if (media_audio_decode_raw(data, size, fmt, rate, &p, &pcm, &n, err, sizeof err) == 0 && n) {
            volatile float last = pcm[n - 1];
            (void)last;
        }
        free(pcm);
        return 0;
    }
    struct media_resampler *rs = media_resampler_new(fmt, rate, &p, err, sizeof err);
    if (!rs)
        return 0;
    float out[512];
    for (size_t off = 0, k = 0; off < size; k++) {
        size_t chunk = 1 + (k * 131 + data[off]) % 700;   /* odd sizes split samples */
        if (chunk > size - off)
            chunk = size - off;
        if (media_resampler_push(rs, data + off, chunk, err, sizeof err) < 0)
            break;
        off += chunk;
        while (media_resampler_pull(rs, out, sizeof out / sizeof *out) > 0)
            ;
    }
    if (media_resampler_flush(rs, err, sizeof err) == 0)
        while (media_resampler_available(rs))
            media_resampler_pull(rs, out, sizeof out / sizeof *out);
    media_resampler_free(rs);
    return 0;
}
