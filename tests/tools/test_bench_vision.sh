#!/bin/sh
# test_bench_vision.sh - `omniserve bench-vision` on reduced real-shape random
# models (tools/random_model: smolvlm-256m with 1 layer; clip-vit-l-336-mmproj
# and smolvlm-256m-mmproj with 1 encoder layer): the JSON line has every key,
# the repeated image is answered by the vision cache (one miss, --reps hits),
# 8 frames of ../shared/video/sample.mp4 at 2 fps are sampled and encoded,
# --images 2 on a 1-block qwen2.5-vl-3b-mmproj has its keys, bad usage exits
# 2. No timing is asserted.
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -d ../shared/vocab ] || { echo "no ../shared/vocab"; exit 77; }
IMG=../shared/images/test-1.jpeg VID=../shared/video/sample.mp4
[ -f "$IMG" ] && [ -f "$VID" ] || { echo "no ../shared/images or ../shared/video samples"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
RM=tools/random_model
$RM --shape smolvlm-256m --type q8_0 --layers 1 -o "$TMP/bv_lm.gguf" 2>/dev/null || fail "random_model smolvlm-256m"
$RM --shape clip-vit-l-336-mmproj --lm-dim 576 --layers 1 -o "$TMP/bv_clip.gguf" 2>/dev/null || fail "random_model clip-vit-l-336-mmproj"
$RM --shape smolvlm-256m-mmproj --layers 1 -o "$TMP/bv_smol.gguf" 2>/dev/null || fail "random_model smolvlm-256m-mmproj"
$RM --shape clip-vit-l-336-mmproj -o "$TMP/x.gguf" 2>&1 | grep -q "required" || fail "--lm-dim not required"

check() { # check JSON_LINE PROJECTOR VIDEO(0/1)
    "$PYTHON" - "$1" "$2" "$3" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
keys = ["projector", "cpu", "threads", "reps", "encoder_passes", "image_rows", "encode_first_ms",
        "encode_ms_per_pass", "repeat_ms", "repeat_ratio", "cache_hits", "cache_misses",
        "prompt_positions", "n", "pp_tok_s", "tg_tok_s"]
if sys.argv[3] == "1":
    keys += ["video_frames", "video_frames_decoded", "video_seeked", "video_duration_s",
             "video_sample_ms", "video_encode_ms"]
missing = [k for k in keys if k not in r]
assert not missing, f"missing keys {missing}"
assert r["projector"] == sys.argv[2], r["projector"]
assert r["cache_misses"] == 1 and r["cache_hits"] == r["reps"], "repeated image did not hit the cache"
assert r["prompt_positions"] > r["image_rows"] > 0
if sys.argv[3] == "1":
    assert r["video_frames"] == 8, r["video_frames"]
    assert r["video_frames_decoded"] >= 8
PY
}
out=$($OMNI bench-vision -m "$TMP/bv_lm.gguf" --mmproj "$TMP/bv_clip.gguf" --image "$IMG" \
      --video "$VID" --reps 2 -n 2 --threads 2 --json 2>"$TMP/bv.err") || { fail "llava run exited $?"; cat "$TMP/bv.err"; }
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "--json printed more than one line: $out"
check "$out" mlp 1 || fail "llava JSON: $out"
out=$($OMNI bench-vision -m "$TMP/bv_lm.gguf" --mmproj "$TMP/bv_smol.gguf" --image "$IMG" \
      --reps 1 -n 1 --threads 2 --json 2>"$TMP/bv.err") || { fail "idefics3 run exited $?"; cat "$TMP/bv.err"; }
check "$out" idefics3 0 || fail "idefics3 JSON: $out"

# --images N: N images one after the other vs one batch (Qwen2.5-VL, 1 block)
$RM --shape qwen2.5-vl-3b-mmproj --layers 1 -o "$TMP/bv_qwen.gguf" 2>/dev/null || fail "random_model qwen2.5-vl-3b-mmproj"
out=$($OMNI bench-vision --encode-only --mmproj "$TMP/bv_qwen.gguf" --image "$IMG" --size 56x56 \
      --images 2 --reps 1 --threads 2 --json 2>"$TMP/bv.err") || { fail "--images run exited $?"; cat "$TMP/bv.err"; }
"$PYTHON" - "$out" <<'PY' || fail "--images JSON: $out"
import json, sys
r = json.loads(sys.argv[1])
for k in ["serial_ms", "batch_ms", "serial_ms_per_image", "batch_ms_per_image", "serial_cpu_s",
          "batch_cpu_s", "speedup", "loadavg"]:
    assert k in r, k
assert r["projector"] == "qwen2.5vl_merger" and r["images"] == 2 and r["grid_rows"] == 4 and r["grid_cols"] == 4, r
assert r["serial_ms"] > 0 and r["batch_ms"] > 0
PY
$OMNI bench-vision --mmproj "$TMP/bv_qwen.gguf" --image "$IMG" -m "$TMP/bv_lm.gguf" --images 2 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--images without --encode-only did not exit 2"
$OMNI bench-vision --encode-only --mmproj "$TMP/bv_qwen.gguf" --image "$IMG" --size 0x5 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--size 0x5 did not exit 2"

$OMNI bench-vision -m "$TMP/bv_lm.gguf" --image "$IMG" >/dev/null 2>&1
[ $? -eq 2 ] || fail "missing --mmproj did not exit 2"
$OMNI bench-vision -m "$TMP/bv_lm.gguf" --mmproj "$TMP/bv_clip.gguf" --image "$IMG" --reps 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--reps 0 did not exit 2"
rm -f "$TMP"/bv_lm.gguf "$TMP"/bv_clip.gguf "$TMP"/bv_smol.gguf "$TMP"/bv_qwen.gguf "$TMP"/bv.err
[ $fails -eq 0 ]
