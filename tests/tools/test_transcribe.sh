#!/bin/sh
# test_transcribe.sh - tools/hf_whisper_to_ggml.py and `omniserve transcribe`:
# the converter's header, filters, vocab and tensor table on the golden tiny
# Whisper (f32/f16/q8_0, Q8_0 bit-exact with ggml's reference quantizer) and a
# clear error (exit 1) for each broken input; the CLI's output formats, beam
# search, sampling, 30 s seeking over a long recording and its errors, with
# the espeak model from ../shared (those parts skip without it).
set -u
: "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}" "${OMNI:=build/omniserve}"
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "no numpy"; exit 77; }
G=tests/fixtures/whisper
D="$TMP/transcribe"
rm -rf "$D" && mkdir -p "$D"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# --- converter -------------------------------------------------------------
for t in f32 f16 q8_0; do
    "$PYTHON" tools/hf_whisper_to_ggml.py "$G" "$D/golden-$t.bin" --type $t 2>"$D/$t.log" \
        || { fail "convert $t"; cat "$D/$t.log"; }
done
"$PYTHON" - "$D" "$G" <<'PY' || fail "converted file checks"
import json, struct, sys
sys.path.insert(0, "tools")
import numpy as np
import hf_to_gguf
import hf_whisper_to_ggml as cv

