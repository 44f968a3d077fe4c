#!/bin/sh
# bench_suite.sh - `make bench`: language-model speed on real-shape random models.
# Each model runs twice in the same session: with the AVX2 kernels (the named
# baseline, OMNI_CPU=avx2) and with the best level this CPU offers, so the ratio
# is meaningful on a shared, noisy machine. Each run also decodes BATCH_DECODE
# sequences together (continuous batching): bd_x is that aggregate tok/s over
# the single-sequence decode speed of the same run. Prints one JSON line per
# run and one ratio line per model. Models are generated once into $BENCH_DIR.
# Then speech: `omniserve bench-stt` on real-shape random Whisper files
# (STT_SHAPES) over STT_AUDIO (default: 10 s of generated noise), the same two
# kernel levels; its ratio line gives baseline ms / best ms (and baseline RTF /
# best RTF), so above 1 means faster than the baseline.
# Then vision: `omniserve bench-vision` on smolvlm-256m and its mmproj (below).
set -e
OMNI=${OMNI:-build/omniserve}
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH_DIR=${BENCH_DIR:-build/bench}
THREADS=${THREADS:-2}
P=${P:-128}
N=${N:-32}
REPS=${REPS:-3}
BATCH_DECODE=${BATCH_DECODE:-8}
SHAPES=${SHAPES:-"qwen2.5-0.5b:q8_0 qwen2.5-0.5b:q4_k_m"}
mkdir -p "$BENCH_DIR"
for st in $SHAPES; do
    shape=${st%%:*}; type=${st##*:}
    model="$BENCH_DIR/$shape-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "bench: generating $model" >&2
        "$PYTHON" tools/random_model --shape "$shape" --type "$type" -o "$model"
    fi
    echo "bench: $shape $type, baseline avx2 then best kernels ($THREADS threads)" >&2
    base=$(OMNI_CPU=avx2 "$OMNI" bench -m "$model" -p "$P" -n "$N" --reps "$REPS" --threads "$THREADS" --batch-decode "$BATCH_DECODE" --json)
    best=$("$OMNI" bench -m "$model" -p "$P" -n "$N" --reps "$REPS" --threads "$THREADS" --batch-decode "$BATCH_DECODE" --json)
    echo "$base"
    echo "$best"
    "$PYTHON" - "$shape" "$type" "$base" "$best" <<'PY'
import json, sys
shape, qtype, base, best = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(json.dumps({"bench": "llm", "shape": shape, "type": qtype, "baseline": "avx2",
                  "level": best["cpu"], "threads": best["threads"],
                  "pp_tok_s": best["pp_tok_s"], "tg_tok_s": best["tg_tok_s"],
                  "batch_decode": best["batch_decode"], "bd_tok_s": best["bd_tok_s"],
                  "bd_x": round(best["bd_tok_s"] / best["tg_tok_s"], 3) if best["tg_tok_s"] else 0,
                  "pp_ratio": round(best["pp_tok_s"] / base["pp_tok_s"], 3),
                  "tg_ratio": round(best["tg_tok_s"] / base["tg_tok_s"], 3),
                  "bd_ratio": round(best["bd_tok_s"] / base["bd_tok_s"], 3) if base["bd_tok_s"] else 0}))
PY
done

STT_SHAPES=${STT_SHAPES:-"whisper-tiny.en:q8_0"}
STT_AUDIO=${STT_AUDIO:-$BENCH_DIR/noise-10s.wav}
if [ ! -f "$STT_AUDIO" ]; then
    "$PYTHON" - "$STT_AUDIO" <<'PY'
import sys, wave
import numpy as np
x = (0.05 * np.random.default_rng(0).standard_normal(160000) * 32767).astype("<i2")
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(x.tobytes())
PY
fi
for st in $STT_SHAPES; do
    shape=${st%%:*}; type=${st##*:}
    model="$BENCH_DIR/$shape-$type.bin"
    if [ ! -f "$model" ]; then
        echo "bench: generating $model" >&2
        "$PYTHON" tools/random_model --shape "$shape" --type "$type" -o "$model"
    fi
    echo "bench: $shape $type speech, baseline avx2 then best kernels ($THREADS threads)" >&2
    base=$(OMNI_CPU=avx2 "$OMNI" bench-stt -m "$model" --file "$STT_AUDIO" -t "$THREADS" --reps "$REPS" --json)
    best=$("$OMNI" bench-stt -m "$model" --file "$STT_AUDIO" -t "$THREADS" --reps "$REPS" --json)
    echo "$base"
    echo "$best"
    "$PYTHON" - "$shape" "$type" "$base" "$best" <<'PY'
import json, sys
shape, qtype, base, best = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(json.dumps({"bench": "stt", "shape": shape, "type": qtype, "baseline": "avx2",
                  "level": best["cpu"], "threads": best["threads"],
                  "encoder_ms": best["encoder_ms"], "decoder_ms_per_token": best["decoder_ms_per_token"],
                  "rtf": best["rtf"],
                  "encoder_ratio": round(base["encoder_ms"] / best["encoder_ms"], 3),
                  "decoder_ratio": round(base["decoder_ms_per_token"] / best["decoder_ms_per_token"], 3),
                  "rtf_ratio": round(base["rtf"] / best["rtf"], 3)}))
PY
    # batching: 4 transcriptions through one batcher against the same 4 serially
    echo "bench: $shape $type speech, 4 batched transcriptions against 4 serial ones" >&2
    conc=$("$OMNI" bench-stt -m "$model" --file "$STT_AUDIO" -t "$THREADS" --reps "$REPS" --concurrency 4 \
        --max-tokens 64 --json)
    echo "$conc"
    "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[3]); print(json.dumps({"bench": "stt-batch",
        "shape": sys.argv[1], "type": sys.argv[2], "baseline": "serial", "concurrency": r["concurrency"],
        "speedup": r["speedup"], "requests_per_decoder_pass": r["requests_per_decoder_pass"]}))' \
        "$shape" "$type" "$conc"
