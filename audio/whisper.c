/* whisper.c - loading whisper.cpp ggml .bin files, the vocabulary and its
 * special tokens, languages, and the per-session state. Every count, shape,
 * type and size in the file is checked against the hyper-parameters and the
 * file size before anything is allocated from it. File layout (little-endian):
 *   1. u32 magic 0x67676d6c; 2. 11 x i32 hparams (see whisper_hparams);
 *   3. i32 n_mel, i32 n_fft (201), f32 filters[n_mel][n_fft];
 *   4. i32 n, n x (u32 len, bytes): token pieces 0..n-1 (specials may follow
 *      implicitly up to n_vocab); 5. until EOF: i32 n_dims, i32 name_len,
 *      i32 type, i32 ne[n_dims], name, data (ggml row-major, no padding). */
#include "audio/whisper_impl.h"
#include "audio/whisper_dev.h"

#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHISPER_MAGIC 0x67676d6cu
#define WHISPER_VOCAB_EN 51864   /* English-only models */
#define WHISPER_MAX_TENSOR_DIMS 4

static const char *const lang_codes[][2] = {
    { "en", "english" }, { "zh", "chinese" }, { "de", "german" }, { "es", "spanish" },
    { "ru", "russian" }, { "ko", "korean" }, { "fr", "french" }, { "ja", "japanese" },
    { "pt", "portuguese" }, { "tr", "turkish" }, { "pl", "polish" }, { "ca", "catalan" },
    { "nl", "dutch" }, { "ar", "arabic" }, { "sv", "swedish" }, { "it", "italian" },
    { "id", "indonesian" }, { "hi", "hindi" }, { "fi", "finnish" }, { "vi", "vietnamese" },
    { "he", "hebrew" }, { "uk", "ukrainian" }, { "el", "greek" }, { "ms", "malay" },
    { "cs", "czech" }, { "ro", "romanian" }, { "da", "danish" }, { "hu", "hungarian" },
    { "ta", "tamil" }, { "no", "norwegian" }, { "th", "thai" }, { "ur", "urdu" },
    { "hr", "croatian" }, { "bg", "bulgarian" }, { "lt", "lithuanian" }, { "la", "latin" },
    { "mi", "maori" }, { "ml", "malayalam" }, { "cy", "welsh" }, { "sk", "slovak" },
    { "te", "telugu" }, { "fa", "persian" }, { "lv", "latvian" }, { "bn", "bengali" },
    { "sr", "serbian" }, { "az", "azerbaijani" }, { "sl", "slovenian" }, { "kn", "kannada" },
    { "et", "estonian" }, { "mk", "macedonian" }, { "br", "breton" }, { "eu", "basque" },
    { "is", "icelandic" }, { "hy", "armenian" }, { "ne", "nepali" }, { "mn", "mongolian" },
    { "bs", "bosnian" }, { "kk", "kazakh" }, { "sq", "albanian" }, { "sw", "swahili" },
    { "gl", "galician" }, { "mr", "marathi" }, { "pa", "punjabi" }, { "si", "sinhala" },
    { "km", "khmer" }, { "sn", "shona" }, { "yo", "yoruba" }, { "so", "somali" },
    { "af", "afrikaans" }, { "oc", "occitan" }, { "ka", "georgian" }, { "be", "belarusian" },
    { "tg", "tajik" }, { "sd", "sindhi" }, { "gu", "gujarati" }, { "am", "amharic" },
    { "yi", "yiddish" }, { "lo", "lao" }, { "uz", "uzbek" }, { "fo", "faroese" },
    { "ht", "haitian creole" }, { "ps", "pashto" }, { "tk", "turkmen" }, { "nn", "nynorsk" },
    { "mt", "maltese" }, { "sa", "sanskrit" }, { "lb", "luxembourgish" }, { "my", "myanmar" },
    { "bo", "tibetan" }, { "tl", "tagalog" }, { "mg", "malagasy" }, { "as", "assamese" },
    { "tt", "tatar" }, { "haw", "hawaiian" }, { "ln", "lingala" }, { "ha", "hausa" },
    { "ba", "bashkir" }, { "jw", "javanese" }, { "su", "sundanese" }, { "yue", "cantonese" },
};
#define N_LANG_CODES ((int)(sizeof lang_codes / sizeof lang_codes[0]))