D, G = sys.argv[1], sys.argv[2]
bad = []
ref_filters = np.fromfile(f"{G}/mel_filters_80.bin", "<f4").reshape(80, 201)
for t, ftype in (("f32", 0), ("f16", 1), ("q8_0", 2007)):
    b = open(f"{D}/golden-{t}.bin", "rb").read()
    magic, *hp = struct.unpack_from("<I11i", b, 0)
    if magic != 0x67676D6C or hp != [512, 1500, 64, 4, 2, 64, 64, 4, 2, 80, ftype]:
        bad.append(f"{t}: header {hex(magic)} {hp}")
    o = 48
    n_mel, n_fft = struct.unpack_from("<ii", b, o)
    filt = np.frombuffer(b, "<f4", n_mel * n_fft, o + 8).reshape(n_mel, n_fft)
    if (n_mel, n_fft) != (80, 201) or np.abs(filt - ref_filters).max() > 1e-7:
        bad.append(f"{t}: mel filters")
    o += 8 + 4 * n_mel * n_fft
    (n,) = struct.unpack_from("<i", b, o); o += 4
    pieces = []
    for _ in range(n):
        (l,) = struct.unpack_from("<I", b, o); pieces.append(b[o + 4:o + 4 + l]); o += 4 + l
    if n != 512 or pieces[0] != b"\x00" or pieces[33] != b"!" or pieces[256] != b" th" or pieces[511] != b"<|endoftext|>":
        bad.append(f"{t}: vocab {n} {pieces[:1]} {pieces[33:34]} {pieces[256:257]}")
    types = {}
    while o < len(b):
        nd, ln, ty = struct.unpack_from("<3i", b, o); o += 12
        ne = struct.unpack_from(f"<{nd}i", b, o); o += 4 * nd
        name = b[o:o + ln].decode(); o += ln
        cnt = int(np.prod(ne))
        size = {0: 4 * cnt, 1: 2 * cnt, 8: cnt // 32 * 34}[ty]
        types[name] = (ty, ne, b[o:o + size]); o += size
    if len(types) != 89:
        bad.append(f"{t}: {len(types)} tensors")
    want = {"f32": (0, 0, 0), "f16": (1, 1, 1), "q8_0": (8, 1, 8)}[t]
    got = (types["encoder.blocks.0.attn.query.weight"][0], types["encoder.conv1.weight"][0],
           types["decoder.token_embedding.weight"][0])
    if got != want or types["encoder.conv1.bias"][1] != (1, 64) or types["encoder.conv1.weight"][1] != (3, 80, 64):
        bad.append(f"{t}: types {got} conv {types['encoder.conv1.weight'][1]}")
    if types["decoder.blocks.1.mlp_ln.bias"][0] != 0 or types["encoder.positional_embedding"][0] != 0:
        bad.append(f"{t}: 1-D / positional tensors not f32")
    if t == "q8_0":
        ck = hf_to_gguf.open_checkpoint(G)
        w = ck["model.decoder.layers.1.fc1.weight"].load("model.decoder.layers.1.fc1.weight")
        if types["decoder.blocks.1.mlp.0.weight"][2] != hf_to_gguf.quantize_q8_0(w):
            bad.append("q8_0 blocks differ from the reference quantizer")
for b_ in bad:
    print(b_)
sys.exit(1 if bad else 0)
PY

# broken inputs: exit 1 and a message naming the problem
B="$D/broken"
broken() { # name, expected message, then a shell snippet that breaks $B
    rm -rf "$B" && mkdir -p "$B" && cp "$G"/config.json "$G"/model.safetensors "$G"/vocab.json "$B"/
    ( cd "$B" && eval "$3" )
    if "$PYTHON" tools/hf_whisper_to_ggml.py "$B" "$D/broken.bin" 2>"$D/broken.log"; then
        fail "converter accepted $1"
    elif ! grep -q "$2" "$D/broken.log"; then
        fail "converter on $1: expected '$2' in: $(cat "$D/broken.log")"
    fi
}
broken "no config" "config not found" "rm config.json"
broken "no vocab" "vocab.json: tokenizer vocabulary not found" "rm vocab.json"
broken "bad mels" "num_mel_bins 81" "sed -i 's/\"num_mel_bins\": 80/\"num_mel_bins\": 81/' config.json"
broken "bad heads" "not a multiple" "sed -i 's/\"encoder_attention_heads\": 4/\"encoder_attention_heads\": 3/' config.json"
broken "wrong vocab size" "bad or duplicate id" "sed -i 's/\"vocab_size\": 512/\"vocab_size\": 500/' config.json"
broken "missing tensor" "not in the checkpoint" "sed -i 's/\"encoder_layers\": 2/\"encoder_layers\": 3/' config.json"
broken "truncated weights" "safetensors" "head -c 1000 model.safetensors > t && mv t model.safetensors"
broken "no safetensors" "no \*.safetensors" "rm model.safetensors"

# --- the CLI (needs the espeak model) ----------------------------------------
SH=${OMNI_SHARED:-../shared}
M="$SH/models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"
K="$SH/audio/turn-on-the-kitchen-lights.wav"
if [ ! -f "$M" ] || [ ! -f "$K" ]; then
    [ $fails -eq 0 ] || exit 1
    echo "skip: CLI part needs $M"; exit 77
fi
T="--threads 1 --no-timestamps"
out=$("$OMNI" transcribe -m "$M" "$K" $T 2>/dev/null)
[ "$out" = "turn on the kitchen lights." ] || fail "text: '$out'"
out=$("$OMNI" transcribe -m "$M" "$K" $T --format json 2>/dev/null)
[ "$out" = '{"text":"turn on the kitchen lights."}' ] || fail "json: '$out'"
"$OMNI" transcribe -m "$M" "$K" $T --format verbose_json 2>/dev/null | "$PYTHON" -c '
import json, sys
r = json.load(sys.stdin)
s = r["segments"]
ok = (r["task"] == "transcribe" and r["language"] == "en" and abs(r["duration"] - 1.593) < 0.01 and len(s) == 1
      and s[0]["start"] == 0 and abs(s[0]["end"] - 1.59) < 0.01 and s[0]["text"] == " turn on the kitchen lights."
      and s[0]["tokens"][:2] == [1210, 319] and -1 < s[0]["avg_logprob"] <= 0 and 0 <= s[0]["no_speech_prob"] < 1)
sys.exit(0 if ok else 1)' || fail "verbose_json"
out=$("$OMNI" transcribe -m "$M" "$K" $T --format srt 2>/dev/null)
[ "$out" = "$(printf '1\n00:00:00,000 --> 00:00:01,590\nturn on the kitchen lights.')" ] || fail "srt: '$out'"
out=$("$OMNI" transcribe -m "$M" "$K" $T --format vtt 2>/dev/null)
[ "$out" = "$(printf 'WEBVTT\n\n00:00:00.000 --> 00:00:01.590\nturn on the kitchen lights.')" ] || fail "vtt: '$out'"
out=$("$OMNI" transcribe -m "$M" "$K" $T --beam-size 4 2>/dev/null)
[ "$out" = "turn on the kitchen lights." ] || fail "beam search: '$out'"
out=$("$OMNI" transcribe -m "$M" "$K" $T --temperature 0.3 --best-of 3 --prompt "kitchen lights" 2>/dev/null)
[ -n "$out" ] || fail "sampling with a prompt gave nothing"
# timestamps on (this model was trained without them: only the format is checked)
"$OMNI" transcribe -m "$M" "$K" --threads 1 --format verbose_json 2>/dev/null | "$PYTHON" -c '
import json, sys
r = json.load(sys.stdin)
sys.exit(0 if all(0 <= s["start"] <= s["end"] <= 30 for s in r["segments"]) else 1)' || fail "timestamps mode"

# a 70 s recording: three 30 s windows, segments in order
"$PYTHON" - "$SH/models/whisper-tiny-espeak/test" "$D/long.wav" <<'PY'
import glob, sys, wave
frames = b""
for p in sorted(glob.glob(sys.argv[1] + "/test_*.wav")):
    with wave.open(p) as w:
        frames += w.readframes(w.getnframes()) + b"\0\0" * 4000
    if len(frames) > 70 * 32000:
        break
with wave.open(sys.argv[2], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(frames[:70 * 32000])
PY
"$OMNI" transcribe -m "$M" "$D/long.wav" $T --format verbose_json 2>/dev/null | "$PYTHON" -c '
import json, sys
r = json.load(sys.stdin)
st = [(s["start"], s["end"]) for s in r["segments"]]
ok = len(st) == 3 and st[0] == (0, 30) and st[1] == (30, 60) and st[2] == (60, 70) and len(r["text"].split()) > 10
sys.exit(0 if ok else print(st, r["text"]) or 1)' || fail "long recording"

# random multilingual models (large-v2 layout: 51865 tokens, 80 mels; large-v3:
# 51866 tokens, 128 mels) in tiny shapes: language detection, task tokens,
# timestamp rules and beam search on arbitrary logits keep their invariants
for v in 51865:80 51866:128; do
"$PYTHON" - "$D/multi.bin" "${v%:*}" "${v#*:}" <<'PY' || fail "write random multilingual model $v"
import struct, sys
sys.path.insert(0, "tools")
import numpy as np
import hf_whisper_to_ggml as cv
out, nv, nm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d, L, rng = 64, 2, np.random.default_rng(7)
with open(out, "wb") as f:
    f.write(struct.pack("<I11i", 0x67676D6C, nv, 1500, d, 4, L, 448, d, 4, L, nm, 1))
    filt = cv.mel_filters(nm)
    f.write(struct.pack("<ii", *filt.shape) + filt.tobytes())
    f.write(struct.pack("<i", 256))
    for b in range(256):
        f.write(struct.pack("<I", 1) + bytes([b]))
    def t(name, a, f16=False):
        a = np.asarray(a, np.float32)
        f.write(struct.pack("<iii", a.ndim, len(name), 1 if f16 else 0) + struct.pack(f"<{a.ndim}i", *a.shape[::-1]))
        f.write(name.encode() + a.astype("<f2" if f16 else "<f4").tobytes())
    r = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.1
    for name, shape in cv.tensor_names(L, L).items():
        hp = {"d_model": d, "num_mel_bins": nm, "max_source_positions": 1500, "max_target_positions": 448,
              "vocab_size": nv, "encoder_ffn_dim": 4 * d, "decoder_ffn_dim": 4 * d}
        s = cv.expected_shape(name, hp)
        a = 1 + r(*s) if name.endswith("ln.weight") or name.endswith("_ln.weight") or "ln_post.weight" in name else r(*s)
        if name.endswith("conv1.bias") or name.endswith("conv2.bias"):
            a = a.reshape(-1, 1)
        t(name, a, f16=a.ndim >= 2 and "positional" not in name and a.shape[-1] != 1)
PY
for args in "--language auto" "--language de --translate" "--beam-size 3 --language fr" \
            "--temperature 0.5 --best-of 2 --language en --prompt hello"; do
    # the long recording once (timestamps seek through its windows), a short clip otherwise
    wav=$K; case $args in *auto*) wav=$D/long.wav ;; esac
    "$OMNI" transcribe -m "$D/multi.bin" "$wav" --threads 2 --max-tokens 24 --no-fallback $args --format verbose_json \
        2>"$D/multi.err" >"$D/multi.json" || { fail "random $v model, $args: $(tail -1 "$D/multi.err")"; continue; }
    "$PYTHON" - "$D/multi.json" "$args" <<'PY' || fail "random $v model, $args: invariants"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["segments"]
want_lang = {"auto": None, "de": "de", "fr": "fr", "en": "en"}[sys.argv[2].split("--language ")[1].split()[0]]
ok = (r["task"] == ("translate" if "--translate" in sys.argv[2] else "transcribe") and len(r["language"]) >= 2
      and (want_lang is None or r["language"] == want_lang)
      and all(0 <= x["start"] < x["end"] <= 100 for x in s)
      and all(a["start"] <= b["start"] for a, b in zip(s, s[1:]))
      and all(t < 50257 for x in s for t in x["tokens"]))
sys.exit(0 if ok else print(json.dumps(r)[:800]) or 1)
PY
done
done

# --parallel: several files through one batcher, printed in the order given,
# the same transcripts as one after another; a failing file stops the list
W="$SH/audio/what-is-the-weather-like-today.wav"
seq=$("$OMNI" transcribe -m "$M" "$K" "$W" "$K" "$W" --threads 2 --format json 2>/dev/null)
par=$("$OMNI" transcribe -m "$M" "$K" "$W" "$K" "$W" --threads 2 --format json --parallel 3 2>/dev/null) \
    || fail "--parallel exited $?"
[ "$par" = "$seq" ] && [ "$(printf '%s\n' "$par" | wc -l)" -eq 4 ] || fail "--parallel: '$par' vs '$seq'"
par=$("$OMNI" transcribe -m "$M" "$K" "$D/none.wav" "$W" --parallel 2 --no-timestamps 2>"$D/e7") \
    && fail "--parallel with a missing file exited 0"
[ "$par" = "turn on the kitchen lights." ] || fail "--parallel before the failure: '$par'"
grep -q "none.wav" "$D/e7" || fail "--parallel failure message: $(cat "$D/e7")"

# errors: one line on stderr, non-zero exit
"$OMNI" transcribe -m "$D/none.bin" "$K" >/dev/null 2>"$D/e1" && fail "missing model accepted"
grep -q "cannot open" "$D/e1" || fail "missing model message: $(cat "$D/e1")"
head -c 5000 "$M" >"$D/trunc.bin"
"$OMNI" transcribe -m "$D/trunc.bin" "$K" >/dev/null 2>"$D/e2" && fail "truncated model accepted"
grep -q "trunc.bin" "$D/e2" || fail "truncated model message: $(cat "$D/e2")"
"$OMNI" transcribe -m "$M" "$D/none.wav" >/dev/null 2>"$D/e3" && fail "missing audio accepted"
"$OMNI" transcribe -m "$M" "$K" --format xml >/dev/null 2>"$D/e4"; [ $? -eq 2 ] || fail "--format xml"
"$OMNI" transcribe -m "$M" "$K" --beam-size 99 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--beam-size 99"
"$OMNI" transcribe -m "$M" "$K" --language xx >/dev/null 2>"$D/e5" && fail "--language xx accepted"
grep -q "unknown language" "$D/e5" || fail "unknown language message: $(cat "$D/e5")"
"$OMNI" transcribe -m "$D/golden-f32.bin" "$K" >/dev/null 2>"$D/e6" && fail "golden model (no specials) accepted"
grep -q "no special tokens" "$D/e6" || fail "no-specials message: $(cat "$D/e6")"

[ $fails -eq 0 ]
