#!/bin/sh
# test_hf_gptoss_mxfp4.sh - tools/hf_to_gguf.py on a gpt-oss checkpoint with
# the hub's MXFP4 experts (*_blocks / *_scales, U8): a tiny random one
# (numpy, the golden fixture's tokenizer) and its dense twin holding
# transformers' dequantization of the same experts (value 2j in the low
# nibble, 2j + 1 in the high one, times 2^(scale - 127), transposed to
# [E, in, out]). The MXFP4 file's expert tensors, read back as ggml's
# block_mxfp4 (scale byte, value j low / j + 16 high, levels doubled times
# 2^(e - 128)), equal the twin's F32 ones exactly, and greedy text from the
# two files is the same.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
FIX=tests/fixtures/golden/gptoss
[ -f "$FIX/tokenizer.json" ] || { echo "no $FIX"; exit 77; }
D="$TMP/gptoss_mx"; rm -rf "$D"; mkdir -p "$D/mx" "$D/dense"
"$PYTHON" - "$FIX" "$D" <<'PY' || { echo "FAIL: making the checkpoints"; exit 1; }
import json, os, shutil, struct, sys
import numpy as np
fix, out = sys.argv[1:]
V, H, I, L, NH, NKV, HD, E = 325, 64, 64, 2, 4, 2, 32, 8
cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": V,
       "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
       "num_key_value_heads": NKV, "head_dim": HD, "num_local_experts": E, "num_experts_per_tok": 4,
       "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"],
       "attention_bias": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
       "tie_word_embeddings": False, "hidden_act": "silu",
       "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                           "original_max_position_embeddings": 4096, "rope_theta": 150000.0}}
rng = np.random.default_rng(11)
FP4 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
def deq(blocks, scales):
    v = np.empty(blocks.shape[:-1] + (32,), np.float32)
    v[..., 0::2] = FP4[blocks & 15]
    v[..., 1::2] = FP4[blocks >> 4]
    v *= np.exp2(scales.astype(np.float32) - 127)[..., None]
    return v.reshape(blocks.shape[0], blocks.shape[1], -1).transpose(0, 2, 1)
mx, dense = {}, {}
def both(name, *shape, s=0.1, base=0.0):
    mx[name] = dense[name] = (base + s * rng.standard_normal(shape)).astype(np.float32)
both("model.embed_tokens.weight", V, H, s=1.0); both("lm_head.weight", V, H)
both("model.norm.weight", H, base=1.0)
for l in range(L):
    p = f"model.layers.{l}."
    both(p + "input_layernorm.weight", H, base=1.0); both(p + "post_attention_layernorm.weight", H, base=1.0)
    for n, rows in (("q", NH * HD), ("k", NKV * HD), ("v", NKV * HD)):
        both(p + f"self_attn.{n}_proj.weight", rows, H); both(p + f"self_attn.{n}_proj.bias", rows)
    both(p + "self_attn.o_proj.weight", H, NH * HD); both(p + "self_attn.o_proj.bias", H)
    both(p + "self_attn.sinks", NH, s=1.0)
    both(p + "mlp.router.weight", E, H, s=0.8); both(p + "mlp.router.bias", E)
    both(p + "mlp.experts.gate_up_proj_bias", E, 2 * I); both(p + "mlp.experts.down_proj_bias", E, H)
    for n, rows, cols in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
        b = rng.integers(0, 256, (E, rows, cols // 32, 16), dtype=np.uint8)
        sc = rng.integers(121, 126, (E, rows, cols // 32), dtype=np.uint8)
        mx[p + f"mlp.experts.{n}_blocks"], mx[p + f"mlp.experts.{n}_scales"] = b, sc
        dense[p + f"mlp.experts.{n}"] = np.ascontiguousarray(deq(b, sc))
for sub, T in (("mx", mx), ("dense", dense)):
    d = os.path.join(out, sub)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(fix, f), d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    hdr, off, blobs = {}, 0, []
    for k, a in T.items():
        raw = a.tobytes()
        hdr[k] = {"dtype": "U8" if a.dtype == np.uint8 else "F32", "shape": list(a.shape),
                  "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
for sub in mx dense; do
    "$PYTHON" tools/hf_to_gguf.py "$D/$sub" "$D/$sub.gguf" --type f32 2>"$D/$sub.log" \
        || { echo "FAIL: converting $sub"; tail -3 "$D/$sub.log"; exit 1; }
done
"$PYTHON" - "$D/mx.gguf" "$D/dense.gguf" <<'PY' || { echo "FAIL: MXFP4 experts differ from the dense twin"; exit 1; }
import sys
sys.path.insert(0, "tools")
import numpy as np
import gguf
gguf.GGML_TYPES.setdefault(39, ("MXFP4", 32, 17))
a, b = gguf.GGUFReader(sys.argv[1]), gguf.GGUFReader(sys.argv[2])
K = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)
n = 0
for name, (t, shape, _) in a.tensors.items():
    if "_exps.weight" not in name:
        continue
    assert t == 39, f"{name}: type {t}, want MXFP4"
    blk = np.frombuffer(a.tensor_bytes(name), np.uint8).reshape(-1, 17)
    d = np.exp2(blk[:, 0].astype(np.float32) - 128)[:, None]
    x = np.concatenate([K[blk[:, 1:] & 15], K[blk[:, 1:] >> 4]], axis=1) * d
    y = np.frombuffer(b.tensor_bytes(name), "<f4")
    assert b.tensors[name][0] == 0 and x.size == y.size, name
    assert np.array_equal(x.reshape(-1), y), f"{name}: max diff {np.abs(x.reshape(-1) - y).max()}"
    n += 1
assert n == 6, f"{n} expert tensors"
PY
ta=$("$OMNI" run -m "$D/mx.gguf" -n 24 --temp 0 -p "Hello world! The quick" 2>/dev/null | od -An -c)
tb=$("$OMNI" run -m "$D/dense.gguf" -n 24 --temp 0 -p "Hello world! The quick" 2>/dev/null | od -An -c)
[ -n "$ta" ] && [ "$ta" = "$tb" ] || { echo "FAIL: greedy text differs between the MXFP4 and dense files"; exit 1; }
rm -rf "$D"
echo "gpt-oss MXFP4 checkpoint: ok"
