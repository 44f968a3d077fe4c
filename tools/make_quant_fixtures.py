#!/usr/bin/env python3
"""make_quant_fixtures.py - reference blocks for tests/test_quant.c from gguf-py.

Usage (gguf-py from a llama.cpp checkout kept outside the repo; needs numpy):
    /usr/bin/python3 tools/make_quant_fixtures.py /tmp/llama.cpp/gguf-py \
        [OUT_DIR=tests/fixtures/quant]

For every type gguf-py can quantize (mxfp4 included), a seeded matrix (mixed
block scales plus hand-made corner blocks) is quantized by gguf-py; for the
K and iq4 types, which it can only dequantize, blocks are random bytes with
sane fp16 scales (every scale and level bit pattern occurs). Each file
<type>.bin holds (little endian):
    magic "OMNIQF1\\0" | u32 ggml type | u32 rows | u32 cols | u32 input_rows
    f32 input[input_rows][cols]          (what gguf-py quantized)
    u8  blocks[rows][row_bytes]          (gguf-py's bytes, then random rows)
    f32 dequant[rows][cols]              (gguf-py's dequantization)
"""
import os
import sys

import numpy as np

if len(sys.argv) < 2:
    sys.exit("usage: make_quant_fixtures.py GGUF_PY_DIR [OUT_DIR]")
# gguf-py first: tools/gguf.py (our own GGUF module) would shadow its package
sys.path.insert(0, os.path.abspath(sys.argv[1]))
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

COLS = 256
QUANTIZED_ROWS = 2
RANDOM_ROWS = 1


def corner_blocks(rng):
    """32-element blocks that hit rounding ties, signs and degenerate ranges."""
    ties = np.array([127, 62.5, -62.5, 0.5, -0.5, 1.5, 2.5, -2.5] + [3.5] * 24, np.float32)
    neg_extreme = rng.standard_normal(32).astype(np.float32)
    neg_extreme[5] = -9.0
    pos_extreme = rng.standard_normal(32).astype(np.float32)
    pos_extreme[17] = 9.0
    constant = np.full(32, 0.75, np.float32)
    one_hot = np.zeros(32, np.float32)
    one_hot[3] = -1e-3
    zeros = np.zeros(32, np.float32)
    # 0.5-step ramps land exactly on rounding boundaries of the 4/5-bit types
    ramp = (np.arange(32, dtype=np.float32) - 16) * 0.5
    tiny = (rng.standard_normal(32) * 1e-6).astype(np.float32)
    return np.concatenate([ties, neg_extreme, pos_extreme, constant, one_hot, zeros, ramp, tiny])


