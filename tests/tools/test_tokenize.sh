#!/bin/sh
# test_tokenize.sh - `omniserve tokenize` end to end on the real vocabularies
# in ../shared/vocab: --ids JSON, per-token lines, --no-bos, --parse-special,
# text from -f FILE and stdin, and the one-line errors (invalid UTF-8, a GGUF
# without a tokenizer, a missing file, a missing -m).
set -u
: "${OMNI:=build/omniserve}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
V=../shared/vocab
[ -f "$V/ggml-vocab-llama-spm.gguf" ] || { echo "../shared/vocab not present"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
same() { # same WHAT GOT WANT
    [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

spm="$V/ggml-vocab-llama-spm.gguf"
same "spm --ids" "$("$OMNI" tokenize -m "$spm" --ids "Hello world")" "[1, 15043, 3186]"
same "spm --no-bos" "$("$OMNI" tokenize -m "$spm" --ids --no-bos "Hello world")" "[15043, 3186]"
same "llama3 --ids" "$("$OMNI" tokenize -m "$V/ggml-vocab-llama-bpe.gguf" --ids "Hello world")" "[128000, 9906, 1917]"
same "gpt2 no BOS" "$("$OMNI" tokenize -m "$V/ggml-vocab-gpt-2.gguf" --ids "Hello world")" "[15496, 995]"

# One line per token: id, tab, quoted piece.
out=$("$OMNI" tokenize -m "$spm" "Hello world") || fail "pieces: exit $?"
same "pieces" "$out" "$(printf '1\t"<s>"\n15043\t" Hello"\n3186\t" world"')"
out=$("$OMNI" tokenize -m "$spm" --no-bos "a
b") || fail "newline: exit $?"
printf '%s\n' "$out" | grep -qF '13	"\n"' || fail "newline piece not escaped: $out"

# Special tokens only with --parse-special.
q="$V/ggml-vocab-qwen2.gguf"
out=$("$OMNI" tokenize -m "$q" --ids --parse-special "<|im_start|>user")
same "parse-special" "$out" "[151644, 872]"
out=$("$OMNI" tokenize -m "$q" --ids "<|im_start|>user")
case "$out" in *151644*) fail "special token parsed without --parse-special: $out" ;; esac

# -f FILE keeps the bytes exactly (trailing newline included); - reads stdin.
printf 'Hello world\n' > "$TMP/tok_in.txt"
same "-f" "$("$OMNI" tokenize -m "$spm" --ids -f "$TMP/tok_in.txt")" "[1, 15043, 3186, 13]"
same "stdin" "$(printf 'Hello world' | "$OMNI" tokenize -m "$spm" --ids -)" "[1, 15043, 3186]"
same "-- TEXT" "$("$OMNI" tokenize -m "$spm" --ids --no-bos -- -)" "[448]"

# Errors: one line naming the cause, non-zero exit.
printf 'a\377b' > "$TMP/tok_bad.txt"
err=$("$OMNI" tokenize -m "$spm" -f "$TMP/tok_bad.txt" 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] || fail "invalid UTF-8 accepted"
same "invalid UTF-8 message" "$err" "tokenize: the text is not valid UTF-8"
# A GGUF with no keys at all: header only.
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' > "$TMP/tok_empty.gguf"
err=$("$OMNI" tokenize -m "$TMP/tok_empty.gguf" "x" 2>&1); rc=$?
[ $rc -ne 0 ] || fail "GGUF without tokenizer accepted"
case "$err" in *"missing key tokenizer.ggml.model"*) ;; *) fail "no-tokenizer message: $err" ;; esac
err=$("$OMNI" tokenize -m "$TMP/does-not-exist.gguf" "x" 2>&1); rc=$?
[ $rc -ne 0 ] || fail "missing file accepted"
case "$err" in *does-not-exist.gguf*) ;; *) fail "missing-file message: $err" ;; esac
"$OMNI" tokenize "x" >/dev/null 2>&1 && fail "no -m accepted"
"$OMNI" tokenize --help | grep -qF -- "--ids" || fail "--help does not document --ids"

[ $fails -eq 0 ] || exit 1
echo "tokenize: all checks passed"
