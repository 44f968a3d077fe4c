/* test_video_size.c - the size Qwen-VL video frames are resized to
 * (vision_video_frame_size): Qwen2.5-VL's per-frame bounds and total budget
 * as qwen-vl-utils' fetch_video, Qwen3-VL's bounds over frames x area as
 * Qwen3VLVideoProcessor; the expected sizes are what those Python
 * functions give for the same inputs (pure arithmetic, no fixture). The
 * golden files' video keys (video_preprocessor_config.json) are read. */
#include "tests/test.h"

#include "src/core/omni.h"
#include "vision/vision.h"

/* The bounds mmproj_pixel_limits gives a file without video keys. */
static struct vision_info qwen25(void)
{
    const int64_t unit = 28 * 28;
    return (struct vision_info){ .family = VISION_QWEN2VL, .patch_size = 14, .merge_size = 2,
                                 .video_min_pixels = 128 * unit, .video_max_pixels = 768 * unit,
                                 .video_total_pixels = 115200 * unit };
}

static struct vision_info qwen3(void)
{
    const int64_t unit = 32 * 32;
    return (struct vision_info){ .family = VISION_QWEN2VL, .patch_size = 16, .merge_size = 2,
                                 .video_min_pixels = 4 * unit, .video_max_pixels = 24576 * unit,
                                 .video_clip_budget = true };
}

struct size_case {
    int w, h, frames, rw, rh;
};

static void check_cases(const struct vision_info *in, const struct size_case *c, int n)
{
    char err[256];
    for (int i = 0; i < n; i++) {
        int rw = 0, rh = 0;
        const int rc = vision_video_frame_size(in, c[i].w, c[i].h, c[i].frames, &rw, &rh, err, sizeof err);
        CHECK_MSG(rc == 0 && rw == c[i].rw && rh == c[i].rh, "%dx%d, %d frames: rc %d, %dx%d, expected %dx%d (%s)",
                  c[i].w, c[i].h, c[i].frames, rc, rw, rh, c[i].rw, c[i].rh, rc ? err : "");
    }
}

TEST(video_size_qwen25_per_frame_and_total)
{
    struct vision_info in = qwen25();
    const struct size_case c[] = {
        { 1920, 1080, 8, 1008, 560 },    /* 768 units per frame */
        { 1920, 1080, 768, 644, 336 },   /* the total's share: 90316800 / 768 * 2 */
        { 1920, 1080, 2000, 420, 224 },  /* the share floored at 1.05 x min, then floor() */
        { 160, 96, 5, 420, 252 },        /* under 128 units: scaled up */
        { 160, 96, 4, 420, 252 },
    };
    check_cases(&in, c, (int)(sizeof c / sizeof *c));
    /* the golden fixture's bounds (its video_preprocessor_config.json): the image size */
    in.video_min_pixels = 56 * 56, in.video_max_pixels = 28 * 28 * 64;
    const struct size_case g[] = { { 160, 96, 5, 168, 84 } };
    check_cases(&in, g, 1);
    /* no total budget: 768 units whatever the length */
    in = qwen25(), in.video_total_pixels = 0;
    const struct size_case t[] = { { 1920, 1080, 2000, 1008, 560 } };
    check_cases(&in, t, 1);
}

TEST(video_size_qwen3_clip_budget)
{
    struct vision_info in = qwen3();
    const struct size_case c[] = {
        { 1920, 1080, 8, 1920, 1088 },   /* 8 x 1088 x 1920 within 25165824 */
        { 1920, 1080, 64, 832, 448 },    /* scaled by sqrt(64 x area / max) */
        { 640, 480, 1, 640, 480 },       /* one frame sized as the pair it is padded to */
        { 20, 600, 4, 32, 960 },         /* a side under 32 scaled up first */
        { 3840, 2160, 2, 2720, 1536 },   /* the reference's 3840x2176 is 8160 rows: capped at 4096 */
    };
    check_cases(&in, c, (int)(sizeof c / sizeof *c));
    /* the fixture's bounds: 5 frames weigh as 4 (round(2.5) = 2 patches), 7 as 8 */
    in.video_min_pixels = 64 * 64, in.video_max_pixels = 32 * 32 * 64;
    const struct size_case g[] = { { 160, 96, 5, 160, 96 }, { 160, 96, 7, 96, 64 } };
    check_cases(&in, g, 2);
}