int whisper_lang_id(const char *s)
{
    for (int i = 0; s && i < N_LANG_CODES; i++)
        if (!strcmp(s, lang_codes[i][0]) || !strcmp(s, lang_codes[i][1]))
            return i;
    return -1;
}

const char *whisper_lang_str(int id) { return id >= 0 && id < N_LANG_CODES ? lang_codes[id][0] : NULL; }

// ---- reading ------------------------------------------------------------------

struct reader {
    FILE *f;
    const char *path;
    uint64_t size, pos;
    char *err;
    size_t errlen;
};

static int rd(struct reader *r, void *dst, uint64_t n, const char *what)
{
    if (n > r->size - r->pos)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                         "whisper: %s: %s: truncated (%llu bytes needed at offset %llu, file is %llu)",
                         r->path, what, (unsigned long long)n, (unsigned long long)r->pos,
                         (unsigned long long)r->size);
    if (n && fread(dst, 1, n, r->f) != n)
        return omni_fail(r->err, r->errlen, OMNI_ERR_IO, "whisper: %s: %s: read failed: %s", r->path,
                         what, strerror(errno));
    r->pos += n;
    return OMNI_OK;
}

static int rd_i32(struct reader *r, int32_t *v, const char *what) { return rd(r, v, 4, what); }

// ---- tensor table ---------------------------------------------------------------

enum tensor_kind {
    T_F32,  /* biases, norms, positional embeddings: F32 only */
    T_CONV, /* conv kernels: F32 or F16 */
    T_MAT,  /* matrices: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 */
};

struct expect {
    char name[64];
    enum tensor_kind kind;
    int n_dims;
    int64_t ne[3];
    const float **f32;        /* T_F32 destination */
    struct omni_tensor *mat;  /* T_CONV / T_MAT destination */
    bool seen;
};

struct table {
    struct expect *e;
    int n, cap;
};

static struct expect *add(struct table *t, enum tensor_kind kind, int n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2, const char *fmt, int layer)
{
    if (t->n == t->cap)
        return NULL; /* sized exactly by the caller */
    struct expect *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, fmt, layer);
    e->kind = kind;
    e->n_dims = n_dims;
    e->ne[0] = ne0;
    e->ne[1] = ne1;
    e->ne[2] = ne2;
    return e;
}

static void add_vec(struct table *t, const float **dst, int64_t n, const char *fmt, int layer)
{
    struct expect *e = add(t, T_F32, 1, n, 1, 1, fmt, layer);
    e->f32 = dst;
}

static void add_mat(struct table *t, struct omni_tensor *dst, int64_t n_in, int64_t n_out, const char *fmt,
                    int layer)
{
    struct expect *e = add(t, T_MAT, 2, n_in, n_out, 1, fmt, layer);
    e->mat = dst;
}

/* The attention, norm and MLP tensors of one block ("encoder.blocks.%d." + suffix). */
static void add_block(struct table *t, struct whisper_enc_layer *L, const char *side, int i, int64_t d)
{
    char fmt[64];
#define NAME(sfx) (snprintf(fmt, sizeof fmt, "%s.blocks.%%d." sfx, side), fmt)
    add_vec(t, &L->attn_ln_w, d, NAME("attn_ln.weight"), i);
    add_vec(t, &L->attn_ln_b, d, NAME("attn_ln.bias"), i);
    add_mat(t, &L->attn_q, d, d, NAME("attn.query.weight"), i);
    add_vec(t, &L->attn_q_b, d, NAME("attn.query.bias"), i);
    add_mat(t, &L->attn_k, d, d, NAME("attn.key.weight"), i);
    add_mat(t, &L->attn_v, d, d, NAME("attn.value.weight"), i);
    add_vec(t, &L->attn_v_b, d, NAME("attn.value.bias"), i);
    add_mat(t, &L->attn_out, d, d, NAME("attn.out.weight"), i);
    add_vec(t, &L->attn_out_b, d, NAME("attn.out.bias"), i);
    add_vec(t, &L->mlp_ln_w, d, NAME("mlp_ln.weight"), i);
    add_vec(t, &L->mlp_ln_b, d, NAME("mlp_ln.bias"), i);
    add_mat(t, &L->mlp_0, d, 4 * d, NAME("mlp.0.weight"), i);
    add_vec(t, &L->mlp_0_b, 4 * d, NAME("mlp.0.bias"), i);
    add_mat(t, &L->mlp_2, 4 * d, d, NAME("mlp.2.weight"), i);
    add_vec(t, &L->mlp_2_b, d, NAME("mlp.2.bias"), i);
#undef NAME
}

