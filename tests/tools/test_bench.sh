#!/bin/sh
# test_bench.sh - `omniserve bench` on a 1-layer random SmolLM2-shaped model:
# the JSON line parses and has every field with sane values, the human report
# names prompt and generation speed, chunked prefill (--batch) works, and bad
# arguments or a missing file fail with a message (exit 2 / 1).
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
[ -d ../shared/vocab ] || { echo "no ../shared/vocab"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

f="$TMP/bench_smollm.gguf"
tools/random_model --shape smollm2-135m --type q8_0 --layers 1 -o "$f" 2>"$TMP/bench.err" \
    || { echo "FAIL: random_model exited $?"; cat "$TMP/bench.err"; exit 1; }

# --- JSON only: one line on stdout with every field ---
"$OMNI" bench -m "$f" -p 16 -n 4 --reps 2 --threads 2 --batch 5 --json >"$TMP/bench.out" 2>"$TMP/bench.err" \
    || { fail "bench exited $?"; cat "$TMP/bench.err"; }
[ "$(wc -l < "$TMP/bench.out")" -eq 1 ] || fail "--json printed more than one line"
grep -q "loading" "$TMP/bench.err" || fail "no load progress on stderr"
"$PYTHON" - "$TMP/bench.out" "$f" <<'PY' || fail "JSON line"
import json, sys
line = open(sys.argv[1]).read()
j = json.loads(line)
want = {"model": sys.argv[2], "arch": "llama", "n_layer": 1, "threads": 2, "p": 16, "n": 4, "reps": 2}
bad = [f"{k}: {j.get(k)!r}, want {v!r}" for k, v in want.items() if j.get(k) != v]
for k in ("pp_tok_s", "tg_tok_s", "load_s", "weight_bytes"):
    if not isinstance(j.get(k), (int, float)) or j[k] < 0 or (k != "load_s" and j[k] <= 0):
        bad.append(f"{k}: {j.get(k)!r}")
if j.get("type_mix") != {"f32": 3, "q8_0": 8}:
    bad.append(f"type_mix: {j.get('type_mix')!r}")
if j.get("cpu") not in ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "amx"):
    bad.append(f"cpu: {j.get('cpu')!r}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY

# --- human report: speeds, then the same JSON line last ---
"$OMNI" bench -m "$f" -p 8 -n 2 --reps 1 --threads 1 >"$TMP/bench.out" 2>&1 || fail "bench (human) exited $?"
grep -q "^pp8 .* tok/s" "$TMP/bench.out" || fail "no pp8 line"
grep -q "^tg2 .* tok/s" "$TMP/bench.out" || fail "no tg2 line"
tail -n 1 "$TMP/bench.out" | grep -q '^{"model": ' || fail "last line is not the JSON line"
[ $fails -eq 0 ] || cat "$TMP/bench.out"

# --- errors ---
bad() { # bad RC TEXT ARGS...
    rc_want=$1; text=$2; shift 2
    "$OMNI" bench "$@" >"$TMP/bench.out" 2>&1; rc=$?
    [ $rc -eq "$rc_want" ] || fail "bench $* exited $rc, want $rc_want"
    grep -qF -- "$text" "$TMP/bench.out" || { fail "bench $* did not say '$text'"; cat "$TMP/bench.out"; }
}
bad 2 "-m FILE.gguf is required" -p 8
bad 2 "an integer in 1.." -m "$f" -p 0
bad 2 "not a thread count or a list like 1,2,4" -m "$f" --threads x
bad 2 "not a thread count" -m "$f" --threads 0,2
bad 2 "unknown option" -m "$f" --frobnicate 1
bad 1 "$TMP/none.gguf" -m "$TMP/none.gguf"

# --- NaN weights must be reported, not timed: poison output_norm.weight ---
"$PYTHON" - "$f" <<'PY' || fail "could not poison $f"
import sys
sys.path.insert(0, "tools")
import gguf
t, shape, off = gguf.GGUFReader(sys.argv[1]).tensors["output_norm.weight"]
with open(sys.argv[1], "r+b") as fh:
    fh.seek(off)
    fh.write(b"\x00\x00\xc0\x7f" * shape[0])   # f32 quiet NaN
PY
bad 1 "non-finite logits" -m "$f" -p 4 -n 2 --reps 1
rm -f "$f"
[ $fails -eq 0 ]
