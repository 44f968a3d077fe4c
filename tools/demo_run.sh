#!/bin/sh
# demo_run.sh - what `make run` starts: `omniserve serve` on 127.0.0.1:8000
# ($HOST/$PORT override) with $MODEL. Without MODEL it serves the default chat
# model from the model cache (~/.cache/omniserve, $OMNISERVE_CACHE), which
# serve downloads from Hugging Face on first use ($HF_ENDPOINT, $HF_TOKEN);
# without a network it explains how to pass a local GGUF and still starts,
# so /health, /metrics and every weight-free route work while generation
# answers 503.
set -e
OMNI=${OMNI:-build/omniserve}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
if [ -z "$MODEL" ]; then
    exec "$OMNI" serve --hf-repo Qwen/Qwen2.5-0.5B-Instruct-GGUF \
        --hf-file qwen2.5-0.5b-instruct-q4_k_m.gguf --host "$HOST" --port "$PORT"
fi
exec "$OMNI" serve -m "$MODEL" --host "$HOST" --port "$PORT"
