/* fuzz_mmproj.c - the llama.cpp mmproj GGUF loader of vision/clip.c
 * (vision_model_load: clip.* keys, patch / position / class embeddings,
 * every ViT block, the MLP or Idefics3 projector). A small model that
 * loads also gets an encoder scratch, encodes a tiny image and lays out
 * its prompt, so shapes the loader accepts are shapes the encoder can run.
 *
 * Input: a whole mmproj .gguf file (handed over as an in-memory file). */
#include "tests/fuzz/fz_util.h"

#include "media/image.h"
#include "vision/vision.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct vision_model *m = vision_model_load(fz_path_open(data, size), err, sizeof err);
    fz_path_close();
    if (!m)
        return 0;
    const struct vision_info *in = vision_model_info(m);
    /* the encoder's cost grows with these: run it only on small models */
    const int side = in->image_size / in->patch_size;
    if (in->image_size <= 64 && in->n_embd <= 64 && in->n_layer <= 4 && side <= 16 &&
        in->n_embd_lm <= 256) {
        struct vision_ctx *ctx = vision_ctx_new(m, NULL, err, sizeof err);
        struct media_image img = { 0 };
        if (ctx && media_image_alloc(&img, 7, 5, err, sizeof err) == 0) {
            for (int i = 0; i < 7 * 5 * 3; i++)
                img.rgb[i] = (uint8_t)(i * 37);
            struct vision_embd e = { 0 };
            if (vision_encode_image(ctx, &img, true, &e, err, sizeof err) == 0) {
                struct vision_layout lay = { 0 };
                if (vision_layout_build(m, &e, &lay, err, sizeof err) == 0)
                    vision_layout_release(&lay);
                vision_embd_release(&e);
            }
        }
        media_image_release(&img);
        vision_ctx_free(ctx);
    }
    vision_model_free(m);
    return 0;
}
