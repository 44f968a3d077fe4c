/* mel.c - Whisper log-mel spectrogram: windowed frames -> 400-point DFT ->
 * power -> mel filters -> log10, clamped to (max - 8) and scaled (x + 4) / 4.
 * av_tx (FFmpeg 5.1) computes 400-point transforms as a naive O(n^2) DFT
 * (0.7 ms a frame), so the DFT is Bluestein's chirp-z transform over 1024-point
 * av_tx FFTs: X[k] = w[k] * IFFT(FFT(x w) FFT(conj w))[k], w[n] = e^(-i pi n^2 / N).
 * Frames are independent; each pool thread takes a range with its own av_tx
 * contexts (they hold scratch and are not shared). */
#include "audio/mel.h"

#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <libavutil/mem.h>
#include <libavutil/tx.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DFT_M 1024  /* power of two >= 2 * MEL_N_FFT - 1 */

struct mel_job {
    const float *filters;   /* [n_mels][MEL_N_FREQ] */
    const float *pcm;
    int64_t n_samples;      /* real samples in pcm */
    int64_t n_total;        /* n_samples + zero padding */
    int n_mels, n_frames;
    float window[MEL_N_FFT];
    AVComplexFloat chirp[MEL_N_FFT];  /* w[n] = e^(-i pi n^2 / N) */
    AVComplexFloat chirp_fft[DFT_M];  /* FFT of conj(w) laid out circularly, / DFT_M */
    float *out;             /* [n_mels][n_frames] */
    float *thread_max;      /* [nth] */
    atomic_int failed;
};

/* Sample j of the padded signal, with numpy's "reflect" beyond both ends. */
static float padded_sample(const struct mel_job *j, int64_t i)
{
    const int64_t n = j->n_total;
    if (n == 1)
        return j->pcm[0];
    while (i < 0 || i >= n)
        i = i < 0 ? -i : 2 * (n - 1) - i;
    return i < j->n_samples ? j->pcm[i] : 0.0f;
}

static inline AVComplexFloat cmul(AVComplexFloat a, AVComplexFloat b)
{
    return (AVComplexFloat){ a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re };
}

static void mel_worker(void *arg, int ith, int nth)
{
    struct mel_job *j = arg;
    const int t0 = (int)((int64_t)j->n_frames * ith / nth);
    int t1 = (int)((int64_t)j->n_frames * (ith + 1) / nth);
    float vmax = -INFINITY;
    AVTXContext *fwd = NULL, *inv = NULL;
    av_tx_fn fft, ifft;
    const float scale = 1.0f;
    if (t0 < t1 && (av_tx_init(&fwd, &fft, AV_TX_FLOAT_FFT, 0, DFT_M, &scale, 0) < 0 ||
                    av_tx_init(&inv, &ifft, AV_TX_FLOAT_FFT, 1, DFT_M, &scale, 0) < 0)) {
        atomic_store(&j->failed, 1);
        av_tx_uninit(&fwd);
        return;
    }
    AVComplexFloat *a = av_malloc(2 * DFT_M * sizeof *a), *b = a ? a + DFT_M : NULL;
    float power[MEL_N_FREQ];
    if (t0 < t1 && !a) {
        atomic_store(&j->failed, 1);
        t1 = t0;
    }
    for (int t = t0; t < t1; t++) {
        /* frame t is centred on sample t * hop; a = windowed frame * chirp */
        const int64_t start = (int64_t)t * MEL_HOP - MEL_N_FFT / 2;
        if (start >= j->n_samples && start + MEL_N_FFT <= j->n_total) { /* all padding: silence */
            for (int m = 0; m < j->n_mels; m++)
                j->out[(size_t)m * j->n_frames + t] = -10.0f;
            vmax = vmax > -10.0f ? vmax : -10.0f;
            continue;
        }
        const bool inside = start >= 0 && start + MEL_N_FFT <= j->n_samples;
        for (int i = 0; i < MEL_N_FFT; i++) {
            const float x = j->window[i] * (inside ? j->pcm[start + i] : padded_sample(j, start + i));
            a[i] = (AVComplexFloat){ x * j->chirp[i].re, x * j->chirp[i].im };
        }
        memset(a + MEL_N_FFT, 0, (DFT_M - MEL_N_FFT) * sizeof *a);
        fft(fwd, b, a, sizeof *a);
        for (int i = 0; i < DFT_M; i++)
            b[i] = cmul(b[i], j->chirp_fft[i]);
        ifft(inv, a, b, sizeof *a);
        for (int k = 0; k < MEL_N_FREQ; k++) {
            const AVComplexFloat X = cmul(a[k], j->chirp[k]);
            power[k] = X.re * X.re + X.im * X.im;
        }
        for (int m = 0; m < j->n_mels; m++) {
            const float *f = j->filters + (size_t)m * MEL_N_FREQ;
            float s = 0.0f;
            for (int k = 0; k < MEL_N_FREQ; k++)
                s += f[k] * power[k];
            const float v = log10f(s > 1e-10f ? s : 1e-10f);
            j->out[(size_t)m * j->n_frames + t] = v;
            vmax = v > vmax ? v : vmax;
        }
    }
    j->thread_max[ith] = vmax;
    av_free(a);
    av_tx_uninit(&fwd);
    av_tx_uninit(&inv);
}

