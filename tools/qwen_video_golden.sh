#!/bin/bash
# qwen_video_golden.sh - Qwen2.5-VL vision features of a video (temporal
# patches of 2 frames) from the committed tiny checkpoint
# tests/fixtures/vision/qwen2_5_vl, for tests/test_qwen2vl.c. Frame a = the
# processor's pixel values of image.png (pixels.bin, frame 0 of each row),
# frame b = a * 0.5; one slice (a, b) and a clip of two slices (a, b), (b, a).
# Writes $OUT/e_qwen_video/{video_features.bin, video_reference.json} (copy
# them into tests/fixtures/vision/qwen2_5_vl/). Run from the repository root
# where torch and transformers are installed:
#   OUT=/tmp/out tools/qwen_video_golden.sh
set -euo pipefail
mkdir -p "$OUT/e_qwen_video"
python3 - "$OUT/e_qwen_video" <<'PY'
import json, sys, os
import numpy as np
import torch, transformers
out = sys.argv[1]
d = "tests/fixtures/vision/qwen2_5_vl"
ref = json.load(open(os.path.join(d, "reference.json")))
g = ref["grid_thw"][0] if isinstance(ref["grid_thw"][0], list) else ref["grid_thw"][:3]
t0, gh, gw = int(g[0]), int(g[1]), int(g[2])
n = gh * gw
P = 14
pv = np.fromfile(os.path.join(d, "pixels.bin"), dtype=np.float32).reshape(n, 3, 2, P, P)
a = pv[:, :, 0]                        # [n][3][P][P]
b = a * np.float32(0.5)
def pair(x, y):                        # [n][3][2][P][P]: frame x then frame y per channel
    return np.stack([x, y], axis=2).reshape(n, -1)
# one slice (a, b), and a clip of two slices (a, b), (b, a)
vid1 = torch.from_numpy(pair(a, b))
vid2 = torch.from_numpy(np.concatenate([pair(a, b), pair(b, a)], 0))
model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(d, torch_dtype=torch.float32)
model.eval()
visual = getattr(getattr(model, "model", model), "visual", None) or model.visual
def feats(px, t):
    with torch.no_grad():
        o = visual(px, grid_thw=torch.tensor([[t, gh, gw]]))
    if not torch.is_tensor(o):
        cand = [getattr(o, k, None) for k in ("pooler_output", "last_hidden_state")]
        o = next(c for c in cand if c is not None and c.shape[0] == t * n // 4)
    return o.float().numpy()
f1 = feats(vid1, 1)
f2 = feats(vid2, 2)
# the still image through the same path, as a check of the set-up
f0 = np.fromfile(os.path.join(d, "features.bin"), dtype=np.float32)
still = feats(torch.from_numpy(pv.reshape(n, -1)), 1)
np.concatenate([f1.reshape(-1), f2.reshape(-1)]).astype(np.float32).tofile(os.path.join(out, "video_features.bin"))
json.dump({"grid": [gh, gw], "rows_one_slice": int(f1.shape[0]), "rows_two_slices": int(f2.shape[0]),
           "width": int(f1.shape[1]), "frame_b": "frame a * 0.5",
           "clip": "slice 0 = (a, b), slice 1 = (b, a)",
           "still_check_max_diff": float(np.abs(still.reshape(-1) - f0).max()),
           "torch": torch.__version__, "transformers": transformers.__version__},
          open(os.path.join(out, "video_reference.json"), "w"), indent=1)
print("ok", f1.shape, f2.shape, float(np.abs(still.reshape(-1) - f0).max()))
PY
