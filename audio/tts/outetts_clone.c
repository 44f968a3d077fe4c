/* outetts_clone.c - OuteTTS speaker profiles from a recording: outetts'
 * audio features, the transcript's words timed by the recognizer's, and
 * the interface-v3 speaker JSON (outetts_clone.h).
 *
 * The features follow outetts' audio processor as published (RMS energy,
 * spectral centroid over the whole segment, autocorrelation pitch); the
 * spectrum here is of the segment zero-padded to a power of two (a radix-2
 * FFT), which moves the centroid's bins slightly against an rfft of the
 * unpadded segment: the rounded 0..100 value rarely changes. */
#include "audio/tts/outetts_clone.h"

#include "audio/tts/outetts.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- features -----------------------------------------------------------------

/* In-place radix-2 FFT of re/im[n], n a power of two. */
static void fft(double *re, double *im, size_t n)
{
    for (size_t i = 1, j = 0; i < n; i++) {   /* bit reversal */
        size_t bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            double t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (size_t len = 2; len <= n; len <<= 1) {
        double ang = -2 * M_PI / (double)len, wr = cos(ang), wi = sin(ang);
        for (size_t i = 0; i < n; i += len) {
            double cr = 1, ci = 0;
            for (size_t k = 0; k < len / 2; k++) {
                size_t a = i + k, b = a + len / 2;
                double xr = re[b] * cr - im[b] * ci, xi = re[b] * ci + im[b] * cr;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
                double t = cr * wr - ci * wi;
                ci = cr * wi + ci * wr;
                cr = t;
            }
        }
    }
}

/* magnitude-weighted mean frequency (Hz) of the segment's spectrum */
static double spectral_centroid(const float *x, int64_t n, int rate)
{
    size_t m = 1;
    while (m < (size_t)n)
        m <<= 1;
    double *re = calloc(m, sizeof *re), *im = calloc(m, sizeof *im);
    double c = 0;
    if (re && im) {
        for (int64_t i = 0; i < n; i++)
            re[i] = x[i];
        fft(re, im, m);
        double ws = 0, s = 0;
        for (size_t k = 0; k < m / 2; k++) {
            double mag = sqrt(re[k] * re[k] + im[k] * im[k]);
            ws += mag * ((double)k * rate / (double)m);
            s += mag;
        }
        c = s > 1e-10 ? ws / s : 0;
    }
    free(re);
    free(im);
    return c;
}

/* mean pitch of the voiced frames, mapped from 75..600 Hz to 0..1 */
static double pitch01(const float *x, int64_t n, int rate)
{
    enum { FRAME = 400, HOP = 160 };
    const double fmin = 75, fmax = 600, thold = 0.3;
    int64_t pad = (FRAME - n % HOP) % HOP, len = n + pad;
    if (len < FRAME)
        return 0;
    int64_t frames = (len - FRAME) / HOP + 1;
    int lo = (int)(rate / fmax), hi = (int)(rate / fmin);
    if (lo < 1)
        lo = 1;
    if (hi > FRAME)
        hi = FRAME;
    double win[FRAME], fr[FRAME], sum = 0;
    for (int i = 0; i < FRAME; i++)   /* periodic Hann, as torch.hann_window */
        win[i] = 0.5 - 0.5 * cos(2 * M_PI * i / FRAME);
    int voiced = 0;
    for (int64_t f = 0; f < frames && lo < hi; f++) {
        for (int i = 0; i < FRAME; i++) {
            int64_t s = f * HOP + i;
            fr[i] = (s < n ? x[s] : 0.0) * win[i];
        }
        double r0 = 0;
        for (int i = 0; i < FRAME; i++)
            r0 += fr[i] * fr[i];
        int best = lo;
        double best_r = -INFINITY;
        for (int k = lo; k < hi; k++) {   /* linear autocorrelation at lag k */
            double r = 0;
            for (int i = 0; i + k < FRAME; i++)
                r += fr[i] * fr[i + k];
            if (r > best_r) {
                best_r = r;
                best = k;
            }
        }
        if (best_r / (r0 + 1e-8) > thold) {
            double p = (double)rate / best;
            sum += p < fmin ? fmin : p > fmax ? fmax : p;
            voiced++;
        }
    }
    double avg = voiced ? sum / voiced : 0, v = (avg - fmin) / (fmax - fmin);
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

static int scale100(double v) { return (int)lround((v < 0 ? 0 : v > 1 ? 1 : v) * 100); }

void outetts_features(const float *pcm, int64_t n, int rate_hz, struct outetts_features *f)
{
    memset(f, 0, sizeof *f);
    if (!pcm || n <= 0 || rate_hz <= 0)
        return;
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(pcm[i]))
            return;   /* outetts: invalid audio gets the default (zero) features */
        ss += (double)pcm[i] * pcm[i];
    }
    f->energy = scale100(sqrt(ss / (double)n));
    f->spectral_centroid = scale100(spectral_centroid(pcm, n, rate_hz) / (rate_hz / 2.0));
    f->pitch = scale100(pitch01(pcm, n, rate_hz));
}

