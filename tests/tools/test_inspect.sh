#!/bin/sh
# test_inspect.sh - `omniserve inspect` end to end: a real vocabulary from
# ../shared, a small model-like GGUF written with tools/gguf.py (hyper-
# parameters, tokenizer, chat template, tensors of several types), --kv and
# --template, and a truncated file that must fail with a one-line message.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
fails=0
expect() { # expect FILE PATTERN: fixed-string grep of a line
    grep -qF -- "$2" "$1" || { echo "FAIL: '$2' not in output:"; sed 's/^/    /' "$1"; fails=$((fails+1)); }
}

# --- a generated model-like file ---
f="$TMP/inspect_small.gguf"
"$PYTHON" - "$f" <<'PY' || { echo "FAIL: could not write $f"; exit 1; }
import sys
sys.path.insert(0, "tools")
import numpy as np
import gguf
w = gguf.GGUFWriter(sys.argv[1])
w.add("general.architecture", "llama")
w.add("general.name", "tiny-test")
w.add("general.file_type", 7, gguf.GGUF_UINT32)
w.add("llama.context_length", 256, gguf.GGUF_UINT32)
w.add("llama.embedding_length", 64, gguf.GGUF_UINT32)
w.add("llama.block_count", 1, gguf.GGUF_UINT32)
w.add("llama.attention.head_count", 4, gguf.GGUF_UINT32)
w.add("llama.attention.layer_norm_rms_epsilon", 1e-5, gguf.GGUF_FLOAT32)
w.add("llama.rope.freq_base", 10000.0, gguf.GGUF_FLOAT32)
w.add("tokenizer.ggml.model", "llama")
w.add("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "a", "b"])
w.add("tokenizer.ggml.token_type", [2, 3, 3, 1, 1], gguf.GGUF_ARRAY, gguf.GGUF_INT32)
w.add("tokenizer.ggml.bos_token_id", 1, gguf.GGUF_UINT32)
w.add("tokenizer.ggml.eos_token_id", 2, gguf.GGUF_UINT32)
w.add("tokenizer.ggml.add_bos_token", True)
w.add("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
w.add_tensor("token_embd.weight", np.zeros((5, 64), np.float32))
w.add_tensor("output_norm.weight", np.ones(64, np.float16))
w.add_tensor_raw("blk.0.attn_q.weight", gguf.GGML_Q8_0, (64, 64), bytes(64 * 2 * 34))
w.write()
PY
out="$TMP/inspect_small.out"
"$OMNI" inspect "$f" > "$out" 2>&1 || { echo "FAIL: inspect exited $?"; cat "$out"; exit 1; }
expect "$out" "format:        GGUF v3"
expect "$out" 'architecture:  "llama"'
expect "$out" 'name:          "tiny-test"'
expect "$out" "file type:     7 (MOSTLY_Q8_0)"
expect "$out" "hyper-parameters (llama.*):"
expect "$out" "llama.embedding_length                       64"
expect "$out" "llama.attention.layer_norm_rms_epsilon       9.99999975e-06"
expect "$out" "tokens         5"
expect "$out" 'bos            1 "<s>"'
expect "$out" "add_bos        true"
expect "$out" "token types    normal 2, unknown 1, control 2"
expect "$out" "chat template: present (53 bytes"
expect "$out" "tensors: 3"
expect "$out" "blk.0.attn_q.weight                      q8_0     [64, 64]"
expect "$out" "totals: 3 tensors, 5760 bytes"
expect "$out" "q8_0          1 tensors             4352 bytes"

"$OMNI" inspect --kv "$f" > "$out" 2>&1 || { echo "FAIL: inspect --kv exited $?"; exit 1; }
expect "$out" "metadata: 16 keys"
expect "$out" 'tokenizer.ggml.tokens                        array   [string x 5] "<unk>", "<s>", "</s>", "a", ...'
expect "$out" "tokenizer.ggml.token_type                    array   [i32 x 5] 2, 3, 3, 1, ..."
"$OMNI" inspect "$f" --template > "$out" 2>&1 || { echo "FAIL: inspect --template exited $?"; exit 1; }
expect "$out" "{% for m in messages %}{{ m['content'] }}{% endfor %}"

# --- a truncated copy must fail with one line naming the file and cause ---
head -c 2000 "$f" > "$TMP/inspect_trunc.gguf"
if "$OMNI" inspect "$TMP/inspect_trunc.gguf" > "$out" 2>&1; then
    echo "FAIL: truncated file accepted"; fails=$((fails+1))
fi
expect "$out" "gguf: $TMP/inspect_trunc.gguf: tensor 'token_embd.weight': data ["
expect "$out" ") past end of file (2000 bytes)"
[ "$(wc -l < "$out")" -eq 1 ] || { echo "FAIL: error is not one line"; cat "$out"; fails=$((fails+1)); }
if "$OMNI" inspect "$TMP/no-such.gguf" > "$out" 2>&1; then
    echo "FAIL: missing file accepted"; fails=$((fails+1))
fi
expect "$out" "No such file"

# --- a real vocabulary (skipped parts when ../shared is absent) ---
v=../shared/vocab/ggml-vocab-qwen2.gguf
if [ -f "$v" ]; then
    "$OMNI" inspect "$v" > "$out" 2>&1 || { echo "FAIL: inspect $v exited $?"; exit 1; }
    expect "$out" 'architecture:  "qwen2"'
    expect "$out" 'model          "gpt2"'
    expect "$out" 'pre            "qwen2"'
    expect "$out" "tokens         151936"
    expect "$out" "merges         151387"
    expect "$out" 'bos            151643 "<|endoftext|>"'
    expect "$out" "token types    normal 151643, control 3, user_defined 290"
    expect "$out" "chat template: present"
    expect "$out" "tensors: 0"
else
    echo "note: $v absent, vocabulary checks skipped"
fi
[ $fails -eq 0 ]