static int build_table(struct whisper_model *m, struct table *t)
{
    const struct whisper_hparams *hp = &m->hp;
    const int64_t d = hp->n_audio_state;
    t->cap = 11 + 15 * hp->n_audio_layer + 24 * hp->n_text_layer;
    t->e = calloc(t->cap, sizeof *t->e);
    m->enc = calloc(hp->n_audio_layer, sizeof *m->enc);
    m->dec = calloc(hp->n_text_layer, sizeof *m->dec);
    if (!t->e || !m->enc || !m->dec)
        return OMNI_ERR_NOMEM;
    add(t, T_CONV, 3, 3, hp->n_mels, d, "encoder.conv1.weight", 0)->mat = &m->conv1_w;
    add(t, T_F32, 2, 1, d, 1, "encoder.conv1.bias", 0)->f32 = &m->conv1_b;
    add(t, T_CONV, 3, 3, d, d, "encoder.conv2.weight", 0)->mat = &m->conv2_w;
    add(t, T_F32, 2, 1, d, 1, "encoder.conv2.bias", 0)->f32 = &m->conv2_b;
    add(t, T_F32, 2, d, hp->n_audio_ctx, 1, "encoder.positional_embedding", 0)->f32 = &m->enc_pos;
    add_vec(t, &m->enc_ln_w, d, "encoder.ln_post.weight", 0);
    add_vec(t, &m->enc_ln_b, d, "encoder.ln_post.bias", 0);
    for (int i = 0; i < hp->n_audio_layer; i++)
        add_block(t, &m->enc[i], "encoder", i, d);
    add_mat(t, &m->tok_emb, d, hp->n_vocab, "decoder.token_embedding.weight", 0);
    add(t, T_F32, 2, d, hp->n_text_ctx, 1, "decoder.positional_embedding", 0)->f32 = &m->dec_pos;
    add_vec(t, &m->dec_ln_w, d, "decoder.ln.weight", 0);
    add_vec(t, &m->dec_ln_b, d, "decoder.ln.bias", 0);
    for (int i = 0; i < hp->n_text_layer; i++) {
        struct whisper_dec_layer *L = &m->dec[i];
        add_block(t, &L->self, "decoder", i, d);
        add_vec(t, &L->cross_ln_w, d, "decoder.blocks.%d.cross_attn_ln.weight", i);
        add_vec(t, &L->cross_ln_b, d, "decoder.blocks.%d.cross_attn_ln.bias", i);
        add_mat(t, &L->cross_q, d, d, "decoder.blocks.%d.cross_attn.query.weight", i);
        add_vec(t, &L->cross_q_b, d, "decoder.blocks.%d.cross_attn.query.bias", i);
        add_mat(t, &L->cross_k, d, d, "decoder.blocks.%d.cross_attn.key.weight", i);
        add_mat(t, &L->cross_v, d, d, "decoder.blocks.%d.cross_attn.value.weight", i);
        add_vec(t, &L->cross_v_b, d, "decoder.blocks.%d.cross_attn.value.bias", i);
        add_mat(t, &L->cross_out, d, d, "decoder.blocks.%d.cross_attn.out.weight", i);
        add_vec(t, &L->cross_out_b, d, "decoder.blocks.%d.cross_attn.out.bias", i);
    }
    return t->n == t->cap ? OMNI_OK : OMNI_ERR_ARG;
}

