#!/bin/sh
# test_bench_engine.sh - `omniserve bench-engine` on a 1-layer random
# SmolLM2-shaped model: one JSON object per concurrency level with every key,
# cold/warm TTFT and prefix reuse with --shared-prefix, zero mismatches with
# --verify --deterministic, the human table, and bad arguments (exit 2 / 1).
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
[ -d ../shared/vocab ] || { echo "no ../shared/vocab"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

f="$TMP/bench_engine.gguf"
tools/random_model --shape smollm2-135m --type q8_0 --layers 1 -o "$f" 2>"$TMP/be.err" \
    || { echo "FAIL: random_model exited $?"; cat "$TMP/be.err"; exit 1; }

# --- JSON: one object per level ---
"$OMNI" bench-engine -m "$f" --concurrency 1,4 --prompt-tokens 20 --gen-tokens 6 \
    --shared-prefix 12 --kv-block-size 4 --kv-memory 16MiB --threads 2 --verify \
    --deterministic --json >"$TMP/be.out" 2>"$TMP/be.err" \
    || { fail "bench-engine exited $?"; cat "$TMP/be.err"; }
"$PYTHON" - "$TMP/be.out" <<'PY' || fail "JSON lines"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
bad = []
if len(lines) != 2:
    bad.append(f"{len(lines)} lines, want 2")
for want_c, line in zip((1, 4), lines):
    j = json.loads(line)
    if j.get("concurrency") != want_c:
        bad.append(f"concurrency {j.get('concurrency')!r}, want {want_c}")
    for k in ("aggregate_tok_s", "per_seq_tok_s", "prompt_tok_s", "ttft_ms_p50", "ttft_ms_p95",
              "ttft_ms_cold", "ttft_ms_warm"):
        if not isinstance(j.get(k), (int, float)) or j[k] <= 0:
            bad.append(f"c={want_c} {k}: {j.get(k)!r}")
    if j.get("mismatches") != 0:
        bad.append(f"c={want_c} mismatches: {j.get('mismatches')!r}")
    # 12 shared tokens = 3 full blocks of 4, reused by every request after the cold one
    if j.get("cached_tokens") != 12 * want_c:
        bad.append(f"c={want_c} cached_tokens: {j.get('cached_tokens')!r}, want {12 * want_c}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY

# --- human table ---
"$OMNI" bench-engine -m "$f" --concurrency 2 --prompt-tokens 8 --gen-tokens 3 --threads 1 \
    >"$TMP/be.out" 2>&1 || fail "bench-engine (table) exited $?"
grep -q "agg tok/s" "$TMP/be.out" || fail "no table header"
grep -Eq "^ +2 +[0-9]" "$TMP/be.out" || fail "no row for concurrency 2"
[ $fails -eq 0 ] || cat "$TMP/be.out"

# --- errors ---
bad() { # bad RC TEXT ARGS...
    rc_want=$1; text=$2; shift 2
    "$OMNI" bench-engine "$@" >"$TMP/be.out" 2>&1; rc=$?
    [ $rc -eq "$rc_want" ] || fail "bench-engine $*: exit $rc, want $rc_want"
    grep -q -- "$text" "$TMP/be.out" || { fail "bench-engine $*: no '$text'"; cat "$TMP/be.out"; }
}
bad 2 "required" --concurrency 1
bad 2 "concurrency" -m "$f" --concurrency 1,x
bad 2 "shared-prefix" -m "$f" --prompt-tokens 8 --shared-prefix 8
bad 2 "kv-memory" -m "$f" --kv-memory lots
bad 2 "unknown option" -m "$f" --frobnicate 1
bad 1 "No such file" -m "$TMP/missing.gguf"
bad 1 "context" -m "$f" --prompt-tokens 9000 --concurrency 1

[ $fails -eq 0 ]