/* The chirp and the transform of its conjugate, shared by every frame. */
static int chirp_init(struct mel_job *j)
{
    AVTXContext *tx = NULL;
    av_tx_fn fft;
    const float scale = 1.0f;
    AVComplexFloat *b = av_mallocz(DFT_M * sizeof *b);
    if (!b || av_tx_init(&tx, &fft, AV_TX_FLOAT_FFT, 0, DFT_M, &scale, AV_TX_UNALIGNED) < 0) {
        av_free(b);
        return -1;
    }
    for (int n = 0; n < MEL_N_FFT; n++) {
        /* n^2 mod 2N keeps the angle exact for large n */
        const double ang = M_PI * (double)(((int64_t)n * n) % (2 * MEL_N_FFT)) / MEL_N_FFT;
        j->chirp[n] = (AVComplexFloat){ (float)cos(ang), (float)-sin(ang) };
        b[n] = (AVComplexFloat){ (float)cos(ang), (float)sin(ang) };
        if (n > 0)
            b[DFT_M - n] = b[n];
    }
    fft(tx, j->chirp_fft, b, sizeof *b);
    for (int i = 0; i < DFT_M; i++) /* the inverse FFT is unnormalised */
        j->chirp_fft[i] = (AVComplexFloat){ j->chirp_fft[i].re / DFT_M, j->chirp_fft[i].im / DFT_M };
    av_tx_uninit(&tx);
    av_free(b);
    return 0;
}

struct norm_job {
    float *data;
    size_t n;
    float floor;
};

static void norm_worker(void *arg, int ith, int nth)
{
    const struct norm_job *j = arg;
    for (size_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        const float v = j->data[i] > j->floor ? j->data[i] : j->floor;
        j->data[i] = (v + 4.0f) / 4.0f;
    }
}

static void run(struct tpool *tp, tpool_fn fn, void *arg)
{
    if (tp)
        tpool_run(tp, fn, arg);
    else
        fn(arg, 0, 1);
}

int mel_compute(struct tpool *tp, const float *filters, int n_mels, const float *pcm,
                int64_t n_samples, int64_t pad_samples, struct mel_spec *out, char *err,
                size_t errlen)
{
    out->n_mels = out->n_frames = 0;
    out->data = NULL;
    if (!filters || n_mels < 1 || n_samples < 0 || pad_samples < 0 || (n_samples > 0 && !pcm) ||
        n_samples + pad_samples < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "mel: bad arguments (n_mels %d, %lld samples)",
                         n_mels, (long long)n_samples);
    const int64_t n_total = n_samples + pad_samples;
    const int64_t n_frames = n_total / MEL_HOP; /* 1 + n/hop frames, the last one dropped */
    if (n_frames > INT32_MAX / 2)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "mel: %lld samples is too long", (long long)n_total);
    if (n_frames < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "mel: fewer than %d samples", MEL_HOP);

    const int nth = tp ? tpool_size(tp) : 1;
    struct mel_job *j = calloc(1, sizeof *j);
    size_t n_out;
    if (!j || omni_mul_size((size_t)n_mels, (size_t)n_frames, &n_out) ||
        !(j->out = malloc(n_out * sizeof(float))) || !(j->thread_max = malloc(nth * sizeof(float)))) {
        if (j) {
            free(j->out);
            free(j);
        }
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "mel: out of memory for %d x %lld frames",
                         n_mels, (long long)n_frames);
    }
    j->filters = filters;
    j->pcm = pcm;
    j->n_samples = n_samples;
    j->n_total = n_total;
    j->n_mels = n_mels;
    j->n_frames = (int)n_frames;
    for (int i = 0; i < MEL_N_FFT; i++) /* periodic Hann */
        j->window[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / MEL_N_FFT));
    atomic_init(&j->failed, chirp_init(j) < 0);
    for (int i = 0; i < nth; i++)
        j->thread_max[i] = -INFINITY;
    if (!atomic_load(&j->failed))
        run(tp, mel_worker, j);
    if (atomic_load(&j->failed)) {
        free(j->out);
        free(j->thread_max);
        free(j);
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "mel: av_tx failed for a %d-point FFT", DFT_M);
    }
    float vmax = -INFINITY;
    for (int i = 0; i < nth; i++)
        vmax = j->thread_max[i] > vmax ? j->thread_max[i] : vmax;
    struct norm_job nj = { j->out, n_out, vmax - 8.0f };
    run(tp, norm_worker, &nj);

    out->n_mels = n_mels;
    out->n_frames = (int)n_frames;
    out->data = j->out;
    free(j->thread_max);
    free(j);
    return OMNI_OK;
}

void mel_spec_free(struct mel_spec *m)
{
    if (!m)
        return;
    free(m->data);
    m->data = NULL;
    m->n_mels = m->n_frames = 0;
}