static bool type_allowed(enum tensor_kind kind, int type)
{
    switch (kind) {
    case T_F32:
        return type == GGML_TYPE_F32;
    case T_CONV:
        return type == GGML_TYPE_F32 || type == GGML_TYPE_F16;
    case T_MAT:
        return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_Q4_0 ||
               type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 ||
               type == GGML_TYPE_Q8_0;
    }
    return false;
}

static int read_tensors(struct whisper_model *m, struct reader *r)
{
    struct table t = { 0 };
    int rc = build_table(m, &t);
    if (rc < 0) {
        free(t.e);
        return omni_fail(r->err, r->errlen, rc, "whisper: %s: out of memory for the tensor table", r->path);
    }
    if (!(m->blobs = calloc(t.n, sizeof *m->blobs))) {
        free(t.e);
        return omni_fail(r->err, r->errlen, OMNI_ERR_NOMEM, "whisper: %s: out of memory", r->path);
    }
    while (r->pos < r->size) {
        int32_t hdr[3], ne32[WHISPER_MAX_TENSOR_DIMS];
        char name[128];
        const uint64_t at = r->pos;
        if ((rc = rd(r, hdr, sizeof hdr, "tensor header")) < 0)
            goto out;
        const int32_t n_dims = hdr[0], name_len = hdr[1], type = hdr[2];
        if (n_dims < 1 || n_dims > WHISPER_MAX_TENSOR_DIMS || name_len < 1 || name_len >= (int)sizeof name) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                           "whisper: %s: tensor at offset %llu: bad n_dims %d or name length %d", r->path,
                           (unsigned long long)at, n_dims, name_len);
            goto out;
        }
        if ((rc = rd(r, ne32, 4 * (uint64_t)n_dims, "tensor dims")) < 0 ||
            (rc = rd(r, name, name_len, "tensor name")) < 0)
            goto out;
        name[name_len] = 0;
        struct expect *e = NULL;
        for (int i = 0; i < t.n && !e; i++)
            if (!strcmp(t.e[i].name, name))
                e = &t.e[i];
        if (!e) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: unknown tensor '%s'", r->path, name);
            goto out;
        }
        if (e->seen) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: tensor '%s' appears twice",
                           r->path, name);
            goto out;
        }
        e->seen = true;
        int64_t ne[3] = { 1, 1, 1 };
        bool shape_ok = n_dims <= 3;
        for (int i = 0; i < n_dims; i++) {
            if (i < 3)
                ne[i] = ne32[i];
            else
                shape_ok = shape_ok && ne32[i] == 1;
        }
        shape_ok = shape_ok && n_dims == e->n_dims && ne[0] == e->ne[0] && ne[1] == e->ne[1] && ne[2] == e->ne[2];
        if (!shape_ok) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                           "whisper: %s: tensor '%s': shape [%d, %d, %d] (%d dims), expected [%lld, %lld, %lld]",
                           r->path, name, ne32[0], n_dims > 1 ? ne32[1] : 1, n_dims > 2 ? ne32[2] : 1, n_dims,
                           (long long)e->ne[0], (long long)e->ne[1], (long long)e->ne[2]);
            goto out;
        }
        if (!type_allowed(e->kind, type)) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_UNSUPPORTED, "whisper: %s: tensor '%s': type %d (%s) not allowed here",
                           r->path, name, type, ggml_type_name(type));
            goto out;
        }
        const size_t row = ggml_row_size(type, ne[0]);
        size_t nbytes;
        if (!row || omni_mul_size(row, (size_t)(ne[1] * ne[2]), &nbytes)) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: tensor '%s': row of %lld is not a whole number of %s blocks",
                           r->path, name, (long long)ne[0], ggml_type_name(type));
            goto out;
        }
        if (nbytes > r->size - r->pos) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                           "whisper: %s: tensor '%s': %zu bytes of data past end of file (%llu bytes left)", r->path,
                           name, nbytes, (unsigned long long)(r->size - r->pos));
            goto out;
        }
        void *data = aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
        if (!data) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_NOMEM, "whisper: %s: tensor '%s': out of memory (%zu bytes)",
                           r->path, name, nbytes);
            goto out;
        }
        m->blobs[m->n_blobs++] = data;
        m->data_bytes += nbytes;
        if ((rc = rd(r, data, nbytes, name)) < 0)
            goto out;
        if (e->kind == T_F32) {
            *e->f32 = data;
        } else {
            /* conv kernels [out][in][k] become matrices of rows in*k */
            e->mat->type = type;
            e->mat->ne[0] = e->kind == T_CONV ? ne[0] * ne[1] : ne[0];
            e->mat->ne[1] = e->kind == T_CONV ? ne[2] : ne[1];
            e->mat->data = data;
        }
    }
    for (int i = 0; i < t.n; i++)
        if (!t.e[i].seen) {
            rc = omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: tensor '%s' missing", r->path, t.e[i].name);
            goto out;
        }
    rc = OMNI_OK;
