/* ffio.h - reading ffmpeg containers from memory, shared by media/audio.c and
 * media/video.c.
 *
 *   struct media_mem m = { data, len, 0 };
 *   AVIOContext *pb = avio_alloc_context(buf, size, 0, &m, media_mem_read, NULL, media_mem_seek);
 *   fmt->pb = pb; fmt->io_open = media_refuse_io_open;
 *
 * Thread safety: a struct media_mem belongs to the one demuxer reading it. */
#ifndef OMNI_MEDIA_FFIO_H
#define OMNI_MEDIA_FFIO_H

#include <stddef.h>
#include <stdint.h>

struct AVFormatContext;
struct AVIOContext;
struct AVDictionary;

/* A caller-owned buffer read as a seekable file (not copied). */
struct media_mem {
    const uint8_t *data;
    size_t len, pos;
};

/* AVIOContext callbacks over a struct media_mem (the opaque pointer). */
int media_mem_read(void *opaque, uint8_t *buf, int size);
int64_t media_mem_seek(void *opaque, int64_t offset, int whence);

/* io_open callback that refuses: demuxers that reference other files
 * (playlists, concat lists) must not make an upload open anything. */
int media_refuse_io_open(struct AVFormatContext *s, struct AVIOContext **pb, const char *url,
                         int flags, struct AVDictionary **options);

#endif
