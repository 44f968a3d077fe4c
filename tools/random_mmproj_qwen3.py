"""random_mmproj_qwen3.py - the Qwen3-VL mmproj shapes of tools/random_model:
random weights in the layout tools/hf_mmproj_to_gguf.py (and llama.cpp's
converter) writes for clip.projector_type "qwen3vl_merger".

    tools/random_model --shape qwen3-vl-4b-mmproj -o mmproj.gguf [--type f16|f32] [--layers N]

SHAPES holds the published vision_config / preprocessor_config.json values;
build() takes random_model's parsed arguments and its make_data (seeded per
tensor, so files are reproducible). --layers keeps the first N blocks and the
DeepStack mergers of the blocks kept.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
from gguf import GGML_F16, GGML_F32, GGUF_ARRAY, GGUF_BOOL, GGUF_FLOAT32, GGUF_UINT32  # noqa: E402

SHAPES = {
    # Qwen/Qwen3-VL-4B-Instruct: vision_config depth 24, hidden 1024,
    # intermediate 4096, 16 heads, patch 16, 2304 (48 x 48) learned
    # positions, out_hidden_size 2560, deepstack_visual_indexes [5, 11, 17];
    # processor shortest_edge 65536 / longest_edge 16777216 px, mean/std 0.5
    "qwen3-vl-4b-mmproj": dict(
        hf="Qwen/Qwen3-VL-4B-Instruct", family="qwen3vl", n_embd=1024, n_layer=24, n_head=16,
        n_ff=4096, patch_size=16, n_pos=2304, image_size=768, eps=1e-6, lm_dim=2560, deepstack=[5, 11, 17],
        min_pixels=65536, max_pixels=16777216, mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
}


def tensor_list(v, n_layer):
    """(name, numpy-style shape, kind) in the converter's order."""
    D, F, P, L = v["n_embd"], v["n_ff"], v["patch_size"], v["lm_dim"]
    t = [("v.patch_embd.weight", (D, 3, P, P), "weight"), ("v.patch_embd.weight.1", (D, 3, P, P), "weight"),
         ("v.patch_embd.bias", (D,), "bias"), ("v.position_embd.weight", (v["n_pos"], D), "embd")]
    for i in range(n_layer):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", (D,), "norm"), (b + "ln1.bias", (D,), "bias"),
              (b + "attn_qkv.weight", (3 * D, D), "weight"), (b + "attn_qkv.bias", (3 * D,), "bias"),
              (b + "attn_out.weight", (D, D), "weight"), (b + "attn_out.bias", (D,), "bias"),
              (b + "ln2.weight", (D,), "norm"), (b + "ln2.bias", (D,), "bias"),
              (b + "ffn_up.weight", (F, D), "weight"), (b + "ffn_up.bias", (F,), "bias"),
              (b + "ffn_down.weight", (D, F), "weight"), (b + "ffn_down.bias", (D,), "bias")]
    for i in v["deepstack"]:
        if i < n_layer:
            b = f"v.deepstack.{i}."
            t += [(b + "norm.weight", (4 * D,), "norm"), (b + "norm.bias", (4 * D,), "bias"),
                  (b + "fc1.weight", (4 * D, 4 * D), "weight"), (b + "fc1.bias", (4 * D,), "bias"),
                  (b + "fc2.weight", (L, 4 * D), "weight"), (b + "fc2.bias", (L,), "bias")]
    t += [("v.post_ln.weight", (D,), "norm"), ("v.post_ln.bias", (D,), "bias"),
          ("mm.0.weight", (4 * D, 4 * D), "weight"), ("mm.0.bias", (4 * D,), "bias"),
          ("mm.2.weight", (L, 4 * D), "weight"), ("mm.2.bias", (L,), "bias")]
    return t


def build(args, make_data):
    v = SHAPES[args.shape]
    n_layer = args.layers or v["n_layer"]
    mat = GGML_F32 if args.type == "f32" else GGML_F16
    w = gguf.GGUFWriter(args.output + ".part")
    note = f", {n_layer} of {v['n_layer']} layers" if n_layer != v["n_layer"] else ""
    w.add("general.architecture", "clip")
    w.add("general.type", "mmproj")
    w.add("general.name", f"{args.shape} (random weights{note})")
    w.add("general.description",
          f"random weights (seed {args.seed}) with the shapes and metadata of the vision encoder of "
          f"{v['hf']}; written by omniserve tools/random_model")
    w.add("general.file_type", 0 if args.type == "f32" else 1, GGUF_UINT32)
    w.add("clip.has_vision_encoder", True)
    w.add("clip.projector_type", "qwen3vl_merger")
    w.add("clip.use_gelu", True)
    side = int(round(v["n_pos"] ** 0.5))
    w.add("clip.vision.image_size", side * v["patch_size"], GGUF_UINT32)
    w.add("clip.vision.patch_size", v["patch_size"], GGUF_UINT32)
    w.add("clip.vision.embedding_length", v["n_embd"], GGUF_UINT32)
    w.add("clip.vision.feed_forward_length", v["n_ff"], GGUF_UINT32)
    w.add("clip.vision.block_count", n_layer, GGUF_UINT32)
    w.add("clip.vision.attention.head_count", v["n_head"], GGUF_UINT32)
    w.add("clip.vision.attention.layer_norm_epsilon", v["eps"], GGUF_FLOAT32)
    w.add("clip.vision.projection_dim", v["lm_dim"], GGUF_UINT32)
    w.add("clip.vision.spatial_merge_size", 2, GGUF_UINT32)
    w.add("clip.vision.image_min_pixels", v["min_pixels"], GGUF_UINT32)
    w.add("clip.vision.image_max_pixels", v["max_pixels"], GGUF_UINT32)
    w.add("clip.vision.image_mean", v["mean"], GGUF_ARRAY, GGUF_FLOAT32)
    w.add("clip.vision.image_std", v["std"], GGUF_ARRAY, GGUF_FLOAT32)
    w.add("clip.vision.is_deepstack_layers", [i in v["deepstack"] for i in range(n_layer)], GGUF_ARRAY, GGUF_BOOL)
    total = 0
    tensors = tensor_list(v, n_layer)
    for index, (name, shape, kind) in enumerate(tensors):
        gtype = mat if kind == "weight" else GGML_F32
        w.add_tensor_raw(name, gtype, shape, make_data(args.seed, index, "bias" if kind == "embd" else kind,
                                                       gtype, shape))
        total += gguf.tensor_nbytes(gtype, shape)
    sys.stderr.write(f"random_model: {args.shape} {args.type}, {n_layer} layers, {len(tensors)} tensors, "
                     f"projecting to {v['lm_dim']} (+{sum(i < n_layer for i in v['deepstack'])} DeepStack), "
                     f"{total / 2**20:.1f} MiB of weights\n")
    t0 = time.time()
    w.write(progress=True)
    os.replace(args.output + ".part", args.output)
    sys.stderr.write(f"random_model: wrote {args.output} in {time.time() - t0:.1f} s\n")
