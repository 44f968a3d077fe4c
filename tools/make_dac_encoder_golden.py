#!/usr/bin/env python3
"""make_dac_encoder_golden.py - golden fixtures for the DAC encoder
(audio/codec/dac_encode.c) from the committed tiny transformers DacModel
(tests/fixtures/dac/hf_wn, written by tools/make_dac_golden.py). Needs torch
+ transformers (run it on a machine that has them); tests/test_dac_encode.c
reads what it writes.

    python3 tools/make_dac_encoder_golden.py tests/fixtures/dac/hf_wn OUT_DIR
    python3 tools/make_dac_encoder_golden.py --mid OUT_DIR   # DAC.speech's strides, narrow

--mid writes a seeded random DacModel with DAC.speech.v1.0's strides and
codebooks (2, 4, 5, 8; 4 x 1024 x 8) but narrow channels into OUT_DIR/mid
(config.json, model.safetensors: a few hundred KB) and the same files below
with the prefix mid_.

Writes into OUT_DIR, for two fixed inputs (enc_a: a multiple of the hop,
enc_b: not, so the strided convs drop a remainder):
  enc_X_input.f32     the waveform (raw little-endian f32, mono)
  enc_X_latent.f32    DacModel.encoder(input) [hidden_size][frames]
  enc_X_codes.json    DacModel.encode(input).audio_codes [n_codebooks][frames]
  enc_X_margin.f32    per codebook and frame ([q][t]): the gap between the
                      best and second-best score of the nearest-code rule (a
                      tiny gap may flip under float rounding)
  enc_X_quant.f32     quantized_representation [hidden_size][frames]
  enc_meta.json       versions, lengths, the smallest margins
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
import torch.nn.functional as F
from transformers import DacConfig, DacModel


def inputs(hop, sr):
    rng = np.random.default_rng(2024)
    out = {}
    for name, n in (("a", 32 * hop), ("b", 27 * hop + 17)):
        t = np.arange(n) / sr
        x = 0.4 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 1330 * t + 0.5)
        x = x * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(n)
        out[name] = x.astype(np.float32)
    return out


def margins(model, latent, n_q):
    """Score gaps of each quantizer's nearest-code choice along the residual chain."""
    res = latent
    gaps = []
    for i in range(n_q):
        qz = model.quantizer.quantizers[i]
        proj = qz.in_proj(res)                       # (1, d, T)
        enc = F.normalize(proj[0].t())               # (T, d)
        cb = F.normalize(qz.codebook.weight)         # (N, d)
        dist = -(enc.pow(2).sum(1, keepdim=True) - 2 * enc @ cb.t()) + cb.pow(2).sum(1, keepdim=True).t()
        top = dist.topk(2, dim=1).values
        gaps.append((top[:, 0] - top[:, 1]).numpy())
        idx = dist.max(1)[1]
        res = res - qz.out_proj(qz.codebook(idx).t().unsqueeze(0))
    return np.stack(gaps)


def load_folded(src):
    """The checkpoint's weight norm (weight_g / weight_v) folded into plain
    weights, w = g * v / |v| (norm over all but the first axis), as
    tools/hf_dac_to_gguf.py folds it; a strict load so nothing stays random."""
    from safetensors.numpy import load_file
    cfg = DacConfig.from_pretrained(src)
    sd = load_file(os.path.join(src, "model.safetensors"))
    plain = {}
    for k, v in sd.items():
        if k.endswith("weight_g"):
            base = k[: -len("weight_g")]
            vv = sd[base + "weight_v"].astype(np.float64)
            norm = np.sqrt((vv ** 2).reshape(vv.shape[0], -1).sum(1)).reshape(-1, *([1] * (vv.ndim - 1)))
            plain[base + "weight"] = (v.astype(np.float64) * vv / norm).astype(np.float32)
        elif not k.endswith("weight_v"):
            plain[k] = v
    model = DacModel(cfg).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in plain.items()},
                          strict=True)
    return model


# DAC.speech.v1.0's strides and codebooks with narrow channels: the real
# layer pattern (strides 2, 4, 5, 8; 4 codebooks of 1024 x 8) in a small file
MID = dict(encoder_hidden_size=4, downsampling_ratios=[2, 4, 5, 8], decoder_hidden_size=32,
           upsampling_ratios=[8, 5, 4, 2], n_codebooks=4, codebook_size=1024, codebook_dim=8,
           hidden_size=64, sampling_rate=24000, hop_length=320)


def make_mid(d):
    """A seeded random DacModel of the MID shapes saved as a plain checkpoint."""
    from safetensors.torch import save_file
    torch.manual_seed(4321)
    cfg = DacConfig(**MID)
    model = DacModel(cfg).eval()
    g = torch.Generator().manual_seed(77)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha"):
                p.copy_(0.3 + 1.7 * torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "codebook" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(max(1, p[0].numel())))
    os.makedirs(d, exist_ok=True)
    save_file({k: v.detach().contiguous().clone() for k, v in model.state_dict().items()},
              os.path.join(d, "model.safetensors"))
    cfg.to_json_file(os.path.join(d, "config.json"))
    return model


def encode_all(model, out, prefix):
    cfg = model.config
    hop = int(np.prod(cfg.downsampling_ratios))
    meta = dict(torch=torch.__version__, transformers=transformers.__version__, hop=hop,
                n_codebooks=cfg.n_codebooks, hidden_size=cfg.hidden_size)
    for name, x in inputs(hop, cfg.sampling_rate).items():
        with torch.no_grad():
            xt = torch.from_numpy(x).reshape(1, 1, -1)
            latent = model.encoder(xt)
            enc = model.encode(xt)
            gaps = margins(model, latent, cfg.n_codebooks)
        codes = enc.audio_codes[0].tolist()
        base = os.path.join(out, f"{prefix}enc_{name}")
        x.astype("<f4").tofile(base + "_input.f32")
        latent[0].numpy().astype("<f4").tofile(base + "_latent.f32")
        enc.quantized_representation[0].numpy().astype("<f4").tofile(base + "_quant.f32")
        gaps.astype("<f4").tofile(base + "_margin.f32")
        with open(base + "_codes.json", "w") as f:
            json.dump(codes, f)
        meta[name] = dict(n_samples=int(x.size), n_frames=int(latent.shape[-1]),
                          min_margin=float(gaps.min()), latent_rms=float(latent.pow(2).mean().sqrt()))
    with open(os.path.join(out, f"{prefix}enc_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


def main():
    if sys.argv[1] == "--mid":   # --mid OUT_DIR: the MID checkpoint (OUT_DIR/mid) and its encodings
        out = sys.argv[2]
        os.makedirs(out, exist_ok=True)
        encode_all(make_mid(os.path.join(out, "mid")), out, "mid_")
        return
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    model = load_folded(src)
    # self-check: the committed decoder golden (same checkpoint) comes back
    fx = os.path.dirname(os.path.abspath(src))
    cpath, dpath = os.path.join(fx, "hf_codes.json"), os.path.join(fx, "hf_decode.f32")
    if os.path.exists(cpath) and os.path.exists(dpath):
        with torch.no_grad():
            y = model.decode(audio_codes=torch.tensor([json.load(open(cpath))])).audio_values
        ref = np.fromfile(dpath, dtype="<f4")
        diff = float(np.abs(y.numpy().reshape(-1) - ref).max())
        print("decoder self-check vs hf_decode.f32: max diff", diff)
        if diff > 1e-4:
            sys.exit("the folded checkpoint does not reproduce hf_decode.f32")
    encode_all(model, out, "")


if __name__ == "__main__":
    main()
