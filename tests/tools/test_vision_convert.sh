#!/bin/sh
# test_vision_convert.sh - tools/hf_mmproj_to_gguf.py on the tiny LLaVA and
# Idefics3 checkpoints of tests/fixtures/vision: the clip.* keys and tensor
# names/types/shapes llama.cpp's converters write, layers past the feature
# layer dropped, the --lm language model, `omniserve inspect` on the result,
# and a clear error (exit 1) for each broken input.
set -u
: "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}" "${OMNI:=build/omniserve}"
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "no numpy"; exit 77; }
V=tests/fixtures/vision
D="$TMP/vision-convert"
rm -rf "$D" && mkdir -p "$D"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

for c in llava idefics3; do
    for t in f32 f16; do
        "$PYTHON" tools/hf_mmproj_to_gguf.py "$V/$c" "$D/$c-$t.gguf" --type $t \
            --lm "$D/$c-lm-$t.gguf" --lm-type $t 2>"$D/$c-$t.log" || { fail "convert $c $t"; cat "$D/$c-$t.log"; }
    done
done

"$PYTHON" - "$D" <<'PY' 2>"$D/meta.log" || { fail "metadata checks"; cat "$D/meta.log"; }
import sys
sys.path.insert(0, "tools")
import gguf
D = sys.argv[1]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)

r = gguf.GGUFReader(f"{D}/llava-f16.gguf")
check(r.get("general.architecture") == "clip", "llava arch")
check(r.get("clip.projector_type") == "mlp", "llava projector")
check(r.get("clip.has_llava_projector") is True, "has_llava_projector")
check(r.get("clip.vision.feature_layer") == [2], f"feature_layer {r.get('clip.vision.feature_layer')}")
check(r.get("clip.vision.block_count") == 2, "llava block_count: layers past the feature layer dropped")
check(r.get("clip.vision.projection_dim") == 64, "projection_dim")
check(r.get("clip.use_gelu") is False, "quick gelu")
check(abs(r.get("clip.vision.image_mean")[0] - 0.48145466) < 1e-6, "image_mean")
check("v.blk.2.attn_q.weight" not in r.tensors, "layer 2 dropped")
check("v.post_ln.weight" not in r.tensors, "post_ln dropped")
check(r.tensors["v.patch_embd.weight"][:2] == (gguf.GGML_F16, (64, 3, 14, 14)), "patch_embd")
check(r.tensors["v.class_embd"][0] == gguf.GGML_F32, "class_embd f32")
check(r.tensors["v.position_embd.weight"] [:2] == (gguf.GGML_F32, (65, 64)), "position_embd")
check(r.tensors["v.blk.0.ffn_up.weight"][:2] == (gguf.GGML_F16, (128, 64)), "ffn_up = fc1")
check(r.tensors["v.blk.0.ffn_down.weight"][1] == (64, 128), "ffn_down = fc2")
check(r.tensors["v.blk.0.ln1.bias"][0] == gguf.GGML_F32, "norms f32")
check({"mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"} <= set(r.tensors), "mm.0/mm.2")

r = gguf.GGUFReader(f"{D}/idefics3-f32.gguf")
check(r.get("clip.projector_type") == "idefics3", "idefics3 projector")
check(r.get("clip.vision.projector.scale_factor") == 2, "scale_factor")
check(r.get("clip.vision.preproc_image_size") == 128, "preproc_image_size")
check(r.get("clip.vision.image_size") == 64 and r.get("clip.vision.patch_size") == 8, "sizes")
check(r.get("clip.use_gelu") is True, "gelu")
check(r.tensors["mm.model.fc.weight"][1] == (64, 256), "connector")
check("v.post_ln.weight" in r.tensors and "v.patch_embd.bias" in r.tensors, "post_ln, patch bias")
check("v.class_embd" not in r.tensors, "no class token")

r = gguf.GGUFReader(f"{D}/llava-lm-f16.gguf")
check(r.get("general.architecture") == "llama", "lm arch")
check(r.tensors["token_embd.weight"][1] == (320, 64), "lm token_embd")
check("output.weight" in r.tensors, "lm output")
if bad:
    sys.exit("; ".join(bad))
PY

if [ -x "$OMNI" ]; then
    "$OMNI" inspect "$D/idefics3-f16.gguf" >"$D/inspect.txt" 2>&1 || fail "inspect exit"
    grep -q "clip.projector_type" "$D/inspect.txt" || fail "inspect shows clip keys"
    grep -q "mm.model.fc.weight" "$D/inspect.txt" || fail "inspect shows tensors"
fi

# --- broken inputs: exit 1, a message naming the problem ---
expect_error() { # dir pattern
    if "$PYTHON" tools/hf_mmproj_to_gguf.py "$1" "$D/bad.gguf" >"$D/err.log" 2>&1; then
        fail "$1 converted"
    elif ! grep -q "$2" "$D/err.log"; then
        fail "$1: message lacks '$2': $(cat "$D/err.log")"
    fi
}
B="$D/broken"
mkdir -p "$B"
expect_error "$B/none" "config.json not found"
cp -r "$V/llava" "$B/arch" && sed -i 's/LlavaForConditionalGeneration/Qwen2VLForConditionalGeneration/' "$B/arch/config.json"
expect_error "$B/arch" "unsupported architecture"
cp -r "$V/llava" "$B/act" && sed -i 's/"quick_gelu"/"relu"/' "$B/act/config.json"
expect_error "$B/act" "hidden_act"
cp -r "$V/idefics3" "$B/pp" && rm "$B/pp/processor_config.json"
expect_error "$B/pp" "image_mean"
cp -r "$V/llava" "$B/trunc" && head -c 1000 "$V/llava/model.safetensors" >"$B/trunc/model.safetensors"
expect_error "$B/trunc" "model.safetensors"

[ $fails -eq 0 ]
