#!/bin/sh
# test_gpt4o_pre.sh - the "gpt-4o" pre-tokenizer (o200k: gpt-oss, Phi-4-mini):
# GPT-2's shared vocabulary relabelled tokenizer.ggml.pre = gpt-4o must split
# "helloWORLD 12345 MixedCase" at the case changes and digits in threes -
# pieces hello | WORLD | " " | 123 | 45 | " Mixed" | Case - so its ids are those
# of each piece tokenized alone with GPT-2's own pre-tokenizer (which keeps
# every one of those pieces whole). Also: "llama4" is the same pre-tokenizer.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
V=../shared/vocab/ggml-vocab-gpt-2.gguf
[ -f "$V" ] || { echo "no $V"; exit 77; }
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

for pre in gpt-4o llama4; do
    "$PYTHON" - "$V" "$TMP/g4o_$pre.gguf" "$pre" <<'PY' || { fail "writing the $pre vocabulary"; continue; }
import sys
sys.path.insert(0, "tools")
import gguf
src, dst, pre = sys.argv[1:]
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(dst)
w.add("general.architecture", r.get("general.architecture", "gpt2"))
for key, (vtype, value, elem) in r.kv.items():
    if key.startswith("tokenizer.") and key != "tokenizer.ggml.pre":
        w.add(key, value, vtype, elem)
w.add("tokenizer.ggml.pre", pre)
w.write()
PY
    got=$("$OMNI" tokenize -m "$TMP/g4o_$pre.gguf" --ids --no-bos "helloWORLD 12345 MixedCase") \
        || { fail "$pre: tokenize exited $?"; continue; }
    want="["
    sep=""
    for piece in "hello" "WORLD" " " "123" "45" " Mixed" "Case"; do
        ids=$("$OMNI" tokenize -m "$V" --ids --no-bos -- "$piece" | tr -d '[]')
        want="$want$sep$ids"; sep=", "
    done
    want="$want]"
    [ "$got" = "$want" ] || fail "$pre: $got, want $want"
done
[ $fails -eq 0 ] && echo "gpt-4o pre-tokenizer: ok"
[ $fails -eq 0 ]
