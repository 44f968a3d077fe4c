#!/usr/bin/python3
"""hf_dac_to_gguf.py - a Hugging Face DacModel checkpoint (config.json +
model.safetensors, e.g. ibm-research/DAC.speech.v1.0) to the GGUF that
audio/codec/dac.c reads. numpy only: no torch needed.

    tools/hf_dac_to_gguf.py MODEL_DIR -o dac.gguf [--type f32|f16] [--no-encoder]

Weight norm is folded here: a conv stored as weight_g / weight_v (the
original DAC layout and older transformers checkpoints) or as
parametrizations.weight.original0 / original1 (torch's newer
parametrization) becomes one plain weight w = g * v / ||v||, the norm taken
over every axis but the first (torch.nn.utils.weight_norm's default dim=0,
for Conv1d (out, in, k) and ConvTranspose1d (in, out, k) alike).

GGUF written (tensor names are the transformers module names, so an error
about a missing tensor points at the checkpoint's own key):
  general.architecture = "dac"
  dac.sampling_rate, dac.hidden_size, dac.decoder_hidden_size,
  dac.n_codebooks, dac.codebook_size, dac.codebook_dim (u32),
  dac.upsampling_ratios, dac.downsampling_ratios (u32 arrays)
  quantizer.quantizers.{i}.codebook.weight       (codebook_size, codebook_dim)
  quantizer.quantizers.{i}.{in,out}_proj.weight  (out, in, 1), .bias (out)
  decoder.conv1.weight (C0, hidden, 7), decoder.block.{b}.snake1.alpha (C),
  decoder.block.{b}.conv_t1.weight (C_in, C_out, 2*stride),
  decoder.block.{b}.res_unit{1,2,3}.{snake1,snake2}.alpha,
  decoder.block.{b}.res_unit{1,2,3}.{conv1 (k7), conv2 (k1)}.{weight,bias},
  decoder.snake1.alpha, decoder.conv2.weight (1, C, 7), decoder.conv2.bias
  encoder.* likewise (kept for a later encoder unless --no-encoder)
Snake alphas (1, C, 1) are stored as (C). Shapes are numpy order; GGUF keeps
them reversed (ne[0] = the last axis). Biases and alphas stay F32.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402  (tools/gguf.py)
from hf_to_gguf import ConvertError, log, open_checkpoint, read_json  # noqa: E402


def fold_weight_norm(g, v):
    """w = g * v / ||v|| with the norm over all axes but 0 (torch's dim=0)."""
    axes = tuple(range(1, v.ndim))
    norm = np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=axes, keepdims=True))
    g = g.astype(np.float64).reshape((v.shape[0],) + (1,) * (v.ndim - 1))
    return (g * v / np.maximum(norm, 1e-30)).astype(np.float32)


def plain_tensors(ckpt):
    """name -> loader of a float32 array, weight norm folded away."""
    out = {}
    for name, st in ckpt.items():
        if name.endswith(".weight_g") or name.endswith(".parametrizations.weight.original0"):
            if name.endswith(".weight_g"):
                base, vname = name[:-len(".weight_g")], name[:-1] + "v"
            else:
                base = name[:-len(".parametrizations.weight.original0")]
                vname = name[:-1] + "1"
            if vname not in ckpt:
                raise ConvertError(f"{st.path}: '{name}' without its '{vname}'")
            out[base + ".weight"] = (lambda n=name, m=vname: fold_weight_norm(
                ckpt[n].load(n), ckpt[m].load(m)))
        elif name.endswith(".weight_v") or name.endswith(".parametrizations.weight.original1"):
            continue
        else:
            out[name] = (lambda n=name: ckpt[n].load(n))
    return out


def positive_int(cfg, path, key):
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConvertError(f"{path}: '{key}' missing or not a positive integer")
    return v


def int_list(cfg, path, key):
    v = cfg.get(key)
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and x > 0 for x in v):
        raise ConvertError(f"{path}: '{key}' missing or not a list of positive integers")
    return v