def make_input(rng, qtype):
    n = QUANTIZED_ROWS * COLS
    scales = np.repeat(10.0 ** rng.uniform(-3, 2, n // 32), 32)
    x = (rng.standard_normal(n) * scales).astype(np.float32)
    x[: 8 * 32] = corner_blocks(rng)
    if qtype in (T.F16, T.BF16):
        special = [np.inf, -np.inf, 65520.0, -65504.0, 6e-8, -3e-8, 1e-40, 3.0e38]
        x[300:300 + len(special)] = special
        if qtype == T.BF16:
            x[320] = np.nan  # gguf-py quiets NaNs like ggml does
    return x.reshape(QUANTIZED_ROWS, COLS)


def random_fp16(rng, n, lo=-4, hi=-1, signed=True):
    v = 10.0 ** rng.uniform(lo, hi, n)
    if signed:
        v *= rng.choice([-1.0, 1.0], n)
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def random_blocks(rng, qtype, n_blocks):
    """Random bytes with the fp16 scale fields replaced by sane values."""
    _, type_size = GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    if qtype in (T.F16,):
        return random_fp16(rng, n_blocks, -3, 3)
    if qtype in (T.Q4_0, T.Q5_0, T.Q8_0):
        b[:, 0:2] = random_fp16(rng, n_blocks)
    elif qtype in (T.Q4_1, T.Q5_1):
        b[:, 0:2] = random_fp16(rng, n_blocks)
        b[:, 2:4] = random_fp16(rng, n_blocks)
    elif qtype in (T.Q4_K, T.Q5_K):
        b[:, 0:2] = random_fp16(rng, n_blocks, signed=False)
        b[:, 2:4] = random_fp16(rng, n_blocks, signed=False)
    elif qtype == T.Q6_K:
        b[:, 208:210] = random_fp16(rng, n_blocks, signed=False)
    elif qtype == T.Q2_K:       # scales[16] qs[64] d dmin
        b[:, 80:82] = random_fp16(rng, n_blocks, signed=False)
        b[:, 82:84] = random_fp16(rng, n_blocks, signed=False)
    elif qtype == T.Q3_K:       # hmask[32] qs[64] scales[12] d
        b[:, 108:110] = random_fp16(rng, n_blocks)
    elif qtype in (T.IQ4_NL, T.IQ4_XS):   # d first
        b[:, 0:2] = random_fp16(rng, n_blocks)
    elif qtype == T.MXFP4:      # e: E8M0 exponents, the denormal ones included
        b[:, 0] = rng.integers(0, 255, n_blocks, dtype=np.uint8)
        b[:4, 0] = [0, 1, 2, 254]
    elif qtype == T.BF16:
        # exponents in a sane range: drop the top exponent bits' NaN/Inf space
        v = (rng.standard_normal(n_blocks) * 10.0).astype(np.float32)
        b = (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    return b


def write_fixture(out_dir, name, qtype, x, blocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    rows = blocks.shape[0] * block_size // COLS
    blocks = blocks.reshape(rows, COLS // block_size * type_size)
    deq = dequantize(blocks, qtype).astype(np.float32).reshape(rows, COLS)
    in_rows = 0 if x is None else x.shape[0]
    path = os.path.join(out_dir, name + ".bin")
    with open(path, "wb") as f:
        f.write(b"OMNIQF1\0")
        f.write(np.array([int(qtype), rows, COLS, in_rows], dtype="<u4").tobytes())
        if x is not None:
            f.write(x.astype("<f4").tobytes())
        f.write(blocks.tobytes())
        f.write(deq.astype("<f4").tobytes())
    print(f"{path}: {rows} rows x {COLS}, {in_rows} quantized by gguf-py, "
          f"{os.path.getsize(path)} bytes")


def main():
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/quant"
    os.makedirs(out_dir, exist_ok=True)
    quantizable = {"f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0,
                   "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1}
    dequant_only = {"q4_K": T.Q4_K, "q5_K": T.Q5_K, "q6_K": T.Q6_K}
    # added later: appended so that the older files keep their seeds
    quantizable["mxfp4"] = T.MXFP4
    dequant_only.update({"q2_K": T.Q2_K, "q3_K": T.Q3_K, "iq4_nl": T.IQ4_NL, "iq4_xs": T.IQ4_XS})
    order = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K",
             "mxfp4", "q2_K", "q3_K", "iq4_nl", "iq4_xs"]
    types = {**quantizable, **dequant_only}
    for seed, name in enumerate(order):
        qtype = types[name]
        rng = np.random.default_rng(1234 + seed)
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        x = None
        parts = []
        if name in quantizable:
            x = make_input(rng, qtype)
            with np.errstate(over="ignore"):  # f16: 65520 -> inf on purpose
                q = np.ascontiguousarray(quantize(x, qtype)).view(np.uint8)
            parts.append(q.reshape(-1, type_size))
            n_random = RANDOM_ROWS * COLS // block_size
        else:
            n_random = (QUANTIZED_ROWS + RANDOM_ROWS) * COLS // block_size
        parts.append(random_blocks(rng, qtype, n_random))
        write_fixture(out_dir, name, qtype, x, np.concatenate(parts).astype(np.uint8))


if __name__ == "__main__":
    main()
