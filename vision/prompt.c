/* prompt.c - a rendered chat prompt with image markers -> token runs and
 * embedding runs for the engine. The text is cut at each marker and each
 * image contributes its family layout; the text between two embedding runs
 * (prompt text and layout texts together) is tokenized as one piece with
 * special tokens parsed, as the reference processors tokenize the expanded
 * prompt: Gemma 3's "user\n" + "\n\n<start_of_image>" is "user\n\n\n..." to
 * its tokenizer, one newline run. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer.h"
#include "src/core/omni.h"
#include "vision/vision.h"

void vision_prompt_release(struct vision_prompt *p)
{
    if (!p)
        return;
    free(p->parts);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

struct builder {
    struct vision_prompt *p;
    const struct tokenizer *tok;
    int cap_parts, cap_ids, n_ids;
    char *pend;    /* text not tokenized yet (up to the next embedding run) */
    size_t n_pend, cap_pend;
    int *offs;     /* [n_parts] where each token part starts in ids (ids moves as it grows) */
    char *err;
    size_t errlen;
};

static int add_part(struct builder *b, const float *embd, int n, uint64_t hash)
{
    struct vision_prompt *p = b->p;
    if (p->n_parts == b->cap_parts) {
        int cap = b->cap_parts ? 2 * b->cap_parts : 16;
        void *np = realloc(p->parts, sizeof *p->parts * cap);
        if (np)
            p->parts = np;
        void *no = np ? realloc(b->offs, sizeof *b->offs * cap) : NULL;
        if (!no)
            return omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        b->offs = no, b->cap_parts = cap;
    }
    b->offs[p->n_parts] = b->n_ids - (embd ? 0 : n);
    p->parts[p->n_parts++] = (struct vision_prompt_part){ .embd = embd, .n = n, .media_hash = hash };
    p->n_positions += n;
    return OMNI_OK;
}

static int add_ids(struct builder *b, const int32_t *ids, int n)
{
    if (b->n_ids + n > b->cap_ids) {
        int cap = (b->n_ids + n) * 2 + 64;
        void *ni = realloc(b->p->ids, sizeof *b->p->ids * cap);
        if (!ni)
            return omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        b->p->ids = ni, b->cap_ids = cap;
    }
    memcpy(b->p->ids + b->n_ids, ids, sizeof *ids * n);
    b->n_ids += n;
    return add_part(b, NULL, n, 0);
}

static int tokenize(struct builder *b, const char *text, size_t len)
{
    if (len == 0)
        return OMNI_OK;
    if (len > (1u << 28))
        return omni_fail(b->err, b->errlen, OMNI_ERR_LIMIT, "vision: prompt text too long");
    int cap = (int)len + 16, needed = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    if (!ids)
        return omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    int n = tokenizer_encode(b->tok, text, len, TOK_PARSE_SPECIAL, ids, cap, &needed);
    if (n == OMNI_ERR_LIMIT) {
        int32_t *more = realloc(ids, sizeof *ids * needed);
        if (!more) {
            free(ids);
            return omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        }
        ids = more;
        n = tokenizer_encode(b->tok, text, len, TOK_PARSE_SPECIAL, ids, needed, NULL);
    }
    int rc = n < 0 ? omni_fail(b->err, b->errlen, n, "vision: prompt text is not valid UTF-8")
                   : add_ids(b, ids, n);
    free(ids);
    return rc;
}

/* Queue text; flush() tokenizes what is queued. */
static int add_text(struct builder *b, const char *text, size_t len)
{
    if (len == 0)
        return OMNI_OK;
    if (len > (1u << 28) || b->n_pend + len > (1u << 28))
        return omni_fail(b->err, b->errlen, OMNI_ERR_LIMIT, "vision: prompt text too long");
    if (b->n_pend + len > b->cap_pend) {
        size_t cap = (b->n_pend + len) * 2 + 64;
        char *np = realloc(b->pend, cap);
        if (!np)
            return omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        b->pend = np, b->cap_pend = cap;
    }
    memcpy(b->pend + b->n_pend, text, len);
    b->n_pend += len;
    return OMNI_OK;
}

static int flush(struct builder *b)
{
    int rc = tokenize(b, b->pend, b->n_pend);
    b->n_pend = 0;
    return rc;
}

int vision_prompt_build(const struct vision_model *m, const struct tokenizer *tok,
                        const char *text, size_t len, bool add_bos,
                        const struct vision_embd *images, int n_images, struct vision_prompt *out,
                        char *err, size_t errlen)
{
    struct builder b = { .p = out, .tok = tok, .err = err, .errlen = errlen };
    const char *marker = vision_image_marker(m);
    const size_t mlen = strlen(marker);
    int rc = OMNI_OK, used = 0;
    memset(out, 0, sizeof *out);
    if (add_bos && tokenizer_add_bos(tok) && tokenizer_bos(tok) >= 0) {
        int32_t bos = tokenizer_bos(tok);
        rc = add_ids(&b, &bos, 1);
    }
    const char *p = text, *end = text + len;
    while (rc == OMNI_OK) {
        const char *hit = mlen <= (size_t)(end - p) ? memmem(p, end - p, marker, mlen) : NULL;
        rc = add_text(&b, p, (size_t)((hit ? hit : end) - p));
        if (rc < 0 || !hit)
            break;
        if (used == n_images) {
            rc = omni_fail(err, errlen, OMNI_ERR_ARG, "vision: the prompt has more %s markers than images (%d)",
                           marker, n_images);
            break;
        }
        struct vision_layout lay;
        const struct vision_embd *e = &images[used++];
        if ((rc = vision_layout_build(m, e, &lay, err, errlen)) < 0)
            break;
        for (int i = 0; i < lay.n && rc == OMNI_OK; i++) {
            if (lay.seg[i].text) {
                rc = add_text(&b, lay.seg[i].text, strlen(lay.seg[i].text));
                continue;
            }
            if ((rc = flush(&b)) < 0)
                break;
            rc = add_part(&b, e->data + (size_t)lay.seg[i].row0 * e->n_embd, lay.seg[i].n_rows, e->key_hash);
            /* a qwen2vl image is one run of rows over its merged grid, a
             * video grid_t such grids: the language model's M-RoPE ids
             * follow the grid (and the video's time) */
            const int64_t n_grid = (int64_t)(e->grid_t > 0 ? e->grid_t : 1) * e->tile_rows * e->tile_cols;
            if (rc == OMNI_OK && vision_model_info(m)->family == VISION_QWEN2VL &&
                n_grid == lay.seg[i].n_rows) {
                struct vision_prompt_part *pt = &out->parts[out->n_parts - 1];
                pt->grid_rows = e->tile_rows;
                pt->grid_cols = e->tile_cols;
                pt->grid_t = e->grid_t;
                pt->t_step = e->t_step;
            }
        }
        vision_layout_release(&lay);
        p = hit + mlen;
    }
    if (rc == OMNI_OK)
        rc = flush(&b);
    if (rc == OMNI_OK && used != n_images)
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %d images but %d %s markers in the prompt",
                       n_images, used, marker);
    if (rc == OMNI_OK)
        for (int i = 0; i < out->n_parts; i++)
            if (!out->parts[i].embd)
                out->parts[i].tokens = out->ids + b.offs[i];
    free(b.offs);
    free(b.pend);
    if (rc < 0)
        vision_prompt_release(out);
    return rc;
}