def expected_decoder_shapes(hp):
    """Shape of each decoder / quantizer tensor the C side reads."""
    h, c0, dim = hp["hidden_size"], hp["decoder_hidden_size"], hp["codebook_dim"]
    s = {}
    for i in range(hp["n_codebooks"]):
        q = f"quantizer.quantizers.{i}."
        s[q + "codebook.weight"] = (hp["codebook_size"], dim)
        s[q + "out_proj.weight"] = (h, dim, 1)
        s[q + "out_proj.bias"] = (h,)
    s["decoder.conv1.weight"] = (c0, h, 7)
    s["decoder.conv1.bias"] = (c0,)
    c = c0
    for b, stride in enumerate(hp["upsampling_ratios"]):
        co = c0 // 2 ** (b + 1)
        p = f"decoder.block.{b}."
        s[p + "snake1.alpha"] = (c,)
        s[p + "conv_t1.weight"] = (c, co, 2 * stride)
        s[p + "conv_t1.bias"] = (co,)
        for r in (1, 2, 3):
            u = f"{p}res_unit{r}."
            s[u + "snake1.alpha"] = (co,)
            s[u + "conv1.weight"] = (co, co, 7)
            s[u + "conv1.bias"] = (co,)
            s[u + "snake2.alpha"] = (co,)
            s[u + "conv2.weight"] = (co, co, 1)
            s[u + "conv2.bias"] = (co,)
        c = co
    s["decoder.snake1.alpha"] = (c,)
    s["decoder.conv2.weight"] = (1, c, 7)
    s["decoder.conv2.bias"] = (1,)
    return s


def convert(model_dir, out, type_name, encoder=True):
    cfg_path = os.path.join(model_dir, "config.json")
    cfg = read_json(cfg_path, "config.json")
    if cfg.get("model_type") != "dac":
        raise ConvertError(f"{cfg_path}: model_type {cfg.get('model_type')!r} is not 'dac'")
    hp = {k: positive_int(cfg, cfg_path, k) for k in
          ("hidden_size", "decoder_hidden_size", "n_codebooks", "codebook_size",
           "codebook_dim", "sampling_rate")}
    hp["upsampling_ratios"] = int_list(cfg, cfg_path, "upsampling_ratios")
    hp["downsampling_ratios"] = cfg.get("downsampling_ratios") or []
    if hp["decoder_hidden_size"] % 2 ** len(hp["upsampling_ratios"]):
        raise ConvertError(f"{cfg_path}: decoder_hidden_size {hp['decoder_hidden_size']} does not "
                           f"halve {len(hp['upsampling_ratios'])} times")

    tensors = plain_tensors(open_checkpoint(model_dir))
    want = expected_decoder_shapes(hp)
    for name in want:
        if name not in tensors:
            raise ConvertError(f"{model_dir}: tensor '{name}' missing (not a DacModel checkpoint "
                               f"of this config?)")

    ggml_type = {"f32": gguf.GGML_F32, "f16": gguf.GGML_F16}[type_name]
    w = gguf.GGUFWriter(out)
    w.add("general.architecture", "dac")
    w.add("general.name", os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", 0 if type_name == "f32" else 1, gguf.GGUF_UINT32)
    for k in ("sampling_rate", "hidden_size", "decoder_hidden_size", "n_codebooks",
              "codebook_size", "codebook_dim"):
        w.add(f"dac.{k}", hp[k], gguf.GGUF_UINT32)
    w.add("dac.upsampling_ratios", hp["upsampling_ratios"], gguf.GGUF_ARRAY, gguf.GGUF_UINT32)
    if hp["downsampling_ratios"]:
        w.add("dac.downsampling_ratios", [int(x) for x in hp["downsampling_ratios"]],
              gguf.GGUF_ARRAY, gguf.GGUF_UINT32)
    if encoder and isinstance(cfg.get("encoder_hidden_size"), int) and cfg["encoder_hidden_size"] > 0:
        w.add("dac.encoder_hidden_size", cfg["encoder_hidden_size"], gguf.GGUF_UINT32)

    n = 0
    for name in sorted(tensors):
        if not encoder and name.startswith("encoder."):
            continue
        a = tensors[name]()
        if name.endswith(".alpha"):
            a = a.reshape(-1)
        if name in want and tuple(a.shape) != want[name]:
            raise ConvertError(f"{model_dir}: tensor '{name}' has shape {tuple(a.shape)}, "
                               f"expected {want[name]} from config.json")
        small = a.ndim == 1 or name.endswith("codebook.weight")
        w.add_tensor(name, a, gguf.GGML_F32 if small else ggml_type)
        n += 1
    w.write()
    log(f"wrote {out}: {n} tensors, {len(hp['upsampling_ratios'])} decoder blocks, "
        f"hop {int(np.prod(hp['upsampling_ratios']))}, {hp['sampling_rate']} Hz")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--type", choices=("f32", "f16"), default="f32")
    ap.add_argument("--no-encoder", action="store_true", help="leave the encoder out")
    a = ap.parse_args()
    try:
        convert(a.model_dir, a.out, a.type, encoder=not a.no_encoder)
    except ConvertError as e:
        print(f"hf_dac_to_gguf: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
