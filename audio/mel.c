/* mel.c - Whisper log-mel spectrogram: windowed frames -> av_tx real FFT ->
 * power -> mel filters -> log10, clamped to (max - 8) and scaled (x + 4) / 4.
 * Frames are independent, so each pool thread takes a contiguous range with
 * its own av_tx context (contexts hold scratch and are not shared). */
#include "audio/mel.h"

#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <libavutil/tx.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

struct mel_job {
    const float *filters;   /* [n_mels][MEL_N_FREQ] */
    const float *pcm;
    int64_t n_samples;      /* real samples in pcm */
    int64_t n_total;        /* n_samples + zero padding */
    int n_mels, n_frames;
    float window[MEL_N_FFT];
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

static void mel_worker(void *arg, int ith, int nth)
{
    struct mel_job *j = arg;
    const int t0 = (int)((int64_t)j->n_frames * ith / nth);
    const int t1 = (int)((int64_t)j->n_frames * (ith + 1) / nth);
    float vmax = -INFINITY;
    AVTXContext *tx = NULL;
    av_tx_fn fft;
    const float scale = 1.0f;
    if (t0 < t1 && av_tx_init(&tx, &fft, AV_TX_FLOAT_RDFT, 0, MEL_N_FFT, &scale, AV_TX_UNALIGNED) < 0) {
        atomic_store(&j->failed, 1);
        return;
    }
    float frame[MEL_N_FFT];
    AVComplexFloat spec[MEL_N_FREQ];
    float power[MEL_N_FREQ];
    for (int t = t0; t < t1; t++) {
        /* frame t is centred on sample t * hop */
        const int64_t start = (int64_t)t * MEL_HOP - MEL_N_FFT / 2;
        if (start >= 0 && start + MEL_N_FFT <= j->n_samples) {
            for (int i = 0; i < MEL_N_FFT; i++)
                frame[i] = j->window[i] * j->pcm[start + i];
        } else {
            for (int i = 0; i < MEL_N_FFT; i++)
                frame[i] = j->window[i] * padded_sample(j, start + i);
        }
        fft(tx, spec, frame, sizeof(float));
        for (int k = 0; k < MEL_N_FREQ; k++)
            power[k] = spec[k].re * spec[k].re + spec[k].im * spec[k].im;
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
    av_tx_uninit(&tx);
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
    atomic_init(&j->failed, 0);
    for (int i = 0; i < nth; i++)
        j->thread_max[i] = -INFINITY;
    run(tp, mel_worker, j);
    if (atomic_load(&j->failed)) {
        free(j->out);
        free(j->thread_max);
        free(j);
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "mel: av_tx has no %d-point real FFT", MEL_N_FFT);
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
