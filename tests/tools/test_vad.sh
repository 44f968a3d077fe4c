#!/bin/sh
# test_vad.sh - `omniserve vad` end to end with the real Silero VAD weights:
# the whisper.cpp oracle on jfk.wav (344 probabilities, 4 segments) as JSON
# and as text, other formats through ffmpeg (mp3, the audio track of an mp4),
# segment options, and one-line errors for broken models and non-audio input.
set -u
: "${OMNI:=build/omniserve}" "${TMP:=/tmp}"
[ -x "$OMNI" ] || { echo "no $OMNI"; exit 77; }
S=../shared
M=$S/models/silero-vad/silero-v6.2.0-ggml.bin
[ -f "$M" ] && [ -f "$S/audio/jfk.wav" ] || { echo "../shared silero-vad not present"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
same() { # same WHAT GOT WANT
    [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# The oracle: whisper.cpp's tests/test-vad.cpp on jfk.wav.
same "jfk --json" "$("$OMNI" vad -m "$M" "$S/audio/jfk.wav" --json)" \
    '{"probabilities":344,"segments":[{"start":0.32,"end":2.27},{"start":3.27,"end":4.41},{"start":5.38,"end":7.68},{"start":8.16,"end":10.62}]}'
out=$("$OMNI" vad -m "$M" "$S/audio/jfk.wav") || fail "text: exit $?"
printf '%s\n' "$out" | head -n 1 | grep -q "344 windows, 4 speech segments" || fail "text summary: $out"
printf '%s\n' "$out" | grep -q "8.16 -   10.62 s" || fail "text segment: $out"

# Other containers and rates go through media/audio.
same "test-2.mp3" "$("$OMNI" vad -m "$M" "$S/audio/test-2.mp3" --json)" \
    '{"probabilities":545,"segments":[{"start":0.00,"end":7.52},{"start":7.75,"end":17.44}]}'
same "kitchen" "$("$OMNI" vad -m "$M" "$S/audio/turn-on-the-kitchen-lights.wav" --json)" \
    '{"probabilities":50,"segments":[{"start":0.03,"end":1.34}]}'
if [ -f "$S/video/sample.mp4" ]; then
    out=$("$OMNI" vad -m "$M" "$S/video/sample.mp4" --json) || fail "mp4: exit $?"
    case "$out" in '{"probabilities":12'?',"segments":[{"start":0.32,"end":2.27},'*) ;; *) fail "mp4: $out" ;; esac
fi

# Options change the rules: with 2 s of silence needed to end speech, one
# segment runs to the end of the audio (344 * 512 samples); --probs lists windows.
same "min-silence" "$("$OMNI" vad -m "$M" "$S/audio/jfk.wav" --json --min-silence-ms 2000)" \
    '{"probabilities":344,"segments":[{"start":0.32,"end":11.01}]}'
n=$("$OMNI" vad -m "$M" "$S/audio/jfk.wav" --probs | grep -c '^ *[0-9.]* 0\.[0-9]*$')
same "--probs lines" "$n" 344

# Errors: one line, non-zero exit.
head -c 5000 "$M" > "$TMP/vad_trunc.bin"
err=$("$OMNI" vad -m "$TMP/vad_trunc.bin" "$S/audio/jfk.wav" 2>&1 >/dev/null) && fail "truncated model accepted"
case "$err" in *"vad: $TMP/vad_trunc.bin: "*"past end of file"*) ;; *) fail "truncated model message: $err" ;; esac
printf 'GGUFxxxxxxxxxxxxxxxxxxxxxxxx' > "$TMP/vad_magic.bin"
err=$("$OMNI" vad -m "$TMP/vad_magic.bin" "$S/audio/jfk.wav" 2>&1 >/dev/null) && fail "bad magic accepted"
case "$err" in *"bad magic"*) ;; *) fail "bad magic message: $err" ;; esac
printf 'not audio at all\n' > "$TMP/vad_text.wav"
err=$("$OMNI" vad -m "$M" "$TMP/vad_text.wav" 2>&1 >/dev/null) && fail "text file accepted"
case "$err" in *"not audio ffmpeg can decode"*) ;; *) fail "non-audio message: $err" ;; esac
"$OMNI" vad -m "$M" >/dev/null 2>&1; same "no file exit" $? 2
"$OMNI" vad -m "$M" "$S/audio/jfk.wav" --threshold 7 >/dev/null 2>&1; same "bad threshold exit" $? 2

[ $fails -eq 0 ]