out:
    free(t.e);
    return rc;
}

// ---- vocabulary -----------------------------------------------------------------

static uint32_t piece_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int32_t piece_lookup(const struct whisper_model *m, const char *s, size_t n)
{
    for (uint32_t h = piece_hash(s, n) & m->piece_index_mask;; h = (h + 1) & m->piece_index_mask) {
        const int32_t id = m->piece_index[h];
        if (id < 0)
            return -1;
        if (m->vocab_len[id] == n && !memcmp(m->vocab_blob + m->vocab_off[id], s, n))
            return id;
    }
}

/* Special token ids, as OpenAI's tokenizer lays them out after the 50257
 * byte-level pieces: English-only models have no language tokens before
 * <|translate|>; multilingual ones have n_vocab - 51765 - 1 of them. */
static void set_specials(struct whisper_model *m)
{
    for (int i = 0; i < WHISPER_N_SPECIAL; i++)
        m->special[i] = -1;
    m->n_langs = 0;
    const int32_t nv = m->hp.n_vocab;
    if (nv < WHISPER_VOCAB_EN)
        return;
    const bool multi = nv > WHISPER_VOCAB_EN;
    m->n_langs = multi ? nv - 51765 - 1 : 0;
    const int32_t after_langs = multi ? 50258 + m->n_langs + 1 : 50357;
    m->special[WHISPER_TOKEN_EOT] = multi ? 50257 : 50256;
    m->special[WHISPER_TOKEN_SOT] = multi ? 50258 : 50257;
    for (int i = WHISPER_TOKEN_TRANSLATE; i <= WHISPER_TOKEN_BEG; i++)
        m->special[i] = after_langs + (i - WHISPER_TOKEN_TRANSLATE);
}