done

# Vision: `omniserve bench-vision` on smolvlm-256m (VISION_LM_TYPE) with its
# SigLIP mmproj over VISION_IMAGE and 8 frames of VISION_VIDEO at 2 fps, the
# same two kernel levels; the ratio line gives baseline / best encoder ms and
# best / baseline prompt tok/s, and the repeated image's cost over the first
# encode (must stay below 0.05).
VISION_IMAGE=${VISION_IMAGE:-../shared/images/test-1.jpeg}
VISION_VIDEO=${VISION_VIDEO:-../shared/video/sample.mp4}
VISION_LM_TYPE=${VISION_LM_TYPE:-q8_0}
vlm="$BENCH_DIR/smolvlm-256m-$VISION_LM_TYPE.gguf"
vmm="$BENCH_DIR/smolvlm-256m-mmproj-f16.gguf"
[ -f "$vlm" ] || "$PYTHON" tools/random_model --shape smolvlm-256m --type "$VISION_LM_TYPE" -o "$vlm"
[ -f "$vmm" ] || "$PYTHON" tools/random_model --shape smolvlm-256m-mmproj --type f16 -o "$vmm"
echo "bench: smolvlm-256m vision, baseline avx2 then best kernels ($THREADS threads)" >&2
base=$(OMNI_CPU=avx2 "$OMNI" bench-vision -m "$vlm" --mmproj "$vmm" --image "$VISION_IMAGE" --video "$VISION_VIDEO" --threads "$THREADS" --reps "$REPS" -n "$N" --json)
best=$("$OMNI" bench-vision -m "$vlm" --mmproj "$vmm" --image "$VISION_IMAGE" --video "$VISION_VIDEO" --threads "$THREADS" --reps "$REPS" -n "$N" --json)
echo "$base"
echo "$best"
"$PYTHON" - "$base" "$best" <<'PY'
import json, sys
base, best = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"bench": "vision", "shape": "smolvlm-256m", "baseline": "avx2",
                  "level": best["cpu"], "threads": best["threads"],
                  "encode_first_ms": best["encode_first_ms"], "encoder_passes": best["encoder_passes"],
                  "repeat_ratio": best["repeat_ratio"], "repeat_ok": best["repeat_ratio"] < 0.05,
                  "pp_tok_s": best["pp_tok_s"], "tg_tok_s": best["tg_tok_s"],
                  "video_frames": best["video_frames"], "video_frames_decoded": best["video_frames_decoded"],
                  "video_encode_ms": best["video_encode_ms"],
                  "encoder_ratio": round(base["encode_first_ms"] / best["encode_first_ms"], 3),
                  "video_encoder_ratio": round(base["video_encode_ms"] / best["video_encode_ms"], 3),
                  "pp_ratio": round(best["pp_tok_s"] / base["pp_tok_s"], 3),
                  "tg_ratio": round(best["tg_tok_s"] / base["tg_tok_s"], 3)}))
PY
