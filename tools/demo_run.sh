#!/bin/sh
# demo_run.sh - what `make run` starts: `omniserve serve` on 127.0.0.1:8000
# ($HOST/$PORT override) with $MODEL. Without MODEL it serves the default chat
# model from the cache (~/.cache/omniserve) when it is there; otherwise it
# explains how to pass a local GGUF and still starts, so /health, /metrics
# and every weight-free route work while generation answers 503.
set -e
OMNI=${OMNI:-build/omniserve}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
CACHE=${OMNISERVE_CACHE:-$HOME/.cache/omniserve}
DEFAULT_REPO=Qwen/Qwen2.5-0.5B-Instruct-GGUF
DEFAULT_FILE=qwen2.5-0.5b-instruct-q4_k_m.gguf
if [ -z "$MODEL" ] && [ -f "$CACHE/$DEFAULT_REPO/$DEFAULT_FILE" ]; then
    MODEL=$CACHE/$DEFAULT_REPO/$DEFAULT_FILE
fi
if [ -z "$MODEL" ]; then
    cat >&2 <<MSG
omniserve: no model. The default chat model ($DEFAULT_REPO, file
$DEFAULT_FILE) is not in $CACHE/$DEFAULT_REPO/, and this build does
not download it yet. Pass a local GGUF instead:
    make run MODEL=path/to/model.gguf
(the tiny test model: make run MODEL=build/models/stories260K.gguf after
 tools/llama2c_to_gguf ../shared/models/stories260K/{stories260K.bin,tok512.bin} build/models/stories260K.gguf).
Starting anyway on http://$HOST:$PORT: /health, /metrics and /v1/models answer,
generation routes return 503 with this explanation.
MSG
    exec "$OMNI" serve --host "$HOST" --port "$PORT"
fi
exec "$OMNI" serve -m "$MODEL" --host "$HOST" --port "$PORT"
