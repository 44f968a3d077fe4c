/* ffio.c - AVIOContext callbacks over a memory buffer, and the io_open guard
 * that keeps demuxers from opening other files. */
#include "ffio.h"

#include <libavformat/avformat.h>
#include <string.h>

int media_mem_read(void *opaque, uint8_t *buf, int size)
{
    struct media_mem *r = opaque;
    size_t left = r->len - r->pos;
    if (left == 0)
        return AVERROR_EOF;
    size_t n = (size_t)size < left ? (size_t)size : left;
    memcpy(buf, r->data + r->pos, n);
    r->pos += n;
    return (int)n;
}

int64_t media_mem_seek(void *opaque, int64_t offset, int whence)
{
    struct media_mem *r = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return (int64_t)r->len;
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)r->pos; break;
    case SEEK_END: base = (int64_t)r->len; break;
    default: return AVERROR(EINVAL);
    }
    if (offset < -base || offset > (int64_t)r->len - base)
        return AVERROR(EINVAL);
    r->pos = (size_t)(base + offset);
    return (int64_t)r->pos;
}

int media_refuse_io_open(struct AVFormatContext *s, struct AVIOContext **pb, const char *url,
                         int flags, struct AVDictionary **options)
{
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}
