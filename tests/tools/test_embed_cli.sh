#!/bin/sh
# test_embed_cli.sh - `omniserve embed`, `rerank` and `bench-embed` end to
# end: stories260K (../shared, converted with tools/llama2c_to_gguf) as a
# decoder embedder - JSON and plain output, stdin lines, normalization and
# pooling options - the golden bert cross-encoder for `rerank` when it is
# built ($OMNI_GOLDEN_DIR, default build/fixtures), bench-embed's JSON, and
# the usage errors.
set -u
: "${OMNI:=build/omniserve}" "${TMP:=/tmp}" "${PYTHON:=python3}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
S=../shared/models/stories260K
[ -f "$S/stories260K.bin" ] || { echo "../shared/models/stories260K not present"; exit 77; }
M="$TMP/emb_stories.gguf"
"$PYTHON" tools/llama2c_to_gguf "$S/stories260K.bin" "$S/tok512.bin" "$M" >/dev/null 2>&1 ||
    { echo "cannot convert stories260K"; exit 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# --json: one unit vector per text; stdin lines give the same vectors
"$OMNI" embed -m "$M" --json "Once upon a time" "a cat sat" > "$TMP/e1.json" 2>/dev/null || fail "embed --json exit $?"
printf 'Once upon a time\na cat sat\n' | "$OMNI" embed -m "$M" --json > "$TMP/e2.json" 2>/dev/null || fail "stdin exit $?"
"$OMNI" embed -m "$M" --no-normalize --json "Once upon a time" > "$TMP/e3.json" 2>/dev/null || fail "--no-normalize exit $?"
"$OMNI" embed -m "$M" --pooling mean --json "Once upon a time" > "$TMP/e4.json" 2>/dev/null || fail "--pooling mean exit $?"
"$OMNI" embed -m "$M" "Once upon a time" > "$TMP/e5.txt" 2>/dev/null || fail "plain exit $?"
"$PYTHON" - "$TMP" <<'PY' || fail "embed outputs"
import json, math, sys
t = sys.argv[1]
a, b = json.load(open(t + "/e1.json")), json.load(open(t + "/e2.json"))
raw, mean = json.load(open(t + "/e3.json")), json.load(open(t + "/e4.json"))
plain = [float(x) for x in open(t + "/e5.txt").read().split()]
norm = lambda v: math.sqrt(sum(x * x for x in v))
va = [d["embedding"] for d in a["data"]]
assert len(va) == 2 and len(va[0]) == a["dimensions"] > 0
assert all(abs(norm(v) - 1) < 1e-4 for v in va)
assert [d["embedding"] for d in b["data"]] == va, "stdin differs from arguments"
r = raw["data"][0]["embedding"]
assert abs(norm(r) - 1) > 1e-3, "--no-normalize gave a unit vector"
assert max(abs(x / norm(r) - y) for x, y in zip(r, va[0])) < 1e-5
assert max(abs(x - y) for x, y in zip(mean["data"][0]["embedding"], va[0])) > 1e-3, "mean == last"
assert max(abs(x - y) for x, y in zip(plain, va[0])) < 1e-6
PY

# bench-embed --json
"$OMNI" bench-embed -m "$M" --batch 1,4 --tokens 16 --rounds 1 --threads 1 --json > "$TMP/b.json" 2>/dev/null ||
    fail "bench-embed exit $?"
"$PYTHON" -c "
import json,sys; j=json.load(open('$TMP/b.json'))
assert [r['batch'] for r in j['results']] == [1, 4] and all(r['inputs_per_s'] > 0 for r in j['results'])
assert j['results'][0]['vs_batch_1'] == 1.0" || fail "bench-embed json"

# rerank with the golden cross-encoder
G="${OMNI_GOLDEN_DIR:-build/fixtures}/embed-bert_rank-f32.gguf"
if [ -f "$G" ]; then
    out=$("$OMNI" rerank -m "$G" --query "what is a fox?" "The quick brown fox." "Paris is in France." 2>/dev/null) ||
        fail "rerank exit $?"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] || fail "rerank lines: $out"
    printf '%s\n' "$out" | awk -F '\t' 'NR == 1 { p = $1 } NR > 1 && $1 > p { exit 1 }' || fail "not sorted: $out"
    "$OMNI" rerank -m "$G" --query q --json a b | "$PYTHON" -c "import json,sys; assert len(json.load(sys.stdin)['results']) == 2" ||
        fail "rerank --json"
    "$OMNI" embed -m "$G" x >/dev/null 2>&1 && fail "embed with a rerank model succeeded"
else
    echo "note: $G not built; rerank not checked"
fi

# usage errors
"$OMNI" embed "x" >/dev/null 2>&1; [ $? -eq 2 ] || fail "embed without -m: not exit 2"
"$OMNI" rerank -m "$M" doc >/dev/null 2>&1; [ $? -eq 2 ] || fail "rerank without --query: not exit 2"
"$OMNI" embed -m "$M" --pooling rank x >/dev/null 2>&1; [ $? -eq 2 ] || fail "--pooling rank: not exit 2"
err=$("$OMNI" embed -m "$TMP/missing.gguf" x 2>&1 >/dev/null); [ $? -eq 1 ] || fail "missing file: not exit 1"
case "$err" in *missing.gguf*) ;; *) fail "missing file not named: $err" ;; esac

[ $fails -eq 0 ]