static int read_vocab(struct whisper_model *m, struct reader *r)
{
    int32_t n;
    int rc = rd_i32(r, &n, "vocab size");
    if (rc < 0)
        return rc;
    const int32_t nv = m->hp.n_vocab;
    if (n < 0 || n > nv)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: vocab: %d pieces for n_vocab %d",
                         r->path, n, nv);
    /* file pieces, then names for the implicit special tokens */
    set_specials(m);
    m->n_vocab_file = n;
    m->vocab_off = calloc(nv, sizeof *m->vocab_off);
    m->vocab_len = calloc(nv, sizeof *m->vocab_len);
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)n + 2)
        cap <<= 1;
    m->piece_index = malloc(cap * sizeof *m->piece_index);
    m->piece_index_mask = cap - 1;
    size_t blob_cap = (size_t)n * 8 + (size_t)(nv - n) * 24 + 64, blob_len = 0;
    m->vocab_blob = malloc(blob_cap);
    if (!m->vocab_off || !m->vocab_len || !m->piece_index || !m->vocab_blob)
        return omni_fail(r->err, r->errlen, OMNI_ERR_NOMEM, "whisper: %s: out of memory for the vocab", r->path);
    memset(m->piece_index, 0xff, cap * sizeof *m->piece_index);
    for (int32_t i = 0; i < nv; i++) {
        char tmp[48];
        uint32_t len;
        if (i < n) {
            if ((rc = rd(r, &len, 4, "vocab piece length")) < 0)
                return rc;
            if (len > r->size - r->pos)
                return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                                 "whisper: %s: vocab piece %d: length %u past end of file", r->path, i, len);
        } else {
            int k = -1;
            for (int j = 0; j < WHISPER_N_SPECIAL && k < 0; j++)
                if (m->special[j] == i)
                    k = j;
            static const char *const names[WHISPER_N_SPECIAL] = {
                "[_EOT_]", "[_SOT_]", "[_TRANSLATE_]", "[_TRANSCRIBE_]", "[_SOLM_]", "[_PREV_]", "[_NOSP_]",
                "[_NOT_]", "[_BEG_]",
            };
            const int32_t beg = m->special[WHISPER_TOKEN_BEG], sot = m->special[WHISPER_TOKEN_SOT];
            if (k >= 0)
                snprintf(tmp, sizeof tmp, "%s", names[k]);
            else if (beg >= 0 && i > beg)
                snprintf(tmp, sizeof tmp, "[_TT_%d]", i - beg);
            else if (sot >= 0 && i > sot && i <= sot + m->n_langs)
                snprintf(tmp, sizeof tmp, "[_LANG_%s]", whisper_lang_str(i - sot - 1));
            else
                snprintf(tmp, sizeof tmp, "[_extra_token_%d]", i);
            len = strlen(tmp);
        }
        if (blob_len + len > blob_cap) {
            blob_cap = (blob_len + len) * 2;
            char *nb = realloc(m->vocab_blob, blob_cap);
            if (!nb)
                return omni_fail(r->err, r->errlen, OMNI_ERR_NOMEM, "whisper: %s: out of memory for the vocab", r->path);
            m->vocab_blob = nb;
        }
        if (i < n) {
            if ((rc = rd(r, m->vocab_blob + blob_len, len, "vocab piece")) < 0)
                return rc;
        } else {
            memcpy(m->vocab_blob + blob_len, tmp, len);
        }
        m->vocab_off[i] = (uint32_t)blob_len;
        m->vocab_len[i] = len;
        blob_len += len;
        if (blob_len > UINT32_MAX)
            return omni_fail(r->err, r->errlen, OMNI_ERR_LIMIT, "whisper: %s: vocab larger than 4 GB", r->path);
        if (i < n) {
            if ((int32_t)len > m->max_piece_len)
                m->max_piece_len = (int32_t)len;
            if (piece_lookup(m, m->vocab_blob + m->vocab_off[i], len) < 0) { /* first id wins */
                uint32_t h = piece_hash(m->vocab_blob + m->vocab_off[i], len) & m->piece_index_mask;
                while (m->piece_index[h] >= 0)
                    h = (h + 1) & m->piece_index_mask;
                m->piece_index[h] = i;
            }
        }
    }
    return OMNI_OK;
}

// ---- model --------------------------------------------------------------------

static int check_hparams(const struct whisper_hparams *hp, struct reader *r)
{
    const struct {
        const char *name;
        int32_t v, lo, hi;
    } f[] = {
        { "n_vocab", hp->n_vocab, 1, 1 << 20 },
        { "n_audio_ctx", hp->n_audio_ctx, WHISPER_CHUNK_FRAMES / 2, WHISPER_CHUNK_FRAMES / 2 },
        { "n_audio_state", hp->n_audio_state, 1, 1 << 14 },
        { "n_audio_head", hp->n_audio_head, 1, 256 },
        { "n_audio_layer", hp->n_audio_layer, 1, 256 },
        { "n_text_ctx", hp->n_text_ctx, 1, 1 << 14 },
        { "n_text_state", hp->n_text_state, 1, 1 << 14 },
        { "n_text_head", hp->n_text_head, 1, 256 },
        { "n_text_layer", hp->n_text_layer, 1, 256 },
        { "n_mels", hp->n_mels, 1, 512 },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT, "whisper: %s: hparams: %s = %d, expected %d..%d",
                             r->path, f[i].name, f[i].v, f[i].lo, f[i].hi);
    if (hp->n_text_state != hp->n_audio_state || hp->n_audio_state % hp->n_audio_head ||
        hp->n_text_state % hp->n_text_head)
        return omni_fail(r->err, r->errlen, OMNI_ERR_FORMAT,
                         "whisper: %s: hparams: n_audio_state %d / n_text_state %d must be equal and divisible by "
                         "the head counts (%d, %d)", r->path, hp->n_audio_state, hp->n_text_state,
                         hp->n_audio_head, hp->n_text_head);
    return OMNI_OK;
}