// ---- word alignment ----------------------------------------------------------------

/* lowercase letters and digits of w (UTF-8 bytes >= 0x80 kept) */
static void word_key(const char *w, char *out, size_t cap)
{
    size_t k = 0;
    for (; *w && k + 1 < cap; w++) {
        unsigned char c = (unsigned char)*w;
        if (c >= 0x80 || isalnum(c))
            out[k++] = (char)tolower(c);
    }
    out[k] = 0;
}

int outetts_clone_align(const char *transcript, const struct outetts_clone_word *ww, int n_ww,
                        struct outetts_clone_word *out, int *n_out, int max, char *err,
                        size_t errlen)
{
    *n_out = 0;
    /* the transcript's words, as written */
    int n = 0;
    for (const char *p = transcript ? transcript : ""; *p;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        const char *q = p;
        while (*q && !isspace((unsigned char)*q))
            q++;
        if (n == max)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "voice-clone: the transcript has more "
                             "than %d words", max);
        size_t l = (size_t)(q - p);
        if (l >= OUTETTS_CLONE_MAX_WORD)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "voice-clone: a transcript word of %zu "
                             "bytes (at most %d)", l, OUTETTS_CLONE_MAX_WORD - 1);
        memcpy(out[n].word, p, l);
        out[n].word[l] = 0;
        out[n].t0_s = out[n].t1_s = NAN;
        n++;
        p = q;
    }
    if (n == 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "voice-clone: empty transcript");
    if (n_ww <= 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "voice-clone: the recognizer heard no words "
                         "to time the transcript by (silence, or not speech?)");
    /* edit distance between the two word sequences (keys compared) */
    size_t W = (size_t)n_ww + 1;
    int *d = malloc(((size_t)n + 1) * W * sizeof *d);
    char (*ka)[OUTETTS_CLONE_MAX_WORD] = malloc((size_t)n * sizeof *ka);
    char (*kb)[OUTETTS_CLONE_MAX_WORD] = malloc((size_t)n_ww * sizeof *kb);
    if (!d || !ka || !kb) {
        free(d), free(ka), free(kb);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "voice-clone: out of memory");
    }
    for (int i = 0; i < n; i++)
        word_key(out[i].word, ka[i], sizeof ka[i]);
    for (int j = 0; j < n_ww; j++)
        word_key(ww[j].word, kb[j], sizeof kb[j]);
    for (int i = 0; i <= n; i++)
        for (int j = 0; j <= n_ww; j++) {
            int *c = &d[(size_t)i * W + j];
            if (i == 0 || j == 0) {
                *c = i + j;
                continue;
            }
            int sub = d[(size_t)(i - 1) * W + j - 1] + (strcmp(ka[i - 1], kb[j - 1]) != 0);
            int del = d[(size_t)(i - 1) * W + j] + 1, ins = d[(size_t)i * W + j - 1] + 1;
            *c = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    /* walk back: matched and substituted pairs give times */
    for (int i = n, j = n_ww; i > 0 && j > 0;) {
        int here = d[(size_t)i * W + j];
        int sub = d[(size_t)(i - 1) * W + j - 1] + (strcmp(ka[i - 1], kb[j - 1]) != 0);
        if (here == sub) {
            out[i - 1].t0_s = ww[j - 1].t0_s;
            out[i - 1].t1_s = ww[j - 1].t1_s;
            i--, j--;
        } else if (here == d[(size_t)(i - 1) * W + j] + 1) {
            i--;   /* a transcript word the recognizer did not hear: timed below */
        } else {
            j--;   /* a recognized word not in the transcript: its time goes to neighbours */
        }
    }
    free(d), free(ka), free(kb);
    /* untimed runs share the gap between their timed neighbours by length */
    double end_all = ww[n_ww - 1].t1_s;
    for (int i = 0; i < n;) {
        if (!isnan(out[i].t0_s)) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && isnan(out[j].t0_s))
            j++;
        double a = i > 0 ? out[i - 1].t1_s : 0, b = j < n ? out[j].t0_s : end_all;
        if (b < a)
            b = a;
        size_t total = 0;
        for (int k = i; k < j; k++)
            total += strlen(out[k].word);
        double t = a;
        for (int k = i; k < j; k++) {
            out[k].t0_s = t;
            t += (b - a) * (double)strlen(out[k].word) / (double)(total ? total : 1);
            out[k].t1_s = t;
        }
        i = j;
    }
    /* non-decreasing, non-overlapping */
    for (int i = 0; i < n; i++) {
        if (i > 0 && out[i].t0_s < out[i - 1].t1_s)
            out[i].t0_s = out[i - 1].t1_s;
        if (out[i].t1_s < out[i].t0_s)
            out[i].t1_s = out[i].t0_s;
    }
    *n_out = n;
    return 0;
}

