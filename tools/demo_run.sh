#!/bin/sh
# demo_run.sh - what `make run` starts: omniserve on $MODEL, or on the
# stories260K model converted from ../shared when no MODEL is given.
# Until the HTTP server lands (issue [3]) this runs an interactive generation.
set -e
OMNI=${OMNI:-build/omniserve}
PYTHON=${PYTHON:-/usr/bin/python3}
if [ -z "$MODEL" ]; then
    MODEL=build/models/stories260K.gguf
    if [ ! -f "$MODEL" ]; then
        src=../shared/models/stories260K
        if [ ! -f "$src/stories260K.bin" ]; then
            echo "make run: no MODEL given and $src is absent; run 'make run MODEL=path/to/model.gguf'" >&2
            exit 2
        fi
        mkdir -p build/models
        "$PYTHON" tools/llama2c_to_gguf "$src/stories260K.bin" "$src/tok512.bin" "$MODEL"
    fi
fi
if "$OMNI" --help 2>/dev/null | grep -q '^  serve'; then
    exec "$OMNI" serve -m "$MODEL"
fi
echo "omniserve: generating with $MODEL (the HTTP server arrives with issue [3])" >&2
exec "$OMNI" run -m "$MODEL" -p "${PROMPT:-Once upon a time}" -n "${N:-256}" --temp "${TEMP:-0.8}"
