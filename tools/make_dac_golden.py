#!/usr/bin/env python3
"""make_dac_golden.py - golden fixtures for the DAC decoder (audio/codec/dac.c)
from a tiny random transformers DacModel. Needs torch + transformers (run it
on a machine that has them); the outputs are what tests/test_dac.c reads.

    python3 tools/make_dac_golden.py OUT_DIR

Writes into OUT_DIR:
  wn/config.json, wn/model.safetensors   the model with weight norm applied to
                                         every conv (weight_g / weight_v keys,
                                         or parametrizations.* on new torch),
                                         the g's perturbed so folding matters
  plain/config.json, plain/model.safetensors  the same model, weight norm
                                         removed (plain .weight keys)
  codes.json        [n_codebooks][n_frames] fixed codes (ints)
  decode.f32        DacModel.decode(audio_codes=codes) as raw little-endian f32
  decode_2cb.f32    the same with only the first 2 codebooks (as OuteTTS uses)
  keys.txt          state-dict keys and shapes (for the record)
  meta.json         versions, shapes, lengths
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import DacConfig, DacModel

CFG = dict(
    encoder_hidden_size=4,
    downsampling_ratios=[4, 5, 2],
    decoder_hidden_size=32,
    upsampling_ratios=[2, 5, 4],   # an odd stride: its transposed conv drops a sample
    n_codebooks=3,
    codebook_size=64,
    codebook_dim=4,
    hidden_size=16,
    sampling_rate=24000,
    hop_length=40,
)
N_FRAMES = 24


def weight_norm_all(model):
    """Weight norm on every Conv1d / ConvTranspose1d (old-style API when present)."""
    mods = [m for m in model.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d))]
    if any(k.endswith("weight_g") or k.endswith("original0") for k in model.state_dict()):
        return mods   # this transformers version already applies it
    old = getattr(torch.nn.utils, "weight_norm", None)
    for m in mods:
        if old is not None:
            old(m)
        else:
            torch.nn.utils.parametrizations.weight_norm(m)
    return mods


def remove_weight_norm_all(mods):
    for m in mods:
        try:
            if hasattr(m, "weight_g"):
                torch.nn.utils.remove_weight_norm(m)
            else:
                torch.nn.utils.parametrize.remove_parametrizations(m, "weight")
        except (ValueError, AttributeError):
            pass   # a conv without weight norm


def save(model, cfg, d):
    os.makedirs(d, exist_ok=True)
    sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(d, "model.safetensors"))
    cfg.to_json_file(os.path.join(d, "config.json"))
    return sd


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    cfg = DacConfig(**CFG)
    model = DacModel(cfg).eval()
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha"):
                p.copy_(0.3 + 1.7 * torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "codebook" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(max(1, p[0].numel())))
    codes = torch.randint(0, CFG["codebook_size"], (1, CFG["n_codebooks"], N_FRAMES), generator=g)
    mods = weight_norm_all(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight_g") or name.endswith("original0"):
                p.mul_(0.5 + torch.rand(p.shape, generator=g))
    # Scale the last conv so that its output (before tanh) has a std of 0.5:
    # a saturated tanh would hide errors from the comparison.
    seen = []
    hook = model.decoder.conv2.register_forward_hook(lambda m, i, o: seen.append(float(o.std())))
    with torch.no_grad():
        model.decode(audio_codes=codes)
        hook.remove()
        c2 = model.decoder.conv2
        gain = c2.weight_g if hasattr(c2, "weight_g") else c2.parametrizations.weight.original0
        gain.mul_(0.5 / seen[0])
        model.decoder.conv2.bias.mul_(0.5 / seen[0])
    print("pre-tanh std before scaling", seen[0])

    with torch.no_grad():
        y = model.decode(audio_codes=codes).audio_values.float().cpu().numpy().reshape(-1)
        y2 = model.decode(audio_codes=codes[:, :2, :]).audio_values.float().cpu().numpy().reshape(-1)
    sd = save(model, cfg, os.path.join(out, "wn"))
    with open(os.path.join(out, "keys.txt"), "w") as f:
        for k, v in sd.items():
            f.write(f"{k} {tuple(v.shape)}\n")

    remove_weight_norm_all(mods)
    with torch.no_grad():
        y_plain = model.decode(audio_codes=codes).audio_values.float().cpu().numpy().reshape(-1)
    save(model, cfg, os.path.join(out, "plain"))
    print("plain vs weight-normed max diff", float(np.abs(y - y_plain).max()))

    y.astype("<f4").tofile(os.path.join(out, "decode.f32"))
    y2.astype("<f4").tofile(os.path.join(out, "decode_2cb.f32"))
    with open(os.path.join(out, "codes.json"), "w") as f:
        json.dump(codes[0].tolist(), f)
    meta = dict(torch=torch.__version__, transformers=transformers.__version__,
                n_frames=N_FRAMES, n_samples=int(y.size), n_samples_2cb=int(y2.size),
                rms=float(np.sqrt(np.mean(y ** 2))), config=CFG)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
