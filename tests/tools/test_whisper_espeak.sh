#!/bin/sh
# test_whisper_espeak.sh - the trained espeak Whisper model through
# `omniserve transcribe`: greedy transcripts with the decoder prompt forced to
# [<|startoftranscript|>, <|notimestamps|>] (no suppression, no fallback, at
# most 60 tokens, as ../shared/models/whisper-tiny-espeak/README.md says the
# references were made) must equal transformers' on every clip whose greedy
# margin is >= 0.25, and the word error rate on all 30 clips must be within
# 1 point of the reference's. Needs ../shared; skips (77) without it.
set -u
: "${PYTHON:?}" "${OMNI:?}"
DIR=${OMNI_SHARED:-../shared}/models/whisper-tiny-espeak
[ -f "$DIR/reference.json" ] || { echo "skip: $DIR not present"; exit 77; }
TMP=${TMP:-$(mktemp -d)}
OUT=$TMP/whisper_espeak
mkdir -p "$OUT"

"$OMNI" transcribe -m "$DIR/ggml-tiny-espeak-q8_0.bin" "$DIR"/test/test_*.wav --format json --threads 2 \
    --no-timestamps --no-fallback --no-suppress --max-tokens 60 >"$OUT/results.jsonl" 2>"$OUT/err" || {
    echo "FAIL: transcribe: $(tail -3 "$OUT/err")"; exit 1; }

"$PYTHON" - "$DIR/reference.json" "$OUT" <<'PY'
import json, os, re, sys
ref = json.load(open(sys.argv[1]))
out = sys.argv[2]

def words(t):
    return re.sub(r"[^a-z0-9' ]+", " ", t.lower()).split()

def edits(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]

lines = open(os.path.join(out, "results.jsonl")).read().splitlines()
if len(lines) != len(ref["tests"]):
    print(f"FAIL: {len(lines)} results for {len(ref['tests'])} clips")
    sys.exit(1)
errs = ours_err = ref_err = n_words = 0
for t, line in zip(sorted(ref["tests"], key=lambda t: t["wav"]), lines):
    name = os.path.splitext(t["wav"])[0]
    got = json.loads(line)["text"]
    want = t["hf_text"].strip()
    n_words += len(words(t["text"]))
    ours_err += edits(words(t["text"]), words(got))
    ref_err += edits(words(t["text"]), words(want))
    same = got.strip() == want
    if not same and t["hf_min_top2_margin"] >= 0.25:
        print(f"FAIL: {name} (margin {t['hf_min_top2_margin']}): got {got!r}, want {want!r}")
        errs += 1
    elif not same:
        print(f"note: {name} differs at a near-tie (margin {t['hf_min_top2_margin']}): {got!r} vs {want!r}")
wer, ref_wer = 100.0 * ours_err / n_words, 100.0 * ref_err / n_words
print(f"WER {wer:.2f}% (reference {ref_wer:.2f}%) on {len(ref['tests'])} clips, {n_words} words")
if abs(wer - ref_wer) > 1.0:
    print("FAIL: WER differs from the reference's by more than 1 point")
    errs += 1
sys.exit(1 if errs else 0)
PY
