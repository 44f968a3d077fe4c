#!/usr/bin/python3
"""make_encoder_ref.py - tiny nomic-bert and jina-bert-v2 GGUFs with numpy reference outputs.

    tools/make_encoder_ref.py OUT_DIR [--case nomic|jina]

transformers has no NomicBert or JinaBert class without trust_remote_code, so
these two architectures are checked against the numpy forward below, written
from the architectures' definitions (nomic-ai's and Jina AI's modeling code
as llama.cpp reads their GGUFs):

  nomic-bert   token + token-type embeddings, LayerNorm; per layer a fused
               QKV projection (no biases), rotary positions in the NEOX
               layout (pairs (i, i + d/2), base rope.freq_base), softmax
               attention, output projection, post-norm residual; SwiGLU MLP
               down(silu(gate x) * up x); post-norm residual.
  jina-bert-v2 token + token-type embeddings, LayerNorm; per layer Q/K/V with
               biases and a LayerNorm on Q and on K, ALiBi attention bias
               -slope_h |i - j| (slopes of max_bias 8), output projection,
               post-norm residual; GEGLU MLP down(gelu(gate x) * up x) + b;
               post-norm residual.

jina_fused is jina with gate and up stored as one ffn_up of 2F rows (gate
first), as newer llama.cpp files keep jina's gated_layers. broken writes
hand-broken nomic-bert files embed-broken-<n>.gguf and embed-broken.txt
(file, text the loader's error must contain) for tests/test_bert.c.

Writes OUT_DIR/embed-<case>-f32.gguf and OUT_DIR/embed-<case>.json: token
ids, type ids, and the normalized CLS and mean vectors of each input. The
weights come from a seeded numpy RandomState, so the files are the same on
every run. Needs numpy only.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

H, N_HEAD, F, N_LAYER, N_CTX, EPS = 32, 4, 48, 2, 256, 1e-12
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = "the quick brown fox jumps over lazy dog hello world a is of and to in".split()
TOKENS = SPECIALS + ["\u2581" + w for w in WORDS] + list("abcdefghijklmnopqrstuvwxyz")


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def rope_neox(x, base):
    """x (T, n_head, d): pairs (i, i + d/2) turn by pos * base^(-2i/d)."""
    T, _, d = x.shape
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = np.arange(T)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def alibi_slopes(n_head, max_bias=8.0):
    n2 = 2 ** int(math.floor(math.log2(n_head)))
    m0, m1 = 2 ** (-max_bias / n2), 2 ** (-(max_bias / 2) / n2)
    return np.array([m0 ** (h + 1) if h < n2 else m1 ** (2 * (h - n2) + 1) for h in range(n_head)])


def attention(q, k, v, bias=None):
    T, d = q.shape[0], H // N_HEAD
    q, k, v = (a.reshape(T, N_HEAD, d).transpose(1, 0, 2) for a in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    if bias is not None:
        s = s + bias
    return (softmax(s) @ v).transpose(1, 0, 2).reshape(T, H)


def forward(case, W, ids, types, rope_base):
    x = W["token_embd.weight"][ids] + W["token_types.weight"][types]
    x = layer_norm(x, W["token_embd_norm.weight"], W["token_embd_norm.bias"])
    T = len(ids)
    for i in range(N_LAYER):
        p = lambda n: W[f"blk.{i}.{n}"]  # noqa: E731
        if case == "nomic":
            qkv = x @ p("attn_qkv.weight").T
            q, k, v = qkv[:, :H], qkv[:, H:2 * H], qkv[:, 2 * H:]
            d = H // N_HEAD
            q = rope_neox(q.reshape(T, N_HEAD, d), rope_base).reshape(T, H)
            k = rope_neox(k.reshape(T, N_HEAD, d), rope_base).reshape(T, H)
            a = attention(q, k, v)
            h = a @ p("attn_output.weight").T
        else:
            q = x @ p("attn_q.weight").T + p("attn_q.bias")
            k = x @ p("attn_k.weight").T + p("attn_k.bias")
            v = x @ p("attn_v.weight").T + p("attn_v.bias")
            q = layer_norm(q, p("attn_q_norm.weight"), p("attn_q_norm.bias"))
            k = layer_norm(k, p("attn_k_norm.weight"), p("attn_k_norm.bias"))
            dist = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
            bias = -alibi_slopes(N_HEAD)[:, None, None] * dist[None]
            a = attention(q, k, v, bias)
            h = a @ p("attn_output.weight").T + p("attn_output.bias")
        x = layer_norm(x + h, p("attn_output_norm.weight"), p("attn_output_norm.bias"))
        up, gate = x @ p("ffn_up.weight").T, x @ p("ffn_gate.weight").T
        act = silu(gate) if case == "nomic" else gelu(gate)
        h = (act * up) @ p("ffn_down.weight").T
        if case == "jina":
            h = h + p("ffn_down.bias")
        x = layer_norm(x + h, p("layer_output_norm.weight"), p("layer_output_norm.bias"))
    return x


def weights(case, rng):
    V = len(TOKENS)
    W = {}

    def mat(name, rows, cols, scale=None):
        W[name] = rng.standard_normal((rows, cols)) * (scale or 1.0 / math.sqrt(cols))

    def norm(name, n):
        W[name + ".weight"] = 1.0 + 0.2 * rng.standard_normal(n)
        W[name + ".bias"] = 0.2 * rng.standard_normal(n)

    mat("token_embd.weight", V, H, 1.0)
    mat("token_types.weight", 2, H, 0.5)
    norm("token_embd_norm", H)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        if case == "nomic":
            mat(b + "attn_qkv.weight", 3 * H, H, 0.5)
            mat(b + "attn_output.weight", H, H)
        else:
            for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
                mat(b + n + ".weight", H, H, 0.5 if n != "attn_output" else None)
                W[b + n + ".bias"] = 0.2 * rng.standard_normal(H)
            norm(b + "attn_q_norm", H)
            norm(b + "attn_k_norm", H)
        norm(b + "attn_output_norm", H)
        mat(b + "ffn_up.weight", F, H)
        mat(b + "ffn_gate.weight", F, H)
        mat(b + "ffn_down.weight", H, F)
        if case == "jina":
            W[b + "ffn_down.bias"] = 0.2 * rng.standard_normal(H)
        norm(b + "layer_output_norm", H)
    # what the file stores (float32) is what the reference runs on
    return {k: v.astype(np.float32).astype(np.float64) for k, v in W.items()}


def write_gguf(path, case, W, fused, rope_base, kv_edit=None, tensor_edit=None):
    """The GGUF of weights W; kv_edit {key: value or None (drop)} and
    tensor_edit {name: array or None (drop)} break it on purpose."""
    arch = {"nomic": "nomic-bert", "jina": "jina-bert-v2"}[case]
    kv_edit, tensor_edit = kv_edit or {}, tensor_edit or {}
    kv = [("general.architecture", arch, None), ("general.name", f"tiny-{arch}", None),
          (f"{arch}.context_length", N_CTX, gguf.GGUF_UINT32),
          (f"{arch}.embedding_length", H, gguf.GGUF_UINT32),
          (f"{arch}.feed_forward_length", F, gguf.GGUF_UINT32),
          (f"{arch}.block_count", N_LAYER, gguf.GGUF_UINT32),
          (f"{arch}.attention.head_count", N_HEAD, gguf.GGUF_UINT32),
          (f"{arch}.attention.layer_norm_epsilon", EPS, gguf.GGUF_FLOAT32),
          (f"{arch}.attention.causal", False, None),
          (f"{arch}.pooling_type", 1, gguf.GGUF_UINT32)]
    if case == "nomic":
        kv.append((f"{arch}.rope.freq_base", rope_base, gguf.GGUF_FLOAT32))
    kv += [("general.file_type", 0, gguf.GGUF_UINT32), ("tokenizer.ggml.model", "bert", None),
           ("tokenizer.ggml.tokens", TOKENS, None)]
    w = gguf.GGUFWriter(path + ".tmp")
    for key, value, vtype in kv:
        value = kv_edit.get(key, value)
        if value is not None:
            w.add(key, value, vtype)
    for key, value in kv_edit.items():
        if value is not None and key not in {k for k, _, _ in kv}:
            w.add(key, value)
    w.add("tokenizer.ggml.token_type", [3 if t in SPECIALS else 1 for t in TOKENS],
          gguf.GGUF_ARRAY, gguf.GGUF_INT32)
    w.add("tokenizer.ggml.token_type_count", 2, gguf.GGUF_UINT32)
    for key, tok in (("cls_token_id", "[CLS]"), ("seperator_token_id", "[SEP]"),
                     ("padding_token_id", "[PAD]"), ("unknown_token_id", "[UNK]"),
                     ("mask_token_id", "[MASK]")):
        v = kv_edit.get(f"tokenizer.ggml.{key}", TOKENS.index(tok))
        if v is not None:
            w.add(f"tokenizer.ggml.{key}", v, gguf.GGUF_UINT32)
    for name, a in W.items():
        if fused and name.endswith("ffn_gate.weight"):
            continue
        if fused and name.endswith("ffn_up.weight"):
            # gated_layers whole: the gate's rows first, then up's
            a = np.concatenate([W[name.replace("ffn_up", "ffn_gate")], a])
        a = tensor_edit.get(name, a)
        if a is not None:
            w.add_tensor(name, a.astype(np.float32))
    w.write()
    os.replace(path + ".tmp", path)


# Hand-broken nomic-bert files: (what is broken, the text the loader's error must hold).
BROKEN = [
    ({"kv": {"nomic-bert.pooling_type": 9}}, "pooling_type"),
    ({"kv": {"nomic-bert.attention.head_count": 5}}, "heads"),
    ({"kv": {"nomic-bert.attention.causal": True}}, "causal"),
    ({"kv": {"general.architecture": "roberta"}}, "roberta"),
    ({"kv": {"nomic-bert.context_length": None}}, "context_length"),
    ({"kv": {"nomic-bert.embedding_length": 0}}, "embedding_length"),
    ({"kv": {"nomic-bert.rope.freq_base": 0.5}}, "freq_base"),
    ({"kv": {"nomic-bert.attention.layer_norm_epsilon": 5.0}}, "layer_norm_epsilon"),
    ({"kv": {"tokenizer.ggml.cls_token_id": 9999}}, "cls_token_id"),
    ({"kv": {"tokenizer.ggml.model": None}}, "tokenizer.ggml.model"),
    ({"tensors": {"blk.1.ffn_gate.weight": None}}, "blk.1.ffn_gate.weight"),
    ({"tensors": {"blk.0.attn_qkv.weight": np.zeros((2 * H, H))}}, "blk.0.attn_qkv.weight"),
    ({"tensors": {"token_embd_norm.weight": np.ones(H + 1)}}, "token_embd_norm.weight"),
    ({"tensors": {"token_types.weight": np.zeros((40, H))}}, "token_types"),
    ({"tensors": {"token_embd.weight": np.zeros((10, H))}}, "token_embd.weight"),
    ({"tensors": {"blk.1.layer_output_norm.weight": None}}, "blk.1.layer_output_norm.weight"),
]


def build_broken(out_dir):
    W = weights("nomic", np.random.RandomState(5))
    lines = []
    for i, (edit, needle) in enumerate(BROKEN):
        name = f"embed-broken-{i}.gguf"
        write_gguf(os.path.join(out_dir, name), "nomic", W, False, 1000.0, edit.get("kv"),
                   edit.get("tensors"))
        lines.append(f"{name}\t{needle}\n")
    with open(os.path.join(out_dir, "embed-broken.txt"), "w") as f:
        f.writelines(lines)


def build(case, out_dir, seed):
    fused = case == "jina_fused"
    case = "jina" if fused else case
    rng = np.random.RandomState(seed)
    W = weights(case, rng)
    arch = {"nomic": "nomic-bert", "jina": "jina-bert-v2"}[case]
    rope_base = 1000.0
    tag = "jina_fused" if fused else case
    path = os.path.join(out_dir, f"embed-{tag}-f32.gguf")
    write_gguf(path, case, W, fused, rope_base)

    cases = []
    V = len(TOKENS)
    # 200 tokens: more than one 128-row block of attention queries
    for n, pair_at in ((7, None), (33, 20), (100, None), (200, 150)):
        ids = [2] + list(rng.randint(5, V, size=n - 2)) + [3]
        types = [0] * n if pair_at is None else [0] * pair_at + [1] * (n - pair_at)
        x = forward(case, W, np.array(ids), np.array(types), rope_base)
        cls = x[0] / np.linalg.norm(x[0])
        mean = x.mean(0)
        mean = mean / np.linalg.norm(mean)
        cases.append({"ids": [int(i) for i in ids], "type_ids": types,
                      "cls": [float(v) for v in cls], "mean": [float(v) for v in mean]})
    with open(os.path.join(out_dir, f"embed-{tag}.json"), "w") as f:
        json.dump({"arch": arch, "cases": cases, "seed": seed}, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--case", action="append", choices=["nomic", "jina", "jina_fused", "broken"])
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for case in args.case or ["nomic", "jina", "jina_fused", "broken"]:
        if case == "broken":
            build_broken(args.out_dir)
        else:
            build(case, args.out_dir, 777 + 100 * ["nomic", "jina", "jina_fused"].index(case))


if __name__ == "__main__":
    main()
