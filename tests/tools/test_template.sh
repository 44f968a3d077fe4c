#!/bin/sh
# test_template.sh - `omniserve template` end to end: the fixture templates
# rendered from files against the committed jinja2 references, the shared
# vocabularies' templates (-m) against jinja2 rendered live when
# /usr/bin/python3 has jinja2, --no-gen-prompt, --kwargs, and the errors (a
# template that raises exits 1 with its message; bad arguments exit 2).
set -u
: "${OMNI:=build/omniserve}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
F=tests/fixtures/templates
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

msgs="$TMP/tpl_msgs.json"
printf '%s' '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi é"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Bye"}]' > "$msgs"

# Exactly the reference bytes (no newline added) for a file template.
printf '%s' '[{"role":"system","content":"You are a concise assistant."},{"role":"user","content":"What is the capital of France?"}]' > "$TMP/tpl_basic.json"
"$OMNI" template --file "$F/qwen3.jinja" --messages "$TMP/tpl_basic.json" --kwargs '{"eos_token":"<|im_end|>"}' > "$TMP/tpl_out.txt" \
    || fail "qwen3 basic: exit $?"
cmp -s "$TMP/tpl_out.txt" "$F/expected/qwen3.basic.txt" || fail "qwen3 basic differs from the jinja2 reference"
"$OMNI" template --file "$F/llama3.1.jinja" --messages "$TMP/tpl_basic.json" \
    --kwargs '{"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>","date_string":"26 Jul 2024"}' > "$TMP/tpl_out.txt" \
    || fail "llama3.1 basic: exit $?"
cmp -s "$TMP/tpl_out.txt" "$F/expected/llama3.1.basic.txt" || fail "llama3.1 basic differs from the jinja2 reference"

# --no-gen-prompt and --kwargs reach the template.
out=$("$OMNI" template --file "$F/smollm2.jinja" --messages "$TMP/tpl_basic.json" --no-gen-prompt | tail -c 20)
case "$out" in *"<|im_start|>assistant"*) fail "--no-gen-prompt still adds the assistant turn" ;; esac
out=$("$OMNI" template --file "$F/qwen3.jinja" --messages "$TMP/tpl_basic.json" --kwargs '{"enable_thinking":false}')
case "$out" in *"<think>"*) ;; *) fail "enable_thinking=false did not reach the template" ;; esac

# A template that raises: exit 1, its message on stderr, nothing on stdout.
printf '%s' '[{"role":"user","content":"a"},{"role":"user","content":"b"}]' > "$TMP/tpl_bad.json"
out=$("$OMNI" template --file "$F/gemma3.jinja" --messages "$TMP/tpl_bad.json" 2>"$TMP/tpl_err.txt"); rc=$?
[ $rc -eq 1 ] || fail "raising template: exit $rc"
[ -z "$out" ] || fail "raising template wrote to stdout"
grep -qF "Conversation roles must alternate user/assistant/user/assistant/..." "$TMP/tpl_err.txt" || fail "raise message: $(cat "$TMP/tpl_err.txt")"
# A syntax error names line and column.
printf 'ok\n{%% if x %%}\n{{ 1 + }}\n' > "$TMP/tpl_syntax.jinja"
"$OMNI" template --file "$TMP/tpl_syntax.jinja" --messages "$msgs" 2>"$TMP/tpl_err.txt" >/dev/null && fail "syntax error accepted"
grep -q "line 3, column" "$TMP/tpl_err.txt" || fail "syntax error position: $(cat "$TMP/tpl_err.txt")"
"$OMNI" template --messages "$msgs" >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing -m/--file not a usage error"
"$OMNI" template --file "$F/qwen3.jinja" --messages "$TMP/nope.json" >/dev/null 2>&1 && fail "missing messages file accepted"
"$OMNI" template --help | grep -qF -- "--no-gen-prompt" || fail "--help does not document --no-gen-prompt"

# Models: the templates stored in the shared vocabularies, against jinja2 live.
V=../shared/vocab
PY=/usr/bin/python3
if [ -f "$V/ggml-vocab-qwen2.gguf" ]; then
    for m in qwen2:"" phi-3:'{"bos_token":"<s>","eos_token":"<|endoftext|>"}'; do
        name=${m%%:*} kw=${m#*:}
        "$OMNI" template -m "$V/ggml-vocab-$name.gguf" --messages "$msgs" > "$TMP/tpl_m.txt" || fail "$name: exit $?"
        if $PY -c 'import jinja2' 2>/dev/null; then
            "$OMNI" inspect --template "$V/ggml-vocab-$name.gguf" > "$TMP/tpl_m.jinja"
            $PY tools/render_template_ref.py "$TMP/tpl_m.jinja" --messages "$msgs" ${kw:+--kwargs "$kw"} > "$TMP/tpl_ref.txt" \
                || fail "$name: reference render failed"
            cmp -s "$TMP/tpl_m.txt" "$TMP/tpl_ref.txt" || fail "$name: -m output differs from jinja2"
        fi
    done
else
    echo "../shared/vocab not present: model checks skipped"
fi

[ $fails -eq 0 ] || exit 1
echo "template: all checks passed"
