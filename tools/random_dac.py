#!/usr/bin/python3
"""random_dac.py - DAC decoder GGUFs with random weights (real or tiny shapes)
and a plain numpy reference decode, for benchmarks and for cross-checking
audio/codec/dac.c without torch.

    tools/random_dac.py --shape dac-24khz -o dac.gguf [--type f16] [--seed N]
    tools/random_dac.py --shape tiny -o t.gguf --frames 12 --codes-out c.json --ref-out r.f32
    tools/random_dac.py --shape tiny --safetensors DIR   # a fake HF checkpoint (converter test)

dac-24khz is ibm-research/DAC.speech.v1.0 (the codec of OuteTTS 1.0), from
its published config.json: 24 kHz, hidden_size 1024, decoder_hidden_size
1536, upsampling_ratios [8, 5, 4, 2] (hop 320: 75 frames/s), 4 codebooks of
1024 entries, codebook_dim 8. Only the quantizer and decoder are written
(the encoder is not needed to decode; --encoder adds it, with the quantizer's
in_proj, for voice-clone timings). tools/random_model --shape dac-24khz
comes here. The GGUF layout is tools/hf_dac_to_gguf.py's.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
from hf_dac_to_gguf import expected_decoder_shapes  # noqa: E402

SHAPES = {
    "dac-24khz": dict(encoder_hidden_size=64, hidden_size=1024, decoder_hidden_size=1536,
                      upsampling_ratios=[8, 5, 4, 2],
                      downsampling_ratios=[2, 4, 5, 8], n_codebooks=4, codebook_size=1024,
                      codebook_dim=8, sampling_rate=24000),
    "tiny": dict(hidden_size=16, decoder_hidden_size=32, upsampling_ratios=[2, 5, 4],
                 downsampling_ratios=[4, 5, 2], n_codebooks=3, codebook_size=64,
                 codebook_dim=4, sampling_rate=24000),
    # the tiny decoder with DAC.speech's codebooks: 2 of 1024 codes (OuteTTS tests)
    "tiny-1024": dict(hidden_size=16, decoder_hidden_size=32, upsampling_ratios=[2, 5, 4],
                      downsampling_ratios=[4, 5, 2], n_codebooks=2, codebook_size=1024,
                      codebook_dim=4, sampling_rate=24000),
}


def expected_encoder_shapes(hp):
    """The encoder's and the quantizer's in_proj tensors (transformers' names)."""
    c = hp.get("encoder_hidden_size", 4)
    s = {"encoder.conv1.weight": (c, 1, 7), "encoder.conv1.bias": (c,)}
    for b, stride in enumerate(hp["downsampling_ratios"]):
        p = f"encoder.block.{b}."
        for r in (1, 2, 3):
            u = f"{p}res_unit{r}."
            s[u + "snake1.alpha"] = (c,)
            s[u + "conv1.weight"] = (c, c, 7)
            s[u + "conv1.bias"] = (c,)
            s[u + "snake2.alpha"] = (c,)
            s[u + "conv2.weight"] = (c, c, 1)
            s[u + "conv2.bias"] = (c,)
        s[p + "snake1.alpha"] = (c,)
        s[p + "conv1.weight"] = (2 * c, c, 2 * stride)
        s[p + "conv1.bias"] = (2 * c,)
        c *= 2
    s["encoder.snake1.alpha"] = (c,)
    s["encoder.conv2.weight"] = (hp["hidden_size"], c, 3)
    s["encoder.conv2.bias"] = (hp["hidden_size"],)
    for q in range(hp["n_codebooks"]):
        s[f"quantizer.quantizers.{q}.in_proj.weight"] = (hp["codebook_dim"], hp["hidden_size"], 1)
        s[f"quantizer.quantizers.{q}.in_proj.bias"] = (hp["codebook_dim"],)
    return s


def random_weights(hp, seed, encoder=False):
    """name -> float32 array: weights ~ N(0, 1/fan_in), alphas in [0.3, 2], small biases."""
    rng = np.random.default_rng(seed)
    out = {}
    shapes = dict(expected_decoder_shapes(hp))
    if encoder:
        shapes.update(expected_encoder_shapes(hp))
    for name, shape in shapes.items():
        if name.endswith(".alpha"):
            a = 0.3 + 1.7 * rng.random(shape)
        elif name.endswith(".bias"):
            a = 0.05 * rng.standard_normal(shape)
        elif name.endswith("codebook.weight"):
            a = rng.standard_normal(shape)
        else:
            fan_in = shape[1] * shape[2] if "conv_t1" not in name else shape[0] * 2
            a = rng.standard_normal(shape) / np.sqrt(fan_in)
            if name == "decoder.conv2.weight":
                a *= 0.01   # keep the output off tanh's flat ends
        out[name] = a.astype(np.float32)
    return out


def write_gguf(path, hp, weights, type_name="f32"):
    gt = {"f32": gguf.GGML_F32, "f16": gguf.GGML_F16}[type_name]
    w = gguf.GGUFWriter(path)
    w.add("general.architecture", "dac")
    w.add("general.name", "random DAC")
    for k in ("sampling_rate", "hidden_size", "decoder_hidden_size", "n_codebooks",
              "codebook_size", "codebook_dim"):
        w.add(f"dac.{k}", hp[k], gguf.GGUF_UINT32)
    w.add("dac.upsampling_ratios", hp["upsampling_ratios"], gguf.GGUF_ARRAY, gguf.GGUF_UINT32)
    w.add("dac.downsampling_ratios", hp["downsampling_ratios"], gguf.GGUF_ARRAY, gguf.GGUF_UINT32)
    for name in sorted(weights):
        a = weights[name]
        small = a.ndim == 1 or name.endswith("codebook.weight")
        w.add_tensor(name, a, gguf.GGML_F32 if small else gt)
    w.write()


def write_safetensors(d, hp, weights):
    """A fake HF checkpoint: the same weights, convs split as weight_g / weight_v."""
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for name, a in weights.items():
        if name.endswith(".weight") and a.ndim == 3 and "codebook" not in name:
            norm = np.sqrt(np.sum(a.astype(np.float64) ** 2, axis=(1, 2), keepdims=True))
            tensors[name + "_g"] = norm.astype(np.float32)
            tensors[name + "_v"] = (a * 3.0).astype(np.float32)  # any scale: g carries it
        elif name.endswith(".alpha"):
            tensors[name] = a.reshape(1, -1, 1)
        else:
            tensors[name] = a
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    cfg = dict(hp, model_type="dac", architectures=["DacModel"], encoder_hidden_size=4)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


# ---- numpy reference (channels-first like torch; slow but plain) ----

def conv1d(x, w, b, dilation=1, pad=0):
    co, ci, k = w.shape
    t = x.shape[1] + 2 * pad - dilation * (k - 1)
    xp = np.pad(x, ((0, 0), (pad, pad)))
    y = np.zeros((co, t), np.float64)
    for j in range(k):
        y += w[:, :, j].astype(np.float64) @ xp[:, j * dilation:j * dilation + t]
    return y + b[:, None]


def conv_t1d(x, w, b, stride, pad):
    ci, co, k = w.shape
    n = x.shape[1]
    full = np.zeros((co, (n - 1) * stride + k), np.float64)
    for j in range(k):
        full[:, j:j + (n - 1) * stride + 1:stride] += w[:, :, j].T.astype(np.float64) @ x
    return full[:, pad:full.shape[1] - pad] + b[:, None]


def snake(x, alpha):
    a = alpha[:, None].astype(np.float64)
    return x + np.sin(a * x) ** 2 / (a + 1e-9)


def reference_decode(hp, wt, codes):
    """codes: [n_q][n_frames] ints -> float32 samples."""
    z = 0.0
    for i, row in enumerate(codes):
        q = f"quantizer.quantizers.{i}."
        e = wt[q + "codebook.weight"][np.asarray(row)].T          # (dim, T)
        z = z + conv1d(e, wt[q + "out_proj.weight"], wt[q + "out_proj.bias"])
    x = conv1d(z, wt["decoder.conv1.weight"], wt["decoder.conv1.bias"], pad=3)
    for bi, s in enumerate(hp["upsampling_ratios"]):
        p = f"decoder.block.{bi}."
        x = snake(x, wt[p + "snake1.alpha"])
        x = conv_t1d(x, wt[p + "conv_t1.weight"], wt[p + "conv_t1.bias"], s, (s + 1) // 2)
        for r, d in ((1, 1), (2, 3), (3, 9)):
            u = f"{p}res_unit{r}."
            y = conv1d(snake(x, wt[u + "snake1.alpha"]), wt[u + "conv1.weight"],
                       wt[u + "conv1.bias"], dilation=d, pad=3 * d)
            y = conv1d(snake(y, wt[u + "snake2.alpha"]), wt[u + "conv2.weight"], wt[u + "conv2.bias"])
            x = x + y
    x = snake(x, wt["decoder.snake1.alpha"])
    x = conv1d(x, wt["decoder.conv2.weight"], wt["decoder.conv2.bias"], pad=3)
    return np.tanh(x[0]).astype(np.float32)


def wanted(argv):
    """True when a random_model command line names one of these shapes."""
    for i, a in enumerate(argv):
        name = a.split("=", 1)[1] if a.startswith("--shape=") else \
            argv[i + 1] if a == "--shape" and i + 1 < len(argv) else None
        if name in SHAPES:
            return True
    return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("-o", "--out", "--output", dest="out")
    ap.add_argument("--type", choices=("f32", "f16"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--codes-out")
    ap.add_argument("--ref-out")
    ap.add_argument("--n-q", type=int, default=0, help="codebooks in the codes (default all)")
    ap.add_argument("--safetensors", help="also write a fake HF checkpoint directory")
    ap.add_argument("--encoder", action="store_true",
                    help="also the encoder and the quantizer's in_proj (voice-clone benchmarks)")
    a = ap.parse_args(argv)
    hp = SHAPES[a.shape]
    wt = random_weights(hp, a.seed, a.encoder)
    if a.out:
        write_gguf(a.out, hp, wt, a.type)
    if a.safetensors:
        write_safetensors(a.safetensors, hp, wt)
    if a.codes_out or a.ref_out:
        rng = np.random.default_rng(a.seed + 1)
        nq = a.n_q or hp["n_codebooks"]
        codes = rng.integers(0, hp["codebook_size"], (nq, a.frames)).tolist()
        if a.codes_out:
            with open(a.codes_out, "w") as f:
                json.dump(codes, f)
        if a.ref_out:
            reference_decode(hp, wt, codes).astype("<f4").tofile(a.ref_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
