#!/usr/bin/python3
"""hf_mmproj_to_gguf.py - convert the vision half of a Hugging Face LLaVA,
Idefics3/SmolVLM or Qwen2.5-VL checkpoint to a llama.cpp mmproj GGUF (and the
language half to an LM GGUF with --lm: Llama text models, and Qwen2.5-VL's
as llama.cpp's qwen2vl architecture with rope.dimension_sections).

    tools/hf_mmproj_to_gguf.py MODEL_DIR MMPROJ.gguf [--type f32|f16] [--lm LM.gguf [--lm-type T]]

MODEL_DIR is save_pretrained output: config.json, *.safetensors,
preprocessor_config.json or processor_config.json (image mean/std, sizes),
tokenizer files (for --lm). The mmproj layout is the one llama.cpp's
converters write:
  - clip.projector_type "mlp" (LlavaForConditionalGeneration: CLIP tower,
    linear_1 / GELU / linear_2 as mm.0 / mm.2) or "idefics3" (SigLIP tower,
    pixel shuffle, connector proj as mm.model.fc);
  - clip.vision.{image_size, patch_size, embedding_length,
    feed_forward_length, block_count, attention.head_count,
    attention.layer_norm_epsilon, projection_dim (the LM width), image_mean,
    image_std}, clip.use_gelu (else quick GELU), clip.has_vision_encoder;
    llava: clip.has_llava_projector and clip.vision.feature_layer (the layer
    whose output the projector reads; later layers and the post-norm are not
    stored); idefics3: clip.vision.projector.scale_factor and
    clip.vision.preproc_image_size (the processor's longest edge);
  - tensors v.patch_embd.weight (always F16/F32 4-D), v.class_embd,
    v.position_embd.weight, v.pre_ln, v.blk.N.{ln1, attn_q, attn_k, attn_v,
    attn_out, ln2, ffn_up (fc1), ffn_down (fc2)}, v.post_ln; biases, norms
    and embeddings F32.
Qwen2_5_VLForConditionalGeneration (the visual.* tensors) becomes
clip.projector_type "qwen2.5vl_merger" as llama.cpp's Qwen2VLVisionModel
writes it: the conv3d patch kernel split per frame into v.patch_embd.weight
and v.patch_embd.weight.1, attn.qkv split into attn_q/k/v, attn.proj ->
attn_out, norm1/norm2 -> ln1/ln2, mlp gate/up/down_proj -> ffn_gate/up/down,
merger.ln_q -> v.post_ln, merger.mlp.0/2 -> mm.0/mm.2; clip.use_silu,
clip.vision.n_wa_pattern (fullatt_block_indexes[0] + 1, evenly spaced),
plus clip.vision.spatial_merge_size, window_size and image_min_pixels /
image_max_pixels from the processor (llama.cpp reads the last two when
present).
Qwen3VLForConditionalGeneration becomes "qwen3vl_merger" as llama.cpp's
Qwen3VLVisionModel writes it: patch kernel split per frame plus
v.patch_embd.bias, v.position_embd.weight (the learned square table, F32),
attn.qkv kept fused as attn_qkv, norm1/norm2 -> ln1/ln2 (LayerNorm with
biases), mlp.linear_fc1/2 -> ffn_up/ffn_down, merger.norm -> v.post_ln,
merger.linear_fc1/2 -> mm.0/mm.2, deepstack_merger_list.K.* ->
v.deepstack.<deepstack_visual_indexes[K]>.{norm,fc1,fc2},
clip.vision.is_deepstack_layers; --lm writes the text model as qwen3vl
(qwen3 keys renamed, rope.dimension_sections, n_deepstack_layers).
Gemma3ForConditionalGeneration becomes clip.projector_type "gemma3" (the
SigLIP tower as above, mm.input_projection.weight = the projector's
[vision width, text width] matrix as it is, mm.soft_emb_norm.weight = the
Gemma RMSNorm gain plus one, clip.vision.projector.scale_factor = the
average pool's kernel); --lm writes its text model as the gemma3
architecture.
--lm writes the language model (Llama text config) through hf_to_gguf.py.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
import hf_to_gguf  # noqa: E402
from hf_to_gguf import ConvertError, open_checkpoint, read_json  # noqa: E402

FAMILIES = {"LlavaForConditionalGeneration": "llava",
            "Gemma3ForConditionalGeneration": "gemma3",
            "Qwen2_5_VLForConditionalGeneration": "qwen2.5vl",
            "Qwen3VLForConditionalGeneration": "qwen3vl",
            "Qwen3VLMoeForConditionalGeneration": "qwen3vl",
            "Idefics3ForConditionalGeneration": "idefics3",
            "SmolVLMForConditionalGeneration": "idefics3"}
# Where each family keeps its parts (transformers 4.x and 5.x checkpoints differ).
VISION_PREFIXES = ("vision_tower.vision_model.", "vision_tower.", "model.vision_tower.vision_model.",
                   "model.vision_tower.", "model.vision_model.", "vision_model.")
LM_RENAMES = (("model.language_model.", "model."), ("language_model.model.", "model."),
              ("language_model.lm_head.", "lm_head."), ("model.text_model.", "model."),
              ("lm_head.", "lm_head."))


def log(msg):
    sys.stderr.write(f"hf_mmproj_to_gguf: {msg}\n")


def add_video_limits(w, model_dir):
    """clip.vision.video_min_pixels / video_max_pixels (omniserve's keys) from
    video_preprocessor_config.json's size when the checkpoint has one; without
    them the server uses the reference defaults (docs/vision.md)."""
    path = os.path.join(model_dir, "video_preprocessor_config.json")
    if not os.path.exists(path):
        return
    c = read_json(path, "video_preprocessor_config.json")
    size = c.get("size") or {}
    for key, v in (("video_min_pixels", c.get("min_pixels") or size.get("shortest_edge")),
                   ("video_max_pixels", c.get("max_pixels") or size.get("longest_edge"))):
        if v:
            w.add("clip.vision." + key, int(min(v, 2 ** 31 - 1)), gguf.GGUF_UINT32)


def preprocessor_config(model_dir):
    cfg = {}
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            c = read_json(path, name)
            cfg.update(c.get("image_processor", c))
    if "image_mean" not in cfg or "image_std" not in cfg:
        raise ConvertError(f"{model_dir}: no image_mean/image_std in preprocessor_config.json "
                           "or processor_config.json")
    return cfg


def vision_name(name):
    """HF vision tensor name -> GGUF name, or None for tensors not in the mmproj."""
    if name.endswith("multi_modal_projector.mm_input_projection_weight"):
        return "mm.input_projection.weight"
    if name.endswith("multi_modal_projector.mm_soft_emb_norm.weight"):
        return "mm.soft_emb_norm.weight"
    if name.startswith(("multi_modal_projector.linear_1.", "model.multi_modal_projector.linear_1.")):
        return "mm.0." + name.rsplit(".", 1)[1]
    if name.startswith(("multi_modal_projector.linear_2.", "model.multi_modal_projector.linear_2.")):
        return "mm.2." + name.rsplit(".", 1)[1]
    if name.endswith("connector.modality_projection.proj.weight"):
        return "mm.model.fc.weight"
    rest = next((name[len(p):] for p in VISION_PREFIXES if name.startswith(p)), None)
    if rest is None:
        return None
    fixed = {"embeddings.class_embedding": "v.class_embd",
             "embeddings.patch_embedding.weight": "v.patch_embd.weight",
             "embeddings.patch_embedding.bias": "v.patch_embd.bias",
             "embeddings.position_embedding.weight": "v.position_embd.weight",
             "pre_layrnorm.weight": "v.pre_ln.weight", "pre_layrnorm.bias": "v.pre_ln.bias",
             "post_layernorm.weight": "v.post_ln.weight", "post_layernorm.bias": "v.post_ln.bias"}
    if rest in fixed:
        return fixed[rest]
    parts = rest.split(".")
    if parts[:2] == ["encoder", "layers"] and len(parts) >= 5:
        sub = {"layer_norm1": "ln1", "layer_norm2": "ln2", "self_attn.q_proj": "attn_q",
               "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.out_proj": "attn_out", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"}
        key = ".".join(parts[3:-1])
        if key in sub:
            return f"v.blk.{parts[2]}.{sub[key]}.{parts[-1]}"
    raise ConvertError(f"vision tensor '{name}' is not known to this converter")


QWEN_BLOCK = {"norm1.weight": "ln1.weight", "norm2.weight": "ln2.weight",
              "attn.proj.weight": "attn_out.weight", "attn.proj.bias": "attn_out.bias",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.gate_proj.bias": "ffn_gate.bias",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.up_proj.bias": "ffn_up.bias",
              "mlp.down_proj.weight": "ffn_down.weight", "mlp.down_proj.bias": "ffn_down.bias"}
QWEN_FIXED = {"merger.ln_q.weight": "v.post_ln.weight", "merger.mlp.0.weight": "mm.0.weight",
              "merger.mlp.0.bias": "mm.0.bias", "merger.mlp.2.weight": "mm.2.weight",
              "merger.mlp.2.bias": "mm.2.bias"}


def qwen_names(name):
    """GGUF names of one HF visual.* tensor (name without 'visual.'): several
    when the tensor is split (per-frame patch kernels, fused q/k/v)."""
    if name == "patch_embed.proj.weight":
        return ["v.patch_embd.weight", "v.patch_embd.weight.1"]
    if name in QWEN_FIXED:
        return [QWEN_FIXED[name]]
    parts = name.split(".")
    if parts[0] == "blocks" and len(parts) >= 4:
        blk, rest = parts[1], ".".join(parts[2:])
        if rest in ("attn.qkv.weight", "attn.qkv.bias"):
            return [f"v.blk.{blk}.attn_{x}.{parts[-1]}" for x in "qkv"]
        if rest in QWEN_BLOCK:
            return [f"v.blk.{blk}.{QWEN_BLOCK[rest]}"]
    raise ConvertError(f"vision tensor 'visual.{name}' is not known to this converter")


def qwen_part(name, a, i):
    """Part i of the tensor, as qwen_names lists them."""
    if name == "patch_embed.proj.weight":
        return a[:, :, i]  # [D, 3, T, P, P] -> frame i's [D, 3, P, P]
    if ".attn.qkv." in name:
        c = a.shape[0] // 3
        return a[i * c:(i + 1) * c]
    return a


def convert_qwen_mmproj(model_dir, out, type_name, cfg, path):
    v, t = cfg.get("vision_config") or {}, cfg.get("text_config") or cfg
    for key in ("hidden_size", "intermediate_size", "depth", "num_heads", "patch_size", "out_hidden_size"):
        if not isinstance(v.get(key), int) or v[key] <= 0:
            raise ConvertError(f"{path}: vision_config.{key} missing or not a positive integer")
    if v.get("hidden_act", "silu") != "silu":
        raise ConvertError(f"{path}: vision hidden_act {v['hidden_act']!r} not supported")
    if v.get("temporal_patch_size", 2) != 2 or v.get("spatial_merge_size", 2) != 2:
        raise ConvertError(f"{path}: only temporal_patch_size 2 and spatial_merge_size 2 are supported")
    full = v.get("fullatt_block_indexes")
    if not full or any(b - a != full[0] + 1 for a, b in zip(full, full[1:])):
        raise ConvertError(f"{path}: fullatt_block_indexes {full!r} are not evenly spaced")
    pp = preprocessor_config(model_dir)
    size = pp.get("size") or {}
    min_px = pp.get("min_pixels") or size.get("shortest_edge") or 56 * 56
    max_px = pp.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280
    w = gguf.GGUFWriter(out)
    w.add("general.architecture", "clip")
    w.add("general.type", "mmproj")
    w.add("general.name", cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", 0 if type_name == "f32" else 1, gguf.GGUF_UINT32)
    w.add("clip.has_vision_encoder", True)
    w.add("clip.projector_type", "qwen2.5vl_merger")
    w.add("clip.use_silu", True)
    w.add("clip.vision.n_wa_pattern", int(full[0]) + 1, gguf.GGUF_UINT32)
    # M-RoPE temporal ids per second of video (omniserve's key; llama.cpp's files lack it)
    w.add("clip.vision.tokens_per_second", int(v.get("tokens_per_second") or 2), gguf.GGUF_UINT32)
    w.add("clip.vision.image_size", int(v.get("image_size", 560)), gguf.GGUF_UINT32)
    w.add("clip.vision.patch_size", v["patch_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.embedding_length", v["hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.feed_forward_length", v["intermediate_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.block_count", v["depth"], gguf.GGUF_UINT32)
    w.add("clip.vision.attention.head_count", v["num_heads"], gguf.GGUF_UINT32)
    # the HF blocks and the merger use RMSNorm eps 1e-6 whatever the config says
    w.add("clip.vision.attention.layer_norm_epsilon", 1e-6, gguf.GGUF_FLOAT32)
    w.add("clip.vision.projection_dim", v["out_hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.spatial_merge_size", 2, gguf.GGUF_UINT32)
    w.add("clip.vision.window_size", int(v.get("window_size", 112)), gguf.GGUF_UINT32)
    w.add("clip.vision.image_min_pixels", int(min_px), gguf.GGUF_UINT32)
    w.add("clip.vision.image_max_pixels", int(max_px), gguf.GGUF_UINT32)
    add_video_limits(w, model_dir)
    w.add("clip.vision.image_mean", [float(x) for x in pp["image_mean"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
    w.add("clip.vision.image_std", [float(x) for x in pp["image_std"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
    ckpt = open_checkpoint(model_dir)
    mat_type = gguf.GGML_F32 if type_name == "f32" else gguf.GGML_F16
    n = 0
    for name in sorted(ckpt):
        rest = next((name[len(p):] for p in ("model.visual.", "visual.") if name.startswith(p)), None)
        if rest is None:
            continue
        shape = list(ckpt[name].tensors[name][1])
        names = qwen_names(rest)
        if rest == "patch_embed.proj.weight":
            if len(shape) != 5 or shape[2] != 2:
                raise ConvertError(f"{name}: shape {shape}, expected [D, 3, 2, P, P]")
            oshape = shape[:2] + shape[3:]
        else:
            if shape[0] % len(names):
                raise ConvertError(f"{name}: {shape[0]} rows, not {len(names)} equal parts")
            oshape = [shape[0] // len(names)] + shape[1:]
        for i, gname in enumerate(names):
            gtype = mat_type if len(oshape) >= 2 else gguf.GGML_F32

            def data(name=name, rest=rest, i=i, gtype=gtype):
                a = qwen_part(rest, ckpt[name].load(name), i)
                return np.ascontiguousarray(a).astype("<f4" if gtype == gguf.GGML_F32 else "<f2").tobytes()

            w.add_tensor_raw(gname, gtype, oshape, data)
            n += 1
    if n == 0:
        raise ConvertError(f"{model_dir}: no visual.* tensors")
    log(f"qwen2.5vl: {n} tensors, {v['depth']} vision blocks")
    w.write()
    log(f"wrote {out}")


QWEN3_FIXED = {"patch_embed.proj.bias": "v.patch_embd.bias", "pos_embed.weight": "v.position_embd.weight",
               "merger.norm.weight": "v.post_ln.weight", "merger.norm.bias": "v.post_ln.bias",
               "merger.linear_fc1.weight": "mm.0.weight", "merger.linear_fc1.bias": "mm.0.bias",
               "merger.linear_fc2.weight": "mm.2.weight", "merger.linear_fc2.bias": "mm.2.bias"}
QWEN3_BLOCK = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out",
               "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down"}
QWEN3_DEEPSTACK = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}


def qwen3_names(name, deepstack):
    """GGUF names of one HF Qwen3-VL visual.* tensor (without 'visual.'),
    as llama.cpp's Qwen3VLVisionModel writes them; deepstack: the blocks the
    DeepStack mergers read (deepstack_visual_indexes), which name them."""
    if name == "patch_embed.proj.weight":
        return ["v.patch_embd.weight", "v.patch_embd.weight.1"]
    if name in QWEN3_FIXED:
        return [QWEN3_FIXED[name]]
    parts = name.split(".")
    if parts[0] == "blocks" and len(parts) >= 4 and ".".join(parts[2:-1]) in QWEN3_BLOCK:
        return [f"v.blk.{parts[1]}.{QWEN3_BLOCK['.'.join(parts[2:-1])]}.{parts[-1]}"]
    if (parts[0] == "deepstack_merger_list" and len(parts) == 4 and parts[1].isdigit() and
            int(parts[1]) < len(deepstack) and parts[2] in QWEN3_DEEPSTACK):
        return [f"v.deepstack.{deepstack[int(parts[1])]}.{QWEN3_DEEPSTACK[parts[2]]}.{parts[3]}"]
    raise ConvertError(f"vision tensor 'visual.{name}' is not known to this converter")


def convert_qwen3vl_mmproj(model_dir, out, type_name, cfg, path):
    """Qwen3VLForConditionalGeneration's visual.* -> clip.projector_type
    "qwen3vl_merger" (llama.cpp's layout: fused attn_qkv, LayerNorm ln1/ln2
    with biases, ffn_up/ffn_down, v.position_embd, v.post_ln = merger.norm,
    mm.0 / mm.2, v.deepstack.<block>.{norm,fc1,fc2} and
    clip.vision.is_deepstack_layers)."""
    v = cfg.get("vision_config") or {}
    for key in ("hidden_size", "intermediate_size", "depth", "num_heads", "patch_size", "out_hidden_size",
                "num_position_embeddings"):
        if not isinstance(v.get(key), int) or v[key] <= 0:
            raise ConvertError(f"{path}: vision_config.{key} missing or not a positive integer")
    if v.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ConvertError(f"{path}: vision hidden_act {v['hidden_act']!r} not supported (gelu_pytorch_tanh)")
    if v.get("temporal_patch_size", 2) != 2 or v.get("spatial_merge_size", 2) != 2:
        raise ConvertError(f"{path}: only temporal_patch_size 2 and spatial_merge_size 2 are supported")
    side = int(round(v["num_position_embeddings"] ** 0.5))
    if side * side != v["num_position_embeddings"]:
        raise ConvertError(f"{path}: num_position_embeddings {v['num_position_embeddings']} is not a square")
    deepstack = list(v.get("deepstack_visual_indexes") or [])
    if any(not isinstance(i, int) or not 0 <= i < v["depth"] for i in deepstack) or sorted(set(deepstack)) != deepstack:
        raise ConvertError(f"{path}: deepstack_visual_indexes {deepstack!r} not increasing block indexes")
    pp = preprocessor_config(model_dir)
    size = pp.get("size") or {}
    unit = (v["patch_size"] * 2) ** 2
    min_px = pp.get("min_pixels") or size.get("shortest_edge") or 8 * unit
    max_px = pp.get("max_pixels") or size.get("longest_edge") or 4096 * unit
    w = gguf.GGUFWriter(out)
    w.add("general.architecture", "clip")
    w.add("general.type", "mmproj")
    w.add("general.name", cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", 0 if type_name == "f32" else 1, gguf.GGUF_UINT32)
    w.add("clip.has_vision_encoder", True)
    w.add("clip.projector_type", "qwen3vl_merger")
    w.add("clip.use_gelu", True)
    w.add("clip.vision.image_size", side * v["patch_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.patch_size", v["patch_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.embedding_length", v["hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.feed_forward_length", v["intermediate_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.block_count", v["depth"], gguf.GGUF_UINT32)
    w.add("clip.vision.attention.head_count", v["num_heads"], gguf.GGUF_UINT32)
    # the HF blocks and mergers use LayerNorm eps 1e-6 whatever the config says
    w.add("clip.vision.attention.layer_norm_epsilon", 1e-6, gguf.GGUF_FLOAT32)
    w.add("clip.vision.projection_dim", v["out_hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.spatial_merge_size", 2, gguf.GGUF_UINT32)
    w.add("clip.vision.image_min_pixels", int(min_px), gguf.GGUF_UINT32)
    w.add("clip.vision.image_max_pixels", int(min(max_px, 2 ** 31 - 1)), gguf.GGUF_UINT32)
    add_video_limits(w, model_dir)
    w.add("clip.vision.image_mean", [float(x) for x in pp["image_mean"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
    w.add("clip.vision.image_std", [float(x) for x in pp["image_std"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
    if deepstack:
        w.add("clip.vision.is_deepstack_layers", [i in deepstack for i in range(v["depth"])],
              gguf.GGUF_ARRAY, gguf.GGUF_BOOL)
    ckpt = open_checkpoint(model_dir)
    mat_type = gguf.GGML_F32 if type_name == "f32" else gguf.GGML_F16
    n = 0
    for name in sorted(ckpt):
        rest = next((name[len(p):] for p in ("model.visual.", "visual.") if name.startswith(p)), None)
        if rest is None:
            continue
        shape = list(ckpt[name].tensors[name][1])
        names = qwen3_names(rest, deepstack)
        if rest == "patch_embed.proj.weight":
            if len(shape) != 5 or shape[2] != 2:
                raise ConvertError(f"{name}: shape {shape}, expected [D, 3, 2, P, P]")
            oshape = shape[:2] + shape[3:]
        else:
            oshape = shape
        for i, gname in enumerate(names):
            # matrices in the chosen type; vectors and the position table F32
            gtype = mat_type if len(oshape) >= 2 and rest != "pos_embed.weight" else gguf.GGML_F32

            def data(name=name, rest=rest, i=i, gtype=gtype):
                a = ckpt[name].load(name)
                if rest == "patch_embed.proj.weight":
                    a = a[:, :, i]  # [D, 3, T, P, P] -> frame i's [D, 3, P, P]
                return np.ascontiguousarray(a).astype("<f4" if gtype == gguf.GGML_F32 else "<f2").tobytes()

            w.add_tensor_raw(gname, gtype, oshape, data)
            n += 1
    if n == 0:
        raise ConvertError(f"{model_dir}: no visual.* tensors")
    log(f"qwen3vl: {n} tensors, {v['depth']} vision blocks, DeepStack after blocks {deepstack}")
    w.write()
    log(f"wrote {out}")


def convert_mmproj(model_dir, out, type_name):
    path = os.path.join(model_dir, "config.json")
    cfg = read_json(path, "config.json")
    arch = (cfg.get("architectures") or [None])[0]
    if arch not in FAMILIES:
        raise ConvertError(f"{path}: unsupported architecture {arch!r} (supported: {', '.join(FAMILIES)})")
    family = FAMILIES[arch]
    if family == "qwen2.5vl":
        return convert_qwen_mmproj(model_dir, out, type_name, cfg, path)
    if family == "qwen3vl":
        return convert_qwen3vl_mmproj(model_dir, out, type_name, cfg, path)
    v, t = cfg.get("vision_config") or {}, cfg.get("text_config") or {}
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "image_size", "patch_size"):
        if not isinstance(v.get(key), int) or v[key] <= 0:
            raise ConvertError(f"{path}: vision_config.{key} missing or not a positive integer")
    if not isinstance(t.get("hidden_size"), int):
        raise ConvertError(f"{path}: text_config.hidden_size missing")
    pp = preprocessor_config(model_dir)
    act = v.get("hidden_act", "quick_gelu" if family == "llava" else "gelu_pytorch_tanh")
    if act not in ("quick_gelu", "gelu", "gelu_pytorch_tanh"):
        raise ConvertError(f"{path}: vision hidden_act {act!r} not supported")

    n_layer = v["num_hidden_layers"]
    keep_layers = n_layer
    w = gguf.GGUFWriter(out)
    w.add("general.architecture", "clip")
    w.add("general.type", "mmproj")
    w.add("general.name", cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", 0 if type_name == "f32" else 1, gguf.GGUF_UINT32)
    w.add("clip.has_vision_encoder", True)
    w.add("clip.use_gelu", act != "quick_gelu")
    if family == "llava":
        if cfg.get("projector_hidden_act", "gelu") != "gelu":
            raise ConvertError(f"{path}: projector_hidden_act {cfg['projector_hidden_act']!r} not supported")
        if cfg.get("vision_feature_select_strategy", "default") != "default":
            raise ConvertError(f"{path}: vision_feature_select_strategy "
                               f"{cfg['vision_feature_select_strategy']!r} not supported")
        layer = cfg.get("vision_feature_layer", -2)
        if not isinstance(layer, int):
            raise ConvertError(f"{path}: several vision_feature_layer values are not supported")
        keep_layers = layer if layer >= 0 else n_layer + layer + 1
        if not 0 < keep_layers <= n_layer:
            raise ConvertError(f"{path}: vision_feature_layer {layer} out of range")
        w.add("clip.projector_type", "mlp")
        w.add("clip.has_llava_projector", True)
        w.add("clip.vision.feature_layer", [keep_layers], gguf.GGUF_ARRAY, gguf.GGUF_INT32)
    elif family == "gemma3":
        # SigLIP at a fixed size, then an average pool of k x k patches
        # (k = patches per side / sqrt(mm_tokens_per_image), llama.cpp's
        # projector.scale_factor, 4 when absent), Gemma RMSNorm, projection
        side = v["image_size"] // v["patch_size"]
        per_side = int(round(float(cfg.get("mm_tokens_per_image", 256)) ** 0.5))
        if per_side < 1 or per_side * per_side != cfg.get("mm_tokens_per_image", 256) or side % per_side:
            raise ConvertError(f"{path}: mm_tokens_per_image {cfg.get('mm_tokens_per_image')!r} is not a "
                               f"square dividing the {side}x{side} patches")
        if pp.get("do_pan_and_scan"):
            log("warning: pan-and-scan is not converted (images are one 896 px view)")
        w.add("clip.projector_type", "gemma3")
        w.add("clip.vision.projector.scale_factor", side // per_side, gguf.GGUF_UINT32)
    else:
        w.add("clip.projector_type", "idefics3")
        w.add("clip.vision.projector.scale_factor", int(cfg.get("scale_factor", 2)), gguf.GGUF_UINT32)
        longest = (pp.get("size") or {}).get("longest_edge", v["image_size"])
        w.add("clip.vision.preproc_image_size", int(longest), gguf.GGUF_UINT32)
    w.add("clip.vision.image_size", v["image_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.patch_size", v["patch_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.embedding_length", v["hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.feed_forward_length", v["intermediate_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.block_count", keep_layers, gguf.GGUF_UINT32)
    w.add("clip.vision.attention.head_count", v["num_attention_heads"], gguf.GGUF_UINT32)
    w.add("clip.vision.attention.layer_norm_epsilon",
          float(v.get("layer_norm_eps", 1e-5 if family == "llava" else 1e-6)), gguf.GGUF_FLOAT32)
    w.add("clip.vision.projection_dim", t["hidden_size"], gguf.GGUF_UINT32)
    w.add("clip.vision.image_mean", [float(x) for x in pp["image_mean"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
    w.add("clip.vision.image_std", [float(x) for x in pp["image_std"]], gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)

    ckpt = open_checkpoint(model_dir)
    mat_type = gguf.GGML_F32 if type_name == "f32" else gguf.GGML_F16
    plan = []
    for name in ckpt:
        gname = vision_name(name)
        if gname is None:
            continue
        layer = int(gname.split(".")[2]) if gname.startswith("v.blk.") else -1
        if layer >= keep_layers:
            continue
        if family == "llava" and gname.startswith("v.post_ln"):
            continue  # the projector reads an inner layer, before any final norm
        plan.append((layer, gname, name))
    for _, gname, name in sorted(plan):
        shape = ckpt[name].tensors[name][1]
        gtype = mat_type if len(shape) >= 2 and gname != "v.position_embd.weight" else gguf.GGML_F32

        def data(name=name, gtype=gtype, gname=gname):
            a = ckpt[name].load(name)
            if gname == "mm.soft_emb_norm.weight":
                a = a.astype(np.float32) + 1.0  # Gemma's RMSNorm gain is (1 + w): stored as llama.cpp does
            return a.astype("<f4" if gtype == gguf.GGML_F32 else "<f2").tobytes()

        w.add_tensor_raw(gname, gtype, shape, data)
    log(f"{family}: {len(plan)} tensors, {keep_layers}/{n_layer} vision layers")
    w.write()
    log(f"wrote {out}")


class RenamedTensors:
    """A view of a SafetensorsFile under other tensor names (for hf_to_gguf.add_tensors)."""

    def __init__(self, st, names, transpose=()):
        self.path, self.st, self.names = st.path, st, names  # new name -> old name
        self.transpose = set(transpose)  # new names whose last two axes are swapped
        self.tensors = {}
        for new, old in names.items():
            dtype, shape, begin, end = st.tensors[old]
            if new in self.transpose:
                shape = shape[:-2] + (shape[-1], shape[-2])
            self.tensors[new] = (dtype, shape, begin, end)

    def load(self, new):
        a = self.st.load(self.names[new])
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)) if new in self.transpose else a


def convert_lm(model_dir, out, type_name):
    """The language model alone: a temporary directory holding its config and
    the tokenizer, and the checkpoint's LM tensors under standalone names."""
    cfg = read_json(os.path.join(model_dir, "config.json"), "config.json")
    text = dict(cfg.get("text_config") or {})
    family = FAMILIES.get((cfg.get("architectures") or [None])[0])
    qwen = family in ("qwen2.5vl", "qwen3vl")
    moe = (cfg.get("architectures") or [None])[0] == "Qwen3VLMoeForConditionalGeneration"
    sections = None
    if qwen:
        # a qwen2 model plus M-RoPE: llama.cpp's qwen2vl architecture, its
        # rope.dimension_sections the reference's mrope_section padded to 4
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        sections = list(rope.get("mrope_section") or [])
        if not 1 <= len(sections) <= 4 or not all(isinstance(x, int) and x >= 0 for x in sections):
            raise ConvertError(f"{model_dir}: text_config mrope_section {sections!r} not supported")
        sections += [0] * (4 - len(sections))
        text["architectures"] = ["Qwen3MoeForCausalLM" if moe else
                                 "Qwen3ForCausalLM" if family == "qwen3vl" else "Qwen2ForCausalLM"]
    elif FAMILIES.get((cfg.get("architectures") or [None])[0]) == "gemma3":
        text["architectures"] = ["Gemma3ForCausalLM"]
    elif text.get("model_type", "llama") != "llama":
        raise ConvertError(f"{model_dir}: text model type {text.get('model_type')!r} not supported")
    else:
        text["architectures"] = ["LlamaForCausalLM"]
    ckpt = open_checkpoint(model_dir)
    if text["architectures"] == ["Gemma3ForCausalLM"]:
        # save_pretrained drops a tied lm_head (the top-level config says)
        text["tie_word_embeddings"] = not any(n.endswith("lm_head.weight") for n in ckpt)
    renamed = {}
    for name in ckpt:
        if qwen and name.startswith("model.") and not name.startswith(("model.visual.", "model.language_model.")):
            renamed[name] = name  # transformers 4.x layout: the LM at the top
            continue
        for old, new in LM_RENAMES:
            if name.startswith(old):
                renamed[new + name[len(old):]] = name
                break
    # Qwen3-VL-MoE may store its fused experts as [E, n_embd, 2 ff] and
    # [E, ff, n_embd] (llama.cpp's converter transposes them): told apart by
    # down_proj's shape, brought to transformers 5's [E, 2 ff, n_embd] / [E, n_embd, ff]
    transpose = set()
    if moe:
        d, ff = text.get("hidden_size"), text.get("moe_intermediate_size")
        for new, old in renamed.items():
            if new.endswith("mlp.experts.down_proj"):
                shape = ckpt[old].tensors[old][1]
                if len(shape) == 3 and shape[1] == ff and shape[2] == d and ff != d:
                    transpose |= {new, new[:-len("down_proj")] + "gate_up_proj"}
    views = {}
    for new, old in renamed.items():
        st = ckpt[old]
        views.setdefault(id(st), (st, {}))[1][new] = old
    lm_ckpt = {}
    for st, names in views.values():
        view = RenamedTensors(st, names, transpose)
        for new in names:
            lm_ckpt[new] = view
    tmp = tempfile.mkdtemp(prefix="mmproj_lm_")
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(text, f)
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if os.path.exists(os.path.join(model_dir, name)):
                shutil.copy(os.path.join(model_dir, name), tmp)
        ggml_type, file_type = hf_to_gguf.FILE_TYPES[type_name]
        hp = hf_to_gguf.HParams(tmp)
        w = gguf.GGUFWriter(out)
        hp.write(w, cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir)), file_type)
        if qwen:
            # rename qwen2.* -> qwen2vl.* (qwen3.* -> qwen3vl.*) and add the
            # M-RoPE sections (and Qwen3-VL's DeepStack layer count)
            src, dst = (("qwen3moe.", "qwen3vlmoe") if moe else ("qwen3.", "qwen3vl") if family == "qwen3vl"
                        else ("qwen2.", "qwen2vl"))
            w.kv = [(dst + "." + k[len(src):] if k.startswith(src) else k, t, v)
                    for k, t, v in w.kv if k != "general.architecture"]
            w.add("general.architecture", dst)
            w.add(dst + ".rope.dimension_sections", sections, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
            if family == "qwen3vl":
                n_ds = len((cfg.get("vision_config") or {}).get("deepstack_visual_indexes") or [])
                w.add(dst + ".n_deepstack_layers", n_ds, gguf.GGUF_UINT32)
        hf_to_gguf.add_tokenizer(w, hp, tmp)
        hf_to_gguf.add_tensors(w, hp, lm_ckpt, ggml_type)
        w.write()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description="Convert a HF LLaVA / Idefics3 checkpoint's vision "
                                             "encoder to a llama.cpp mmproj GGUF.")
    ap.add_argument("model_dir")
    ap.add_argument("out", help="output mmproj .gguf")
    ap.add_argument("--type", choices=("f32", "f16"), default="f16",
                    help="type of the weight matrices (default f16)")
    ap.add_argument("--lm", help="also write the language model to this GGUF")
    ap.add_argument("--lm-type", choices=sorted(hf_to_gguf.FILE_TYPES), default="f16")
    args = ap.parse_args()
    try:
        convert_mmproj(args.model_dir, args.out, args.type)
        if args.lm:
            convert_lm(args.model_dir, args.lm, args.lm_type)
    except (ConvertError, OSError) as e:
        sys.stderr.write(f"hf_mmproj_to_gguf: error: {e}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