struct whisper_model *whisper_model_load(const char *path, char *err, size_t errlen)
{
    struct reader r = { .path = path, .err = err, .errlen = errlen };
    struct whisper_model *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: %s: out of memory", path);
        return NULL;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    struct stat st;
    if (!(r.f = fopen(path, "rb")) || fstat(fileno(r.f), &st) != 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "whisper: %s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    r.size = (uint64_t)st.st_size;
    uint32_t magic;
    if (rd(&r, &magic, 4, "magic") < 0)
        goto fail;
    if (magic != WHISPER_MAGIC) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "whisper: %s: bad magic 0x%08x (not a whisper.cpp ggml file)",
                  path, magic);
        goto fail;
    }
    int32_t hv[11];
    if (rd(&r, hv, sizeof hv, "hparams") < 0)
        goto fail;
    struct whisper_hparams *hp = &m->hp;
    *hp = (struct whisper_hparams){ hv[0], hv[1], hv[2], hv[3], hv[4], hv[5], hv[6], hv[7], hv[8], hv[9], hv[10] % 1000 };
    if (check_hparams(hp, &r) < 0)
        goto fail;

    int32_t n_mel, n_fft;
    if (rd_i32(&r, &n_mel, "mel filters n_mel") < 0 || rd_i32(&r, &n_fft, "mel filters n_fft") < 0)
        goto fail;
    if (n_mel != hp->n_mels || n_fft != 201) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "whisper: %s: mel filters: %d x %d, expected %d x 201", path,
                  n_mel, n_fft, hp->n_mels);
        goto fail;
    }
    const size_t filt_bytes = (size_t)n_mel * n_fft * sizeof(float);
    if (filt_bytes > r.size - r.pos) {
        rd(&r, NULL, filt_bytes, "mel filters");
        goto fail;
    }
    if (!(m->filters = malloc(filt_bytes))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: %s: out of memory", path);
        goto fail;
    }
    if (rd(&r, m->filters, filt_bytes, "mel filters") < 0 || read_vocab(m, &r) < 0 || read_tensors(m, &r) < 0)
        goto fail;
    fclose(r.f);
    m->cross_f16 = m->dec[0].cross_k.type != GGML_TYPE_F32;
    return m;
fail:
    if (r.f)
        fclose(r.f);
    whisper_model_free(m);
    return NULL;
}

void whisper_model_free(struct whisper_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_blobs; i++)
        free(m->blobs[i]);
    free(m->blobs);
    free(m->enc);
    free(m->dec);
    free(m->filters);
    free(m->vocab_blob);
    free(m->vocab_off);
    free(m->vocab_len);
    free(m->piece_index);
    free(m);
}

const struct whisper_hparams *whisper_model_hparams(const struct whisper_model *m) { return &m->hp; }
const float *whisper_model_mel_filters(const struct whisper_model *m) { return m->filters; }
bool whisper_is_multilingual(const struct whisper_model *m) { return m->n_langs > 0; }
size_t whisper_model_size_bytes(const struct whisper_model *m) { return m->data_bytes; }
int whisper_lang_max_id(const struct whisper_model *m) { return m->n_langs - 1; }

int32_t whisper_token_special(const struct whisper_model *m, enum whisper_special_token which)
{
    return (unsigned)which < WHISPER_N_SPECIAL ? m->special[which] : -1;
}