// ---- the speaker JSON ----------------------------------------------------------------

static cJSON *features_json(const struct outetts_features *f)
{
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddNumberToObject(o, "energy", f->energy);
        cJSON_AddNumberToObject(o, "spectral_centroid", f->spectral_centroid);
        cJSON_AddNumberToObject(o, "pitch", f->pitch);
    }
    return o;
}

static cJSON *codes_json(const int32_t *c, int64_t a, int64_t b)
{
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = a; arr && i < b; i++) {
        cJSON *v = cJSON_CreateNumber(c[i]);
        if (!v || !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

char *outetts_clone_speaker_json(const struct outetts_clone_input *in, char *err, size_t errlen)
{
    if (!in->text || !in->words || in->n_words <= 0 || !in->c1 || !in->c2 || in->n_frames <= 0 ||
        in->frames_per_s <= 0 || !in->pcm || in->n_samples <= 0 || in->sample_rate <= 0) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "voice-clone: nothing to make a speaker of");
        return NULL;
    }
    const int ext = 20;   /* outetts' max_extension: frames added before the first, after the last word */
    const double fps = in->frames_per_s;
    char *norm = outetts_normalize(in->text, strlen(in->text));
    cJSON *root = cJSON_CreateObject(), *words = cJSON_CreateArray();
    bool ok = norm && root && words;
    if (ok) {
        cJSON_AddStringToObject(root, "text", norm);
        cJSON_AddItemToObject(root, "words", words);
    } else
        cJSON_Delete(words);
    int64_t start = -1;
    for (int i = 0; ok && i < in->n_words; i++) {
        const struct outetts_clone_word *w = &in->words[i];
        if (start < 0) {
            start = (int64_t)(w->t0_s * fps) - ext;
            start = start < 0 ? 0 : start;
        }
        int64_t end = (int64_t)(w->t1_s * fps);
        if (i == in->n_words - 1)
            end = end + ext < in->n_frames ? end + ext : in->n_frames;
        if (end > in->n_frames)
            end = in->n_frames;
        if (end < start)
            end = start;
        int64_t a = (int64_t)(w->t0_s * in->sample_rate), b = (int64_t)(w->t1_s * in->sample_rate);
        struct outetts_features f = { 0 };
        if (a >= 0 && a < b && b <= in->n_samples)
            outetts_features(in->pcm + a, b - a, in->sample_rate, &f);
        cJSON *o = cJSON_CreateObject();
        cJSON *c1 = codes_json(in->c1, start, end), *c2 = codes_json(in->c2, start, end);
        cJSON *fj = features_json(&f);
        if (!o || !c1 || !c2 || !fj) {
            cJSON_Delete(o), cJSON_Delete(c1), cJSON_Delete(c2), cJSON_Delete(fj);
            ok = false;
            break;
        }
        cJSON_AddStringToObject(o, "word", w->word);
        cJSON_AddNumberToObject(o, "duration", round((double)(end - start) / fps * 100) / 100);
        cJSON_AddItemToObject(o, "c1", c1);
        cJSON_AddItemToObject(o, "c2", c2);
        cJSON_AddItemToObject(o, "features", fj);
        cJSON_AddItemToArray(words, o);
        start = end;
    }
    struct outetts_features g;
    outetts_features(in->pcm, in->n_samples, in->sample_rate, &g);
    cJSON *gj = ok ? features_json(&g) : NULL;
    ok = ok && gj && cJSON_AddItemToObject(root, "global_features", gj);
    char *text = ok ? cJSON_Print(root) : NULL;
    if (!text)
        omni_fail(err, errlen, norm ? OMNI_ERR_NOMEM : OMNI_ERR_ARG, "voice-clone: %s",
                  norm ? "out of memory" : "the transcript is not valid UTF-8");
    cJSON_Delete(root);
    free(norm);
    return text;
}
