#!/bin/sh
# test_voice_agent.sh - samples/voice_agent --file against a real
# `omniserve serve` (stories260K chatting, the espeak-trained Whisper and
# Silero VAD hearing, espeak-ng speaking) on a free 127.0.0.1 port: the clip
# streamed at real-time speed must give one "you:" line with the reference
# transcript, an "agent:" line, and a valid 24 kHz WAV of the reply that
# Whisper hears as it hears the agent's words spoken by `omniserve speak`; a server without a
# chat model opens no conversation (exit 3); bad arguments exit 2; a short
# `omniserve bench-voice --json` run parses. Event order only, no timing.
# Skips (77) without ../shared.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
VA=$(dirname "$OMNI")/samples/voice_agent
SHARED=${OMNI_SHARED:-../shared}
STT=$SHARED/models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin
VAD=$SHARED/models/silero-vad/silero-v6.2.0-ggml.bin
S260=$SHARED/models/stories260K
CLIP=$SHARED/audio/turn-on-the-kitchen-lights.wav
REF="turn on the kitchen lights."   # the model's transcript (test_mic_transcribe.sh)
for f in "$STT" "$VAD" "$CLIP" "$S260/stories260K.bin"; do
    [ -f "$f" ] || { echo "skip: $f not present"; exit 77; }
done
[ -x "$VA" ] || { echo "FAIL: $VA not built (make samples)"; exit 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

"$VA" --max-tokens 0 --file "$CLIP" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--max-tokens 0 did not exit 2"
"$VA" --out "$TMP/x.wav" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--out without --file did not exit 2"
"$VA" --url http://127.0.0.1:1/ --file "$CLIP" >/dev/null 2>&1; [ $? -eq 2 ] || fail "an http:// URL did not exit 2"
"$OMNI" bench-voice -m x --stt-model x --vad-model x --file x --paired >/dev/null 2>&1
[ $? -eq 2 ] || fail "bench-voice --paired without --load did not exit 2"

CHAT=$TMP/va_stories260K.gguf
"$PYTHON" tools/llama2c_to_gguf "$S260/stories260K.bin" "$S260/tok512.bin" "$CHAT" >/dev/null || exit 1

srv=
start_server() {   # args of serve; sets $srv and $URL
    port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$OMNI" serve --host 127.0.0.1 --port "$port" --stt-model "$STT" --vad-model "$VAD" \
        --stt-threads 1 "$@" >"$TMP/va_server.log" 2>&1 &
    srv=$!
    i=0
    until grep -q "listening on" "$TMP/va_server.log"; do
        i=$((i+1)); [ $i -le 300 ] || { echo "FAIL: server did not start: $(tail -3 "$TMP/va_server.log")"; exit 1; }
        sleep 0.1
    done
    URL="ws://127.0.0.1:$port/v1/realtime"
}
stop_server() { [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null; srv=; }
trap 'stop_server' EXIT

# Speech in only: /v1/realtime opens a transcription session, not a conversation.
start_server
"$VA" --url "$URL" --file "$CLIP" >/dev/null 2>"$TMP/va_err"; rc=$?
[ $rc -eq 3 ] || fail "a server without a chat model: exit $rc, want 3: $(tail -2 "$TMP/va_err")"
stop_server

start_server -m "$CHAT"
"$VA" --url "$URL" --file "$CLIP" --out "$TMP/va_reply.wav" --max-tokens 40 --voice nova \
    >"$TMP/va_out" 2>"$TMP/va_err"; rc=$?
if [ $rc -eq 3 ]; then
    echo "skip: the server has no conversation mode: $(tail -1 "$TMP/va_err")"; exit 77
fi
[ $rc -eq 0 ] || fail "voice_agent exited $rc: $(tail -3 "$TMP/va_err")"
you=$(grep '^you: ' "$TMP/va_out")
[ "$you" = "you: $REF" ] || fail "user transcript '$you', want 'you: $REF'"
agent=$(grep '^agent: ' "$TMP/va_out" | sed 's/^agent: //')
[ "$(grep -c '^agent: ' "$TMP/va_out")" -eq 1 ] && [ -n "$agent" ] || fail "want one agent: line, got: $(cat "$TMP/va_out")"

# The reply as heard: a 16-bit mono 24 kHz WAV with sound in it that says
# what the agent wrote: Whisper hears the same words in it as in
# `omniserve speak` of the agent's transcript in the same voice (the
# espeak-trained model garbles stories260K's sentences, the same way both
# times; comparing with the text itself would test the model).
"$OMNI" transcribe -m "$STT" --language en "$TMP/va_reply.wav" >"$TMP/va_heard" 2>/dev/null \
    || fail "transcribe of the reply failed"
printf "%s" "$agent" | "$OMNI" speak --voice nova -o "$TMP/va_spoken.wav" 2>/dev/null || fail "speak failed"
"$OMNI" transcribe -m "$STT" --language en "$TMP/va_spoken.wav" >"$TMP/va_spoken" 2>/dev/null \
    || fail "transcribe of the spoken text failed"
"$PYTHON" - "$TMP/va_reply.wav" "$TMP/va_heard" "$TMP/va_spoken" <<'EOF' || fails=$((fails+1))
import difflib, re, sys, wave
import numpy as np
path, heard_path, spoken_path = sys.argv[1:4]
w = wave.open(path)
ok = (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768
if not ok or len(x) < 24000 // 5 or np.sqrt(np.mean(x * x)) < 0.01:
    print(f"FAIL: reply.wav: {w.getnchannels()} ch, {w.getsampwidth() * 8} bit, {w.getframerate()} Hz, "
          f"{len(x) / 24000:.2f} s, rms {np.sqrt(np.mean(x * x)) if len(x) else 0:.4f}")
    sys.exit(1)
words = lambda p: re.findall(r"[a-z']+", open(p).read().lower())
heard, spoken = words(heard_path), words(spoken_path)
sim = difflib.SequenceMatcher(None, heard, spoken).ratio()
print(f"reply {len(x) / 24000:.2f} s; whisper: {len(heard)} words in it, {len(spoken)} in the text spoken, similarity {sim:.2f}")
if not heard or sim < 0.8:
    print(f"FAIL: the reply's audio does not say what the agent wrote:\n  reply: {' '.join(heard)}\n  text:  {' '.join(spoken)}")
    sys.exit(1)
EOF

# bench-voice: one turn, and the JSON has its numbers.
stop_server
if "$OMNI" bench-voice -m "$CHAT" --stt-model "$STT" --vad-model "$VAD" --file "$CLIP" \
        --turns 1 --max-tokens 16 --speech-reps 3 --json >"$TMP/va_bench.json" 2>"$TMP/va_bench.err"; then
    "$PYTHON" - "$TMP/va_bench.json" <<'EOF' || fail "bench-voice JSON: $(cat "$TMP/va_bench.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["turns"] == 1 and r["load"] == 0, r
# end of speech -> first audio may be below 0: the VAD may end the turn
# inside the clip's final fricative, before the bench's 40 dB end of speech
for k in ("eos_to_first_audio_ms", "stopped_to_first_audio_ms", "speech_ttfb_ms"):
    lo = -1000 if k == "eos_to_first_audio_ms" else 0
    assert r[k]["median"] > lo and r[k]["p95"] >= r[k]["median"], (k, r[k])
assert r["speech_end_s"] > 1.0 and r["end_db"] == 40, r
assert r["tts_rtf"] > 0, r
EOF
else
    fail "bench-voice exited $?: $(tail -3 "$TMP/va_bench.err")"
fi
[ $fails -eq 0 ]
