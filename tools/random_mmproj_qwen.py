"""random_mmproj_qwen.py - the Qwen2.5-VL mmproj shapes of tools/random_model:
random weights in the layout tools/hf_mmproj_to_gguf.py (and llama.cpp's
converter) writes for clip.projector_type "qwen2.5vl_merger".

    tools/random_model --shape qwen2.5-vl-3b-mmproj -o mmproj.gguf [--type f16|f32] [--layers N]

SHAPES holds the published vision_config / preprocessor_config.json values;
build() takes random_model's parsed arguments and its make_data (seeded per
tensor, so files are reproducible). --layers keeps the first N blocks
(n_wa_pattern stays, so the full-attention blocks are still every 8th).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
from gguf import GGML_F16, GGML_F32, GGUF_ARRAY, GGUF_FLOAT32, GGUF_UINT32  # noqa: E402

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

SHAPES = {
    # Qwen/Qwen2.5-VL-3B-Instruct: vision_config depth 32, hidden 1280,
    # intermediate 3420, 16 heads, out_hidden_size 2048, fullatt_block_indexes
    # [7, 15, 23, 31], window 112; processor min/max pixels 3136 / 12845056
    "qwen2.5-vl-3b-mmproj": dict(
        hf="Qwen/Qwen2.5-VL-3B-Instruct", family="qwen2.5vl", n_embd=1280, n_layer=32, n_head=16,
        n_ff=3420, image_size=560, patch_size=14, eps=1e-6, lm_dim=2048, n_wa_pattern=8,
        window=112, min_pixels=3136, max_pixels=12845056, mean=CLIP_MEAN, std=CLIP_STD),
}


def tensor_list(v, n_layer):
    """(name, numpy-style shape, kind) in the converter's order."""
    D, F, P, L = v["n_embd"], v["n_ff"], v["patch_size"], v["lm_dim"]
    t = [("v.patch_embd.weight", (D, 3, P, P), "weight"), ("v.patch_embd.weight.1", (D, 3, P, P), "weight")]
    for i in range(n_layer):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", (D,), "norm")]
        for x in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t += [(b + x + ".weight", (D, D), "weight"), (b + x + ".bias", (D,), "bias")]
        t += [(b + "ln2.weight", (D,), "norm"),
              (b + "ffn_gate.weight", (F, D), "weight"), (b + "ffn_gate.bias", (F,), "bias"),
              (b + "ffn_up.weight", (F, D), "weight"), (b + "ffn_up.bias", (F,), "bias"),
              (b + "ffn_down.weight", (D, F), "weight"), (b + "ffn_down.bias", (D,), "bias")]
    t += [("v.post_ln.weight", (D,), "norm"),
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
    w.add("clip.projector_type", "qwen2.5vl_merger")
    w.add("clip.use_silu", True)
    w.add("clip.vision.n_wa_pattern", v["n_wa_pattern"], GGUF_UINT32)
    w.add("clip.vision.image_size", v["image_size"], GGUF_UINT32)
    w.add("clip.vision.patch_size", v["patch_size"], GGUF_UINT32)
    w.add("clip.vision.embedding_length", v["n_embd"], GGUF_UINT32)
    w.add("clip.vision.feed_forward_length", v["n_ff"], GGUF_UINT32)
    w.add("clip.vision.block_count", n_layer, GGUF_UINT32)
    w.add("clip.vision.attention.head_count", v["n_head"], GGUF_UINT32)
    w.add("clip.vision.attention.layer_norm_epsilon", v["eps"], GGUF_FLOAT32)
    w.add("clip.vision.projection_dim", v["lm_dim"], GGUF_UINT32)
    w.add("clip.vision.spatial_merge_size", 2, GGUF_UINT32)
    w.add("clip.vision.window_size", v["window"], GGUF_UINT32)
    w.add("clip.vision.image_min_pixels", v["min_pixels"], GGUF_UINT32)
    w.add("clip.vision.image_max_pixels", v["max_pixels"], GGUF_UINT32)
    w.add("clip.vision.image_mean", v["mean"], GGUF_ARRAY, GGUF_FLOAT32)
    w.add("clip.vision.image_std", v["std"], GGUF_ARRAY, GGUF_FLOAT32)
    total = 0
    tensors = tensor_list(v, n_layer)
    for index, (name, shape, kind) in enumerate(tensors):
        gtype = mat if kind == "weight" else GGML_F32
        w.add_tensor_raw(name, gtype, shape, make_data(args.seed, index, kind, gtype, shape))
        total += gguf.tensor_nbytes(gtype, shape)
    sys.stderr.write(f"random_model: {args.shape} {args.type}, {n_layer} layers, {len(tensors)} tensors, "
                     f"projecting to {v['lm_dim']}, {total / 2**20:.1f} MiB of weights\n")
    t0 = time.time()
    w.write(progress=True)
    os.replace(args.output + ".part", args.output)
    sys.stderr.write(f"random_model: wrote {args.output} in {time.time() - t0:.1f} s\n")
