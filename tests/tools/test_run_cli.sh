#!/bin/sh
# test_run_cli.sh - `omniserve run` on a tiny random llama2.c checkpoint (untied
# classifier) converted by tools/llama2c_to_gguf: --seed determinism, sampling
# options, --chat, -n accounting, the engine options (--kv-type, --kv-block-size,
# --kv-memory, --deterministic), and the error cases (missing or bad files, prompt
# longer than the context, invalid UTF-8, bad options, q8_0 K/V on a kv_dim of 8,
# a pool too small for one block, broken checkpoints).
D="$TMP/run_cli"
mkdir -p "$D" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# A llama2.c checkpoint: dim 16, hidden 40, 2 layers, 4 heads / 2 kv heads,
# vocab 300 (negative: untied classifier), seq_len 256; tokenizer with the byte
# pieces and a few merges, written the way llama2.c's export writes them.
$PYTHON - "$D" <<'EOF' || fail "could not write the tiny checkpoint"
import struct, sys
import numpy as np
d = sys.argv[1]
dim, hid, L, H, KV, V, T = 16, 40, 2, 4, 2, 300, 256
kvd = dim // H * KV
rng = np.random.default_rng(5)
shapes = [(V, dim), (L, dim), (L, dim, dim), (L, kvd, dim), (L, kvd, dim), (L, dim, dim),
          (L, dim), (L, hid, dim), (L, dim, hid), (L, hid, dim), (dim,),
          (T, dim // H // 2), (T, dim // H // 2), (V, dim)]
with open(f"{d}/tiny.bin", "wb") as f:
    f.write(struct.pack("<7i", dim, hid, L, H, KV, -V, T))
    for i, s in enumerate(shapes):
        a = rng.standard_normal(s).astype("<f4")
        if len(s) <= 2 and s[-1] == dim and i in (1, 6, 10):
            a = np.ones(s, "<f4")  # RMSNorm weights
        f.write(a.tobytes())
pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % i for i in range(256)]
words = [b" ", b"e", b"l", b"o", b"h", b"he", b"ll", b" h", b" he", b"llo", b" hello",
         b"a", b" a", b"b", b"c", b"d", b"t", b" t", b"th", b" the", b"s", b" s", b"r",
         b"n", b"in", b" in", b"w", b"or", b"ld", b"wor", b"world", b" world", b"!",
         b"x", b"y", b"z", b"i", b"u", b"m", b"p", b"k"]
pieces += words[:V - len(pieces)]
assert len(pieces) == V
with open(f"{d}/tok.bin", "wb") as f:
    f.write(struct.pack("<i", max(len(p) for p in pieces)))
    for i, p in enumerate(pieces):
        score = 0.0 if i < 259 else float(-(i - 259))
        f.write(struct.pack("<fi", score, len(p)) + p)
EOF

M="$D/tiny.gguf"
$PYTHON tools/llama2c_to_gguf "$D/tiny.bin" "$D/tok.bin" "$M" 2>"$D/conv.err" ||
    fail "convert: $(cat "$D/conv.err")"
$OMNI inspect "$M" >"$D/inspect.txt" 2>&1 || fail "inspect failed: $(tail -n 3 "$D/inspect.txt")"
grep -q "output.weight" "$D/inspect.txt" || fail "untied classifier: no output.weight"

run() { $OMNI run -m "$M" --threads 1 "$@"; }

# --- seed determinism ---
run -p "hello world" -n 40 --temp 1 --seed 7 >"$D/a.txt" 2>"$D/a.err" || fail "run: $(cat "$D/a.err")"
run -p "hello world" -n 40 --temp 1 --seed 7 >"$D/b.txt" 2>/dev/null || fail "second run failed"
cmp -s "$D/a.txt" "$D/b.txt" || fail "same seed gave different outputs"
case "$(head -c 11 "$D/a.txt")" in "hello world") ;; *) fail "output does not start with the prompt" ;; esac
differ=0
for s in 1 2 3 4 5; do
    run -p "hello world" -n 40 --temp 1 --seed $s >"$D/c.txt" 2>/dev/null || fail "seed $s failed"
    cmp -s "$D/a.txt" "$D/c.txt" || differ=$((differ + 1))
done
[ $differ -ge 4 ] || fail "only $differ of 5 other seeds changed the output"
grep -q "seed 7" "$D/a.err" || fail "stderr does not report the seed"

# --- greedy is independent of the seed; other samplers run ---
run -p "the" -n 30 --temp 0 --seed 1 >"$D/g1.txt" 2>/dev/null || fail "greedy run failed"
run -p "the" -n 30 --temp 0 --seed 2 >"$D/g2.txt" 2>/dev/null || fail "greedy run failed"
cmp -s "$D/g1.txt" "$D/g2.txt" || fail "greedy output depends on the seed"
run -p "the" -n 30 --temp 0.7 --top-k 5 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.3 --seed 3 \
    >/dev/null 2>"$D/s.err" || fail "sampling options: $(cat "$D/s.err")"
