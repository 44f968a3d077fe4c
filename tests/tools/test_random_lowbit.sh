#!/bin/sh
# test_random_lowbit.sh - models in the low-bit download types load and run:
# tools/random_model writes 1-layer qwen3-0.6b files (rows multiples of 256)
# as q2_k, q3_k_m, iq4_nl, iq4_xs and mxfp4, and a smollm2-135m one as bf16;
# each has llama.cpp's per-tensor types for its file type (tools/gguf.py),
# `omniserve inspect` lists the types as supported, and `omniserve bench`
# runs prefill and decode (greedy run prints tokens).
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -d ../shared/vocab ] || { echo "no ../shared/vocab"; exit 77; }
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

for st in qwen3-0.6b:q2_k qwen3-0.6b:q3_k_m qwen3-0.6b:iq4_nl qwen3-0.6b:iq4_xs \
          qwen3-0.6b:mxfp4 smollm2-135m:bf16; do
    shape=${st%%:*}; type=${st##*:}; f="$TMP/rlb_$type.gguf"
    tools/random_model --shape "$shape" --type "$type" --layers 1 -o "$f" 2>"$f.err" \
        || { fail "random_model $st exited $?"; cat "$f.err"; continue; }
    "$PYTHON" - "$f" "$type" <<'PY' || fail "$st: tensor types"
import sys
sys.path.insert(0, "tools")
import gguf
import random_lowbit  # noqa: F401  (adds the iq4 / mxfp4 ids to GGML_TYPES)

path, qtype = sys.argv[1:]
r = gguf.GGUFReader(path)
got = {n: gguf.GGML_TYPES[t][0] for n, (t, s, _) in r.tensors.items()}
# 1 layer: llama.cpp's use_more_bits(0, 1) holds (0 >= 7 * 1 // 8)
want = {
    "q2_k": dict(token_embd="Q6_K", blk__0__attn_q="Q2_K", blk__0__ffn_gate="Q2_K",
                 blk__0__attn_v="Q3_K", blk__0__ffn_down="Q3_K", blk__0__attn_output="Q3_K"),
    "q3_k_m": dict(token_embd="Q6_K", blk__0__attn_q="Q3_K", blk__0__ffn_up="Q3_K",
                   blk__0__attn_v="Q5_K", blk__0__ffn_down="Q4_K", blk__0__attn_output="Q4_K"),
    "iq4_nl": dict(token_embd="Q6_K", blk__0__attn_q="IQ4_NL", blk__0__ffn_down="IQ4_NL"),
    "iq4_xs": dict(token_embd="Q6_K", blk__0__attn_q="IQ4_XS", blk__0__ffn_down="IQ4_XS"),
    "mxfp4": dict(token_embd="Q8_0", blk__0__attn_q="MXFP4", blk__0__ffn_down="MXFP4"),
    "bf16": dict(token_embd="BF16", blk__0__attn_q="BF16", blk__0__ffn_down="BF16"),
}[qtype]
bad = [f"{k}: {got.get(k.replace('__', '.') + '.weight')}, want {v}" for k, v in want.items()
       if got.get(k.replace("__", ".") + ".weight") != v]
bad += [f"{n}: 1-D {t}" for n, t in got.items() if n.endswith("norm.weight") and t != "F32"]
for b in bad:
    print(f"  {qtype}: {b}")
sys.exit(1 if bad else 0)
PY
    "$OMNI" inspect "$f" >"$f.inspect" 2>&1 || fail "$st: inspect exited $?"
    grep -q "not supported" "$f.inspect" && { fail "$st: inspect says not supported"; grep "not supported" "$f.inspect"; }
    "$OMNI" bench -m "$f" -p 40 -n 4 --reps 1 --threads 1 --no-bandwidth --json >"$f.bench" 2>&1 \
        || { fail "$st: bench exited $?"; tail -n 5 "$f.bench"; }
    grep -q '"pp_tok_s": [0-9]' "$f.bench" && grep -q '"tg_tok_s": [0-9]' "$f.bench" \
        || fail "$st: no bench result"
    out=$("$OMNI" run -m "$f" -p "hello" -n 6 --temp 0 2>"$f.run") || { fail "$st: run exited $?"; tail -n 3 "$f.run"; }
    [ "${#out}" -gt 5 ] || fail "$st: run printed '$out'"
    rm -f "$f" "$f.err" "$f.inspect" "$f.bench" "$f.run"
done
[ $fails -eq 0 ] && echo "ok" && exit 0
exit 1