TEST(video_size_rejects_bad_input)
{
    char err[256];
    int rw, rh;
    struct vision_info in = qwen25();
    CHECK(vision_video_frame_size(&in, 160, 96, 0, &rw, &rh, err, sizeof err) < 0);
    CHECK(vision_video_frame_size(&in, 0, 96, 4, &rw, &rh, err, sizeof err) < 0);
    CHECK(vision_video_frame_size(&in, 10000, 10, 4, &rw, &rh, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "aspect ratio");
    in.video_max_pixels = 10; /* under one merge unit */
    CHECK(vision_video_frame_size(&in, 160, 96, 4, &rw, &rh, err, sizeof err) < 0);
    in = qwen3();
    in.patch_size = 0;
    CHECK(vision_video_frame_size(&in, 160, 96, 4, &rw, &rh, err, sizeof err) < 0);
}

/* The golden mmproj files carry their video bounds (converted from the
 * fixtures' video_preprocessor_config.json); vision_model_set_video_limits
 * changes them and the cache keys' preprocessing hash; frames of the
 * golden clip keep the image size. */
TEST(video_size_golden_files_and_override)
{
    char err[256];
    struct vision_model *m = vision_model_load(test_golden("vision-qwen2_5_vl-mmproj-f32.gguf"), err, sizeof err);
    if (!m)
        SKIP("no golden qwen2_5_vl fixture (make golden-fixtures)");
    const struct vision_info *in = vision_model_info(m);
    CHECK(!in->video_clip_budget && in->video_min_pixels == 56 * 56 && in->video_max_pixels == 28 * 28 * 64 &&
          in->video_total_pixels == 115200 * 28 * 28);
    CHECK_EQ(vision_frame_tokens(m, 160, 96, 5, err, sizeof err), 18);
    CHECK_EQ(vision_image_tokens(m, 160, 96, false, err, sizeof err), 18);
    const uint64_t h0 = in->preprocess_hash;
    /* min over the file's max: refused, nothing changed */
    CHECK_EQ(vision_model_set_video_limits(m, 128 * 28 * 28, 0, 0), OMNI_ERR_ARG);
    CHECK(in->video_min_pixels == 56 * 56 && in->preprocess_hash == h0);
    /* qwen-vl-utils' defaults: the frames are scaled up to 128 units */
    CHECK_EQ(vision_model_set_video_limits(m, 128 * 28 * 28, 768 * 28 * 28, 0), 0);
    CHECK(in->video_min_pixels == 128 * 28 * 28 && in->video_max_pixels == 768 * 28 * 28 && in->preprocess_hash != h0);
    CHECK_EQ(vision_frame_tokens(m, 160, 96, 5, err, sizeof err), 9 * 15);
    CHECK_EQ(vision_model_set_video_limits(m, 0, 0, -1), 0);
    CHECK(in->video_total_pixels == 0);
    vision_model_free(m);
    m = vision_model_load(test_golden("vision-qwen3vl-mmproj-f32.gguf"), err, sizeof err);
    if (!m)
        SKIP("no golden qwen3vl fixture (make golden-fixtures)");
    in = vision_model_info(m);
    CHECK(in->video_clip_budget && in->video_min_pixels == 64 * 64 && in->video_max_pixels == 32 * 32 * 64);
    CHECK_EQ(vision_frame_tokens(m, 160, 96, 5, err, sizeof err), 15);
    vision_model_free(m);
}