# with the top-k = 1 the draw is the argmax
run -p "the" -n 30 --temp 1.5 --top-k 1 --seed 9 >"$D/k1.txt" 2>/dev/null || fail "top-k 1 failed"
cmp -s "$D/g1.txt" "$D/k1.txt" || fail "--top-k 1 differs from greedy"

# --- -n: the context length is accepted, more is capped to it ---
run -p "hello world" -n 256 --temp 0 >/dev/null 2>"$D/n.err" || fail "-n at the context failed"
run -p "hello world" -n 1000 --temp 0 >/dev/null 2>"$D/n2.err" || fail "-n past the context failed"
grep -q "256 steps" "$D/n2.err" || fail "-n is not capped at the context: $(head -n 1 "$D/n2.err")"

# --- chat ---
run --chat "hello" --system "be brief" --temp 0 >"$D/chat.txt" 2>"$D/chat.err" ||
    fail "--chat: $(cat "$D/chat.err")"
grep -q "chat format chatml" "$D/chat.err" || fail "--chat did not fall back to chatml"

# --- engine options: F32 K/V by default (as llama2.c); f16 and a block size run ---
run -p "the" -n 30 --temp 0 >/dev/null 2>"$D/kvd.err" || fail "default run failed"
grep -q "KV f32" "$D/kvd.err" || fail "no F32 K/V by default: $(head -n 1 "$D/kvd.err")"
run -p "the" -n 30 --temp 0 --kv-type f16 --kv-block-size 4 --kv-memory 64K --deterministic \
    >"$D/kv.txt" 2>"$D/kv.err" || fail "engine options: $(cat "$D/kv.err")"
case "$(head -c 3 "$D/kv.txt")" in "the") ;; *) fail "engine options: output lacks the prompt" ;; esac

# --- errors: exit 1 with one line on stderr ---
expect_error() { # code pattern args...
    code=$1 pat=$2
    shift 2
    what=$(echo "$*" | cut -c 1-100)
    "$@" >"$D/e.out" 2>"$D/e.err"
    rc=$?
    [ $rc -eq "$code" ] || fail "$what: exit $rc, want $code ($(cat "$D/e.err"))"
    grep -q -- "$pat" "$D/e.err" || fail "$what: stderr lacks '$pat': $(cat "$D/e.err")"
    [ ! -s "$D/e.out" ] || fail "$what: wrote to stdout on error"
}
expect_error 1 "no-such.gguf" $OMNI run -m "$D/no-such.gguf" -p hi
printf 'GGUF\003\000\000\000garbage' >"$D/bad.gguf"
expect_error 1 "bad.gguf" $OMNI run -m "$D/bad.gguf" -p hi
long=$($PYTHON -c 'print("hello world " * 300)')
expect_error 1 "longer than the context" run -p "$long"
expect_error 1 "UTF-8" run -p "$(printf 'bad \377 byte')"
expect_error 1 "leaves no room" run -p "hello world hello" -n 2
expect_error 1 "multiple of 32" run -p hi --kv-type q8_0
expect_error 1 "holds no block" run -p hi --kv-memory 1K
expect_error 2 "kv-type" run -p hi --kv-type q4
expect_error 2 "unknown option" run -p hi --bogus 1
expect_error 2 "--temp" run -p hi --temp warm
expect_error 2 "no model" $OMNI run -p hi
[ "$(wc -l <"$D/e.err")" -le 2 ] || fail "usage error is not short"

# --- converter errors ---
head -c 1000 "$D/tiny.bin" >"$D/trunc.bin"
$PYTHON tools/llama2c_to_gguf "$D/trunc.bin" "$D/tok.bin" "$D/x.gguf" 2>"$D/c.err" &&
    fail "truncated checkpoint converted"
grep -q "1000 bytes but the header" "$D/c.err" || fail "truncated checkpoint: $(cat "$D/c.err")"
head -c 3000 "$D/tok.bin" >"$D/trunc_tok.bin"
$PYTHON tools/llama2c_to_gguf "$D/tiny.bin" "$D/trunc_tok.bin" "$D/x.gguf" 2>"$D/c.err" &&
    fail "truncated tokenizer converted"
grep -q "trunc_tok.bin" "$D/c.err" || fail "truncated tokenizer: $(cat "$D/c.err")"
printf 'short' >"$D/short.bin"
$PYTHON tools/llama2c_to_gguf "$D/short.bin" "$D/tok.bin" "$D/x.gguf" 2>"$D/c.err" &&
    fail "5-byte checkpoint converted"
grep -q "too short" "$D/c.err" || fail "short checkpoint: $(cat "$D/c.err")"
echo "ok"
