"""random_lowbit.py - the low-bit and bf16 download types for tools/random_model.

random_model imports this module for its --type q2_k, q3_k_m, iq4_nl, iq4_xs,
mxfp4 and bf16 files: the per-tensor type mix of llama.cpp's quantizer for
those file types (llama_tensor_get_type, simplified to the dense models
random_model writes) and generators of random blocks whose dequantized
values have a standard deviation near WEIGHT_STD, as random_model's own
generators do (layouts: src/core/quant_lowbit.h).
"""
import numpy as np

import gguf

GGML_Q2_K, GGML_Q3_K, GGML_IQ4_NL, GGML_IQ4_XS, GGML_BF16, GGML_MXFP4 = 10, 11, 20, 23, 30, 39
GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q8_0, GGML_F16 = 12, 13, 14, 8, 1

# tools/gguf.py's writer sizes tensors from this table
gguf.GGML_TYPES.setdefault(GGML_IQ4_NL, ("IQ4_NL", 32, 18))
gguf.GGML_TYPES.setdefault(GGML_IQ4_XS, ("IQ4_XS", 256, 136))
gguf.GGML_TYPES.setdefault(GGML_MXFP4, ("MXFP4", 32, 17))

# --type -> (default type of 2-D weights, general.file_type = llama_ftype)
FTYPES = {
    "q2_k": (GGML_Q2_K, 10),
    "q3_k_m": (GGML_Q3_K, 12),
    "iq4_nl": (GGML_IQ4_NL, 25),
    "iq4_xs": (GGML_IQ4_XS, 30),
    "mxfp4": (GGML_MXFP4, 38),   # llama.cpp's MOSTLY_MXFP4_MOE; every matrix here
    "bf16": (GGML_BF16, 32),
}

# rows that are not a multiple of 256 (llama.cpp's fallback): the 2- and
# 3-bit K types and iq4_xs become iq4_nl; q4_K/q5_K/q6_K as random_model does
FALLBACK = {GGML_Q2_K: GGML_IQ4_NL, GGML_Q3_K: GGML_IQ4_NL, GGML_IQ4_XS: GGML_IQ4_NL,
            GGML_Q4_K: 6, GGML_Q5_K: 7, GGML_Q6_K: GGML_Q8_0}

IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      np.float32)
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)


def tensor_type(name, cols, ftype, layer, n_layer, tied, use_more_bits):
    """The type llama.cpp's quantizer gives a 2-D tensor in a file of ftype."""
    base = FTYPES[ftype][0]
    if ftype == "bf16":
        return GGML_BF16
    t = base
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        t = GGML_Q8_0 if ftype == "mxfp4" else GGML_Q6_K
    elif ftype == "q2_k":
        # Q2_K files: attn_v, ffn_down and attn_output one step up
        if name.endswith((".attn_v.weight", ".ffn_down.weight", ".attn_output.weight")):
            t = GGML_Q3_K
    elif ftype == "q3_k_m":
        if name.endswith(".attn_v.weight"):
            t = GGML_Q5_K if layer < 2 else GGML_Q4_K
        elif name.endswith(".ffn_down.weight"):
            t = GGML_Q5_K if layer < n_layer // 16 else GGML_Q4_K if use_more_bits(layer, n_layer) else GGML_Q3_K
        elif name.endswith(".attn_output.weight"):
            t = GGML_Q4_K
    blck = gguf.GGML_TYPES[t][1]
    if cols % blck:
        t = FALLBACK.get(t, t)
        if cols % gguf.GGML_TYPES[t][1]:
            t = GGML_F16
    return t


def _f16(values):
    return np.asarray(values, np.float32).astype("<f2").view(np.uint8).reshape(-1, 2)


def _blocks(rng, n, nbytes):
    return rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)


def gen_q2_k(rng, n, std):
    """scales[16] qs[64] d dmin: min nibble = scale nibble and dmin = 1.5 d
    centre q in 0..3 (value d sc (q - 1.5), std d sc 1.118)."""
    b = _blocks(rng, n, 84)
    sc = rng.integers(8, 16, size=(n, 16), dtype=np.uint8)
    b[:, 0:16] = sc | (sc << 4)
    d = std / (11.5 * 1.118) * rng.uniform(0.75, 1.25, n)
    b[:, 80:82] = _f16(d)
    b[:, 82:84] = _f16(1.5 * _f16(d).view("<f2").astype(np.float32).ravel())
    return b


def gen_q3_k(rng, n, std):
    """hmask[32] qs[64] scales[12] d: signed 6-bit scales 8..23 (stored +32),
    q in -4..3 (std 2.29)."""
    b = _blocks(rng, n, 110)
    u = rng.integers(40, 56, size=(n, 16), dtype=np.uint8)
    sc = np.zeros((n, 12), np.uint8)
    sc[:, 0:8] = (u[:, 0:8] & 15) | ((u[:, 8:16] & 15) << 4)
    for i in range(16):
        sc[:, 8 + i % 4] |= ((u[:, i] >> 4) << (2 * (i // 4))).astype(np.uint8)
    b[:, 96:108] = sc
    b[:, 108:110] = _f16(std / (16.0 * 2.29) * rng.uniform(0.75, 1.25, n))
    return b


def gen_iq4_nl(rng, n, std):
    b = _blocks(rng, n, 18)                       # d, qs[16]
    b[:, 0:2] = _f16(std / float(IQ4_LEVELS.std()) * rng.uniform(0.75, 1.25, n))
    return b


def gen_iq4_xs(rng, n, std):
    """d, scales_h, scales_l[4], qs[128]: sub-block scales 8..23 (stored +32)."""
    b = _blocks(rng, n, 136)
    u = rng.integers(40, 56, size=(n, 8)).astype(np.uint16)
    b[:, 0:2] = _f16(std / (16.0 * float(IQ4_LEVELS.std())) * rng.uniform(0.75, 1.25, n))
    h = np.zeros(n, np.uint16)
    for k in range(8):
        h |= (u[:, k] >> 4) << (2 * k)
    b[:, 2:4] = h.astype("<u2").view(np.uint8).reshape(n, 2)
    b[:, 4:8] = ((u[:, 0::2] & 15) | ((u[:, 1::2] & 15) << 4)).astype(np.uint8)
    return b


def gen_mxfp4(rng, n, std):
    """e, qs[16]: value 2^(e - 128) level; e within one of std/std(levels)."""
    b = _blocks(rng, n, 17)
    e = np.round(np.log2(std / float(MXFP4_LEVELS.std()))) + 128
    b[:, 0] = (e + rng.integers(-1, 2, n)).astype(np.uint8)
    return b


def gen_bf16(rng, n, std):
    """n bf16 values (round to nearest even), as (n, 2) bytes."""
    x = (rng.standard_normal(n, dtype=np.float32) * std).view(np.uint32)
    x = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    return x.astype("<u2").view(np.uint8).reshape(n, 2)


def generators(std):
    """ggml type -> gen(rng, n_blocks) for random_model's QUANT_GEN."""
    def bind(f):
        return lambda rng, n: f(rng, n, std)
    return {GGML_Q2_K: bind(gen_q2_k), GGML_Q3_K: bind(gen_q3_k), GGML_IQ4_NL: bind(gen_iq4_nl),
            GGML_IQ4_XS: bind(gen_iq4_xs), GGML_MXFP4: bind(gen_mxfp4), GGML_BF16: bind(gen_bf16)}