int32_t whisper_token_lang(const struct whisper_model *m, int lang)
{
    return lang >= 0 && lang < m->n_langs ? m->special[WHISPER_TOKEN_SOT] + 1 + lang : -1;
}

const char *whisper_token_bytes(const struct whisper_model *m, int32_t id, size_t *len)
{
    if (id < 0 || id >= m->hp.n_vocab) {
        *len = 0;
        return "";
    }
    *len = m->vocab_len[id];
    return m->vocab_blob + m->vocab_off[id];
}

int whisper_tokenize(const struct whisper_model *m, const char *text, int32_t *ids, int max)
{
    /* words start at a space (GPT-2 pieces carry their leading space);
     * within a word, take the longest piece in the vocab at each point */
    int n = 0;
    const size_t len = strlen(text);
    size_t i = 0;
    while (i < len) {
        size_t end = i + 1;
        while (end < len && text[end] != ' ')
            end++;
        while (i < end) {
            size_t take = end - i < (size_t)m->max_piece_len ? end - i : (size_t)m->max_piece_len;
            int32_t id = -1;
            for (; take > 0 && (id = piece_lookup(m, text + i, take)) < 0; take--)
                ;
            if (id < 0) { /* a byte the vocab lacks: skip it */
                i++;
                continue;
            }
            if (n == max)
                return OMNI_ERR_LIMIT;
            ids[n++] = id;
            i += take;
        }
    }
    return n;
}

// ---- state --------------------------------------------------------------------

/* The memory every state keeps between passes: encoder output, cross K/V
 * and row lists (self-attention caches come per decoder slot on first use). */
struct whisper_state *whisper_state_alloc(const struct whisper_model *m, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &m->hp;
    const size_t d = hp->n_audio_state, nc = hp->n_audio_ctx, nt = hp->n_text_ctx;
    struct whisper_state *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->m = m;
    if (!(s->enc_out = malloc(nc * d * sizeof(float))) ||
        !(s->cross_k = malloc(hp->n_text_layer * nc * d * (m->cross_f16 ? 2 : sizeof(float)))) ||
        !(s->cross_v = malloc(hp->n_text_layer * nc * d * (m->cross_f16 ? 2 : sizeof(float)))) ||
        !(s->d_slot = malloc(nt * sizeof(int))) || !(s->d_pos = malloc(nt * sizeof(int))))
        goto nomem;
    return s;
nomem:
    whisper_state_free(s);
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: out of memory for a state");
    return NULL;
}

struct whisper_state *whisper_state_new(const struct whisper_model *m, struct tpool *tp, char *err, size_t errlen)
{
    struct whisper_state *s = whisper_state_alloc(m, err, errlen);
    if (s && !(s->work = whisper_work_new(m, tp))) {
        whisper_state_free(s);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: out of memory for a state");
        return NULL;
    }
    if (s)
        s->tp = tp;
    return s;
}

int whisper_state_logits_reserve(struct whisper_state *s, int n, char *err, size_t errlen)
{
    if (n <= s->logits_cap)
        return OMNI_OK;
    float *l = realloc(s->logits, (size_t)n * s->m->hp.n_vocab * sizeof(float));
    if (!l)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: decode: out of memory for logits");
    s->logits = l;
    s->logits_cap = n;
    return OMNI_OK;
}

void whisper_state_free(struct whisper_state *s)
{
    if (!s)
        return;
    if (s->dev)
        whisper_dev_release(s->dev, s);
    whisper_work_free(s->work);
    free(s->enc_out);
    free(s->cross_k);
    free(s->cross_v);
    free(s->logits);
    for (int i = 0; i < WHISPER_MAX_DECODERS; i++) {
        free(s->self_k[i]);
        free(s->self_v[i]);
    }
    for (int i = 0; i < s->n_segs; i++) {
        free(s->segs[i].text);
        free(s->segs[i].tokens);
    }
    free(s->segs);
    free(s->d_slot);
    free(s->d_pos);
    free(s);
}
