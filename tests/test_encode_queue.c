/* test_encode_queue.c - the image-encode queue (vision/encode_queue.h) on
 * the tiny Qwen2.5-VL golden mmproj: concurrent requests get what a
 * direct encode gives; a request cancelled before or in the middle of its
 * pass returns a clean failure with nothing left allocated (ASan in make
 * asan) and the next request works; shutdown fails later requests. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "media/image.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "test.h"
#include "vision/encode_queue.h"
#include "vision/vision.h"

#define QGGUF "vision-qwen2_5_vl-mmproj-f32.gguf"

struct eq_fixture {
    struct vision_model *m;
    struct tpool *tp;
    struct vision_ctx *vc;
    struct media_image img[2];
    float *pix[2];
    struct vision_input in[4];   /* image, image2, image, image2 */
    struct vision_embd ref[2];   /* each encoded directly */
};

static int eq_setup(struct eq_fixture *f)
{
    char err[256];
    const char *png[2] = { "vision/image.png", "vision/qwen2_5_vl/image2.png" };
    memset(f, 0, sizeof *f);
    if (!(f->m = vision_model_load(test_golden(QGGUF), err, sizeof err)) ||
        !(f->tp = tpool_new(2, err, sizeof err)) || !(f->vc = vision_ctx_new(f->m, f->tp, err, sizeof err))) {
        fprintf(stderr, "    %s\n", err);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        struct vision_input *in = &f->in[i];
        if (media_image_decode_file(test_fixture(png[i]), NULL, &f->img[i], err, sizeof err) < 0 ||
            vision_preprocess(f->m, &f->img[i], true, &f->pix[i], &in->n_images, &in->tile_rows,
                              &in->tile_cols, err, sizeof err) < 0 ||
            vision_encode_image(f->vc, &f->img[i], true, &f->ref[i], err, sizeof err) < 0) {
            fprintf(stderr, "    %s\n", err);
            return -1;
        }
        in->pixels = f->pix[i];
        f->in[i + 2] = *in;
    }
    return 0;
}

static void eq_teardown(struct eq_fixture *f)
{
    for (int i = 0; i < 2; i++) {
        vision_embd_release(&f->ref[i]);
        free(f->pix[i]);
        media_image_release(&f->img[i]);
    }
    vision_ctx_free(f->vc);
    tpool_free(f->tp);
    vision_model_free(f->m);
}

struct eq_client {
    struct vision_queue *q;
    const struct vision_input *in;
    int n;
    int (*cancelled)(void *user);
    void *user;
    struct vision_embd outs[4];
    int rc;
    char err[256];
};

static void *eq_client_main(void *arg)
{
    struct eq_client *c = arg;
    c->rc = vision_queue_encode(c->q, c->in, c->n, c->cancelled, c->user, c->outs, c->err, sizeof c->err);
    return NULL;
}

static double eq_diff(const struct vision_embd *a, const struct vision_embd *b)
{
    if (a->n_tokens != b->n_tokens || a->n_embd != b->n_embd || !a->data)
        return 1e30;
    return test_max_diff(a->data, b->data, (size_t)a->n_tokens * a->n_embd);
}

TEST(encode_queue_concurrent_requests_match_direct)
{
    struct eq_fixture f;
    CHECK(eq_setup(&f) == 0);
    char err[256];
    struct vision_queue_params p = vision_queue_default_params();
    p.max_batch = 3; /* four images of three requests: passes split and shared */
    struct vision_queue *q = vision_queue_new(f.vc, &p, err, sizeof err);
    CHECK(q);
    struct eq_client c[3] = {
        { .q = q, .in = f.in, .n = 4 }, { .q = q, .in = f.in + 1, .n = 1 }, { .q = q, .in = f.in, .n = 2 },
    };
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        CHECK(pthread_create(&th[i], NULL, eq_client_main, &c[i]) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(c[i].rc == 0, "request %d: %s", i, c[i].err);
        for (int k = 0; k < c[i].n; k++) {
            const int which = (int)((c[i].in - f.in) + k) % 2;
            double d = eq_diff(&c[i].outs[k], &f.ref[which]);
            CHECK_MSG(d < 1e-4, "request %d image %d differs from a direct encode by %g", i, k, d);
            vision_embd_release(&c[i].outs[k]);
        }
    }
    struct vision_queue_stats st = vision_queue_stats(q);
    printf("    %llu passes for %llu images (%llu shared by requests)\n", (unsigned long long)st.passes,
           (unsigned long long)st.images, (unsigned long long)st.shared_passes);
    CHECK(st.images == 7 && st.passes >= 3 && st.waiting == 0);
    /* no images: nothing to do */
    CHECK_EQ(vision_queue_encode(q, f.in, 0, NULL, NULL, c[0].outs, err, sizeof err), 0);
    vision_queue_free(q);
    eq_teardown(&f);
}

/* Cancelled once the encoder has polled `after` times (the caller's own
 * polls only look): before the pass (after = 0: the caller or the first
 * poll sees it) or between blocks of it. */
struct eq_cancel {
    pthread_t caller;
    atomic_int encoder_polls;
    int after;
};
static int eq_cancel_fn(void *user)
{
    struct eq_cancel *c = user;
    if (!pthread_equal(pthread_self(), c->caller))
        return atomic_fetch_add(&c->encoder_polls, 1) + 1 > c->after;
    return atomic_load(&c->encoder_polls) > c->after;
}

static void *eq_cancel_client(void *arg)
{
    struct eq_client *c = arg;
    ((struct eq_cancel *)c->user)->caller = pthread_self();
    return eq_client_main(arg);
}

TEST(encode_queue_cancel_frees_and_next_works)
{
    struct eq_fixture f;
    CHECK(eq_setup(&f) == 0);
    char err[256];
    struct vision_queue *q = vision_queue_new(f.vc, NULL, err, sizeof err);
    CHECK(q);
    for (int after = 0; after <= 4; after += 2) {
        struct eq_cancel cc = { .after = after };
        struct eq_client c = { .q = q, .in = f.in, .n = 4, .cancelled = eq_cancel_fn, .user = &cc };
        pthread_t th;
        CHECK(pthread_create(&th, NULL, eq_cancel_client, &c) == 0);
        pthread_join(th, NULL);
        CHECK_MSG(c.rc == OMNI_ERR_LIMIT, "cancelled after %d polls: rc %d (%s)", after, c.rc, c.err);
        CHECK_STR_CONTAINS(c.err, "cancelled");
        for (int k = 0; k < 4; k++)
            CHECK(!c.outs[k].data && c.outs[k].n_tokens == 0);
    }
    struct vision_queue_stats st = vision_queue_stats(q);
    CHECK(st.cancelled == 3 && st.waiting == 0);
    // the next request is served
    struct vision_embd out[2];
    CHECK_EQ(vision_queue_encode(q, f.in, 2, NULL, NULL, out, err, sizeof err), 0);
    for (int k = 0; k < 2; k++) {
        CHECK(eq_diff(&out[k], &f.ref[k]) < 1e-4);
        vision_embd_release(&out[k]);
    }
    // a bad input fails its request alone
    struct vision_input bad = f.in[0];
    bad.tile_rows = 3;
    CHECK(vision_queue_encode(q, &bad, 1, NULL, NULL, out, err, sizeof err) < 0);
    CHECK(!out[0].data);
    // after shutdown, requests fail at once
    vision_queue_shutdown(q);
    CHECK_EQ(vision_queue_encode(q, f.in, 1, NULL, NULL, out, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "shutting down");
    vision_queue_free(q);
    eq_teardown(&f);
}
