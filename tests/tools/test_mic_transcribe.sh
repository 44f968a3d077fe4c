#!/bin/sh
# test_mic_transcribe.sh - samples/mic_transcribe --file against a real
# `omniserve serve` with the trained espeak Whisper and Silero VAD on a free
# 127.0.0.1 port: the clip streamed at real-time speed over the Realtime
# WebSocket must end in one final line equal to the reference transcript, in
# both PCM rates; bad arguments exit 2. Skips (77) without ../shared.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
MIC=$(dirname "$OMNI")/samples/mic_transcribe
SHARED=${OMNI_SHARED:-../shared}
STT=$SHARED/models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin
VAD=$SHARED/models/silero-vad/silero-v6.2.0-ggml.bin
CLIP=$SHARED/audio/turn-on-the-kitchen-lights.wav
REF="turn on the kitchen lights."   # whisper.cpp's and transformers' transcript (the model's README)
for f in "$STT" "$VAD" "$CLIP"; do [ -f "$f" ] || { echo "skip: $f not present"; exit 77; }; done
[ -x "$MIC" ] || { echo "FAIL: $MIC not built (make samples)"; exit 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

"$MIC" --rate 8000 --file "$CLIP" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--rate 8000 did not exit 2"
"$MIC" --url http://127.0.0.1:1/ --file "$CLIP" >/dev/null 2>&1; [ $? -eq 2 ] || fail "an http:// URL did not exit 2"

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$OMNI" serve --host 127.0.0.1 --port "$port" --stt-model "$STT" --vad-model "$VAD" --stt-threads 1 \
    >"$TMP/mic_server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
i=0
until grep -q "listening on" "$TMP/mic_server.log"; do
    i=$((i+1)); [ $i -le 100 ] || { echo "FAIL: server did not start: $(tail -3 "$TMP/mic_server.log")"; exit 1; }
    sleep 0.1
done
URL="ws://127.0.0.1:$port/v1/realtime?intent=transcription"

"$MIC" --url "ws://127.0.0.1:$port/v1/realtime?intent=conversation" --file "$CLIP" >/dev/null 2>&1 \
    && fail "a refused handshake exited 0"

for rate in 16000 24000; do
    "$MIC" --url "$URL" --rate $rate --file "$CLIP" >"$TMP/mic_out" 2>"$TMP/mic_err" \
        || fail "rate $rate: exited $?: $(tail -2 "$TMP/mic_err")"
    # Partials redraw the line ("\r\033[K" first); the final one ends it.
    lines=$(wc -l <"$TMP/mic_out")
    final=$(tail -n 1 "$TMP/mic_out" | tr '\r' '\n' | tail -n 1 | sed 's/^\x1b\[K//')
    [ "$lines" -eq 1 ] || fail "rate $rate: $lines final lines, want 1"
    [ "$final" = "$REF" ] || fail "rate $rate: final line '$final', want '$REF'"
done
[ $fails -eq 0 ]
