#!/bin/bash
# qwen_video_golden.sh - Qwen2.5-VL video references from the committed tiny
# checkpoint tests/fixtures/vision/qwen2_5_vl, for tests/test_qwen2vl.c and
# tests/clients/vision_qwen.test.mjs.
#
#   tools/qwen_video_golden.sh --frames
#       (numpy only) writes the clip: tests/fixtures/vision/qwen2_5_vl/video/
#       frame0..4.png, 160x96, the test picture rolled right 16 px per frame
#       with a white square moving across it (5 frames: the last temporal
#       patch pairs frame 4 with itself, as the video processor pads).
#   OUT=/tmp/out tools/qwen_video_golden.sh [JOB] [qwen3vl]
#       (torch + transformers, run from the repository root) writes $OUT/JOB/
#       (JOB default e_video); with qwen3vl the Qwen3-VL case below instead:
#   1. video_features.bin / video_reference.json: the vision tower on frame
#      pairs built from pixels.bin (frame a, b = a * 0.5): one slice (a, b)
#      and a clip of two slices (a, b), (b, a).
#   2. clip_*: the whole model on a prompt of two images and the 5-frame
#      clip as the server renders an OpenAI message [image, text, image,
#      text, video, text] (parts joined by a newline; the video part as the
#      chat template's <|vision_start|><|video_pad|><|vision_end|>), the pads
#      expanded as Qwen2_5_VLProcessor does, second_per_grid_ts = 2 / fps
#      with fps 2: M-RoPE ids (clip_positions.bin, int32 [3][n]), merged
#      input embeddings (clip_embeds.bin [n][64]), logits (clip_logits.bin
#      [n][vocab]), the video's rows (clip_video_features.bin), greedy
#      tokens with top-5 logprobs, and the ids transformers gives for other
#      fps (clip_reference.json "fps_cases", beside the published
#      get_rope_index's and the 5.x rewrite's formulas).
#   3. (qwen3vl) q3clip_*: the tiny Qwen3-VL of tests/fixtures/vision/qwen3vl
#      on the same message, the video as Qwen3VLProcessor lays it out (a
#      timestamp before each temporal patch): M-RoPE ids, logits, greedy
#      tokens with top-5 logprobs.
# Pixel values come from the Pillow image processor frame by frame (what
# the C side reproduces exactly), paired into temporal patches; the real
# video processor and Qwen2_5_VLProcessor are run beside it as checks.
set -euo pipefail
if [ "${1:-}" = "--frames" ]; then
    exec /usr/bin/python3 - <<'PY'
import os, sys
sys.path.insert(0, "tools")
import numpy as np
import make_vision_golden as mvg
d = "tests/fixtures/vision/qwen2_5_vl/video"
os.makedirs(d, exist_ok=True)
base = mvg.test_image()
for k in range(5):
    f = np.roll(base, 16 * k, axis=1).copy()
    f[30:50, 10 + 28 * k:30 + 28 * k] = 255
    mvg.write_png(os.path.join(d, f"frame{k}.png"), f)
print("wrote", d)
PY
fi
JOB=${1:-e_video}
mkdir -p "$OUT/$JOB"
if [ "${2:-}" = "qwen3vl" ]; then
    exec python3 - "$OUT/$JOB" <<'PY'
# Qwen3-VL: the tiny checkpoint of tests/fixtures/vision/qwen3vl
# (make_vision_golden.py --case qwen3vl) on the two images and the 5-frame
# clip at 2 fps, laid out as Qwen3VLProcessor does: per temporal patch
# "<t seconds>" (the middle of its two frames' times, "%.1f") +
# <|vision_start|> + its <|video_pad|> rows + <|vision_end|>, no separator.
# Writes q3clip_positions.bin (int32 [3][n]), q3clip_logits.bin ([n][vocab])
# and q3clip_reference.json (ids, greedy, top-5, checks).
import json, sys, os, re
import numpy as np
import torch, transformers
sys.path.insert(0, "tools")
import make_vision_golden as mvg
from PIL import Image
out = sys.argv[1]
d = "tests/fixtures/vision/qwen3vl"
ref = json.load(open(os.path.join(d, "reference.json")))
P = 16
torch.set_num_threads(4)
model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(
    d, torch_dtype=torch.float32, attn_implementation="eager")
model.eval()
ids_of = ref["special_ids"]
IMG_ID, VID_ID = ids_of["<|image_pad|>"], ids_of["<|video_pad|>"]
from tokenizers import Tokenizer
tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
def encode(text):
    return tok.encode(text, add_special_tokens=False).ids
ip = mvg.qwen3_image_processor(mvg.QWEN3_MIN_PIXELS, mvg.QWEN3_MAX_PIXELS)
frames = [Image.open(os.path.join("tests/fixtures/vision/qwen2_5_vl/video", f"frame{k}.png")).convert("RGB")
          for k in range(5)]
enc = [ip(images=[f], return_tensors="pt") for f in frames]
_, vh, vw = enc[0]["image_grid_thw"].reshape(-1).tolist()
nf = vh * vw
fpx = [e["pixel_values"].float().numpy().reshape(nf, 3, 2, P, P)[:, :, 0] for e in enc]
idx = list(range(len(fpx)))
if len(fpx) % 2:
    fpx.append(fpx[-1]); idx.append(idx[-1])
T = len(fpx) // 2
def pair(x, y):
    return np.stack([x, y], axis=2).reshape(nf, -1)
video_px = np.concatenate([pair(fpx[2 * k], fpx[2 * k + 1]) for k in range(T)], 0)
FPS = 2.0
stamps = [(idx[2 * k] + idx[2 * k + 1]) / 2 / FPS for k in range(T)]
img_px = [np.fromfile(os.path.join(d, f), dtype=np.float32) for f in ("pixels.bin", "pixels2.bin")]
pixel_values = torch.from_numpy(np.concatenate(img_px)).reshape(-1, 3 * 2 * P * P)
img_grid = torch.tensor(ref["grid_thw"])
IMG = "<|vision_start|><|image_pad|><|vision_end|>"
VID = "<|vision_start|><|video_pad|><|vision_end|>"
user = IMG + "\nWhat is this?\n" + IMG + "\nAnd this?\n" + VID + "\nWhat happens?"
prompt = "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
per = nf // 4
video_text = "".join(f"<{t:.1f} seconds>" + "<|vision_start|>" + "<|video_pad|>" + "<|vision_end|>"
                     for t in stamps)
expanded = prompt.replace(VID, video_text)
ids, mm, k_img = [], [], 0
n_img_tok = [int(np.prod(g)) // 4 for g in ref["grid_thw"]]
for piece in re.split(r"(<\|image_pad\|>|<\|video_pad\|>)", expanded):
    if piece == "<|image_pad|>":
        ids += [IMG_ID] * n_img_tok[k_img]; mm += [1] * n_img_tok[k_img]; k_img += 1
    elif piece == "<|video_pad|>":
        ids += [VID_ID] * per; mm += [2] * per
    elif piece:
        e = encode(piece); ids += e; mm += [0] * len(e)
N = len(ids)
captured = {}
lm = mvg.submodule(model, "model.language_model", "language_model", "model")
def hook(mod, args, kwargs):
    captured.setdefault("lm", (args, kwargs))
lm.register_forward_pre_hook(hook, with_kwargs=True)
def run(seq):
    captured.clear()
    ids_t = torch.tensor([seq])
    mm_t = torch.tensor([mm + [0] * (len(seq) - N)], dtype=torch.int32)
    kw = dict(input_ids=ids_t, attention_mask=torch.ones_like(ids_t), pixel_values=pixel_values,
              image_grid_thw=img_grid, pixel_values_videos=torch.from_numpy(video_px),
              video_grid_thw=torch.tensor([[T, vh, vw]]), use_cache=False)
    with torch.no_grad():
        try:
            o = model(mm_token_type_ids=mm_t, **kw)
        except TypeError:
            o = model(**kw)
    a_, kw_ = captured["lm"]
    pos = kw_.get("position_ids")
    if pos is None and len(a_) > 2:
        pos = a_[2]
    return o.logits[0].float(), pos.reshape(-1, pos.shape[-1])[-3:].numpy().astype(np.int64)
logits, pos = run(ids)
gen, top_ids, top_lp, cur = [], [], [], list(ids)
for _ in range(6):
    lo, _ = run(cur)
    lp = torch.log_softmax(lo[-1], -1)
    t5 = torch.topk(lp, 5)
    top_ids.append(t5.indices.tolist()); top_lp.append(t5.values.tolist())
    nxt = int(lo[-1].argmax()); gen.append(nxt); cur.append(nxt)
checks = {}
try:  # Qwen3VLProcessor's own expansion of the same text (frames at 2 fps)
    from transformers import PreTrainedTokenizerFast
    from transformers.video_utils import VideoMetadata
    fast = PreTrainedTokenizerFast.from_pretrained(d)
    vproc = transformers.Qwen3VLVideoProcessor(
        size={"shortest_edge": mvg.QWEN3_MIN_PIXELS, "longest_edge": mvg.QWEN3_MAX_PIXELS},
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        do_sample_frames=False)
    proc = transformers.Qwen3VLProcessor(image_processor=ip, tokenizer=fast, video_processor=vproc,
                                         chat_template=mvg.QWEN_TEMPLATE)
    arr = np.stack([np.asarray(f) for f in frames])
    md = VideoMetadata(total_num_frames=5, fps=FPS, frames_indices=list(range(5)))
    imgs = [Image.open("tests/fixtures/vision/image.png").convert("RGB"),
            Image.open(os.path.join(d, "image2.png")).convert("RGB")]
    po = proc(text=[prompt], images=imgs, videos=[arr], video_metadata=[md], do_sample_frames=False,
              return_tensors="pt")
    checks["processor_ids_equal"] = po["input_ids"][0].tolist() == ids
    if not checks["processor_ids_equal"]:
        checks["processor_text"] = fast.decode(po["input_ids"][0].tolist())[:2000]
    checks["processor_video_grid"] = po["video_grid_thw"].reshape(-1).tolist()
except Exception as ex:
    checks["processor_error"] = repr(ex)[:400]
np.asarray(pos, dtype="<i4").tofile(os.path.join(out, "q3clip_positions.bin"))
logits.numpy().astype("<f4").tofile(os.path.join(out, "q3clip_logits.bin"))
lp_all = torch.log_softmax(logits, -1)
cref = {"prompt": prompt, "expanded": expanded, "user": user, "ids": ids, "n_tokens": N,
        "mm_token_type_ids": mm, "image_token_id": IMG_ID, "video_token_id": VID_ID,
        "grid_thw": ref["grid_thw"], "video_grid_thw": [T, vh, vw], "n_frames": len(frames),
        "fps": FPS, "stamps": stamps, "greedy": gen, "top5_ids": top_ids, "top5_logprobs": top_lp,
        "checks": checks, "torch": torch.__version__, "transformers": transformers.__version__}
with open(os.path.join(out, "q3clip_reference.json"), "w") as f:
    json.dump(cref, f, indent=1)
    f.write("\n")
print("q3clip ok", N, "tokens, video grid", [T, vh, vw], "greedy", gen, checks, flush=True)
PY
fi
python3 - "$OUT/$JOB" <<'PY'
import json, sys, os, re
import numpy as np
import torch, transformers
sys.path.insert(0, "tools")
import make_vision_golden as mvg
from PIL import Image
out = sys.argv[1]
d = "tests/fixtures/vision/qwen2_5_vl"
ref = json.load(open(os.path.join(d, "reference.json")))
P = 14
torch.set_num_threads(4)
model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
    d, torch_dtype=torch.float32, attn_implementation="eager")
model.eval()
visual = getattr(getattr(model, "model", model), "visual", None) or model.visual

# ---- 1. frame pairs through the vision tower ----
g = ref["grid_thw"][0]
t0, gh, gw = int(g[0]), int(g[1]), int(g[2])
n = gh * gw
pv = np.fromfile(os.path.join(d, "pixels.bin"), dtype=np.float32).reshape(n, 3, 2, P, P)
a = pv[:, :, 0]
b = a * np.float32(0.5)
def pair(x, y, rows):                  # [rows][3][2][P][P]: frame x then frame y per channel
    return np.stack([x, y], axis=2).reshape(rows, -1)
vid1 = torch.from_numpy(pair(a, b, n))
vid2 = torch.from_numpy(np.concatenate([pair(a, b, n), pair(b, a, n)], 0))
def feats(px, t, h, w):
    with torch.no_grad():
        o = visual(px, grid_thw=torch.tensor([[t, h, w]]))
    if not torch.is_tensor(o):
        cand = [getattr(o, k, None) for k in ("pooler_output", "last_hidden_state")]
        o = next(c for c in cand if c is not None and c.shape[0] == t * h * w // 4)
    return o.float().numpy()
f1 = feats(vid1, 1, gh, gw)
f2 = feats(vid2, 2, gh, gw)
f0 = np.fromfile(os.path.join(d, "features.bin"), dtype=np.float32)
still = feats(torch.from_numpy(pv.reshape(n, -1)), 1, gh, gw)
np.concatenate([f1.reshape(-1), f2.reshape(-1)]).astype(np.float32).tofile(os.path.join(out, "video_features.bin"))
json.dump({"grid": [gh, gw], "rows_one_slice": int(f1.shape[0]), "rows_two_slices": int(f2.shape[0]),
           "width": int(f1.shape[1]), "frame_b": "frame a * 0.5",
           "clip": "slice 0 = (a, b), slice 1 = (b, a)",
           "still_check_max_diff": float(np.abs(still.reshape(-1) - f0).max()),
           "torch": torch.__version__, "transformers": transformers.__version__},
          open(os.path.join(out, "video_reference.json"), "w"), indent=1)
print("pairs ok", f1.shape, f2.shape, float(np.abs(still.reshape(-1) - f0).max()), flush=True)

# ---- 2. two images and a 5-frame clip through the whole model ----
FPS = 2.0
TPS = int(model.config.vision_config.tokens_per_second)
ids_of = ref["special_ids"]
IMG_ID, VID_ID = ids_of["<|image_pad|>"], ids_of["<|video_pad|>"]
from tokenizers import Tokenizer
tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
def encode(text):
    return tok.encode(text, add_special_tokens=False).ids
# the tokenizer gives the committed reference's ids for its prompt
pieces = ref["prompt"].split("<|image_pad|>")
chk = []
for i, piece in enumerate(pieces):
    chk += encode(piece)
    if i < len(pieces) - 1:
        chk += [IMG_ID] * ref["n_image_tokens"][i]
assert chk == ref["ids"], "tokenizer.json does not give the reference ids"

ip = mvg.qwen_image_processor(mvg.QWEN_MIN_PIXELS, mvg.QWEN_MAX_PIXELS)
frame_dir = os.path.join(d, "video")
frames = [Image.open(os.path.join(frame_dir, f"frame{k}.png")).convert("RGB") for k in range(5)]
enc = [ip(images=[f], return_tensors="pt") for f in frames]
fgrid = [e["image_grid_thw"].reshape(-1).tolist() for e in enc]
assert all(x == fgrid[0] for x in fgrid), fgrid
_, vh, vw = fgrid[0]
nf = vh * vw
fpx = [e["pixel_values"].float().numpy().reshape(nf, 3, 2, P, P)[:, :, 0] for e in enc]
if len(fpx) % 2:
    fpx.append(fpx[-1])                # the video processor repeats the last frame
T = len(fpx) // 2
video_px = np.concatenate([pair(fpx[2 * k], fpx[2 * k + 1], nf) for k in range(T)], 0)
video_grid = torch.tensor([[T, vh, vw]])
img_px = [np.fromfile(os.path.join(d, f), dtype=np.float32) for f in ("pixels.bin", "pixels2.bin")]
img_grid = torch.tensor(ref["grid_thw"])
pixel_values = torch.from_numpy(np.concatenate(img_px)).reshape(-1, 3 * 2 * P * P)

IMG = "<|vision_start|><|image_pad|><|vision_end|>"
VID = "<|vision_start|><|video_pad|><|vision_end|>"
user = IMG + "\nWhat is this?\n" + IMG + "\nAnd this?\n" + VID + "\nWhat happens?"
prompt = "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
ids, mm, k_img = [], [], 0
n_img_tok = [int(np.prod(gg)) // 4 for gg in ref["grid_thw"]]
n_vid_tok = T * vh * vw // 4
for piece in re.split(r"(<\|image_pad\|>|<\|video_pad\|>)", prompt):
    if piece == "<|image_pad|>":
        ids += [IMG_ID] * n_img_tok[k_img]; mm += [1] * n_img_tok[k_img]; k_img += 1
    elif piece == "<|video_pad|>":
        ids += [VID_ID] * n_vid_tok; mm += [2] * n_vid_tok
    elif piece:
        e = encode(piece); ids += e; mm += [0] * len(e)
N = len(ids)

captured = {}
lm = mvg.submodule(model, "model.language_model", "language_model", "model")
def hook(mod, args, kwargs):
    if "lm" not in captured:
        captured["lm"] = (args, kwargs)
lm.register_forward_pre_hook(hook, with_kwargs=True)

def run(seq, spg):
    captured.clear()
    ids_t = torch.tensor([seq])
    mm_t = torch.tensor([mm + [0] * (len(seq) - N)], dtype=torch.int32)
    kw = dict(input_ids=ids_t, attention_mask=torch.ones_like(ids_t), pixel_values=pixel_values,
              image_grid_thw=img_grid, pixel_values_videos=torch.from_numpy(video_px),
              video_grid_thw=video_grid, second_per_grid_ts=torch.tensor([spg], dtype=torch.float32),
              use_cache=False)
    with torch.no_grad():
        try:
            o = model(mm_token_type_ids=mm_t, **kw)
        except TypeError:
            o = model(**kw)
    a_, kw_ = captured["lm"]
    pos = kw_.get("position_ids")
    if pos is None and len(a_) > 2:
        pos = a_[2]
    emb = kw_.get("inputs_embeds")
    return o.logits[0].float(), pos.reshape(-1, pos.shape[-1])[-3:].numpy().astype(np.int64), emb

# the two formulas: the published get_rope_index (float time * tokens per
# second, truncated; text after a grid one past its largest id) and the
# transformers 5.x rewrite (int(second_per_grid_t); text after a grid at
# start + max(h, w))
def formula(spg, v5):
    pos, cur, k, i, img_i = [], 0, 0, 0, 0
    while i < N:
        if mm[i] == 0:
            pos.append((cur, cur, cur)); cur += 1; i += 1; continue
        if mm[i] == 1:
            t_, h_, w_ = ref["grid_thw"][img_i]; img_i += 1; step = 0.0
        else:
            t_, h_, w_ = T, vh, vw
            step = TPS * int(spg) if v5 else None
        h_, w_ = h_ // 2, w_ // 2
        mx = 0
        for tt in range(t_):
            if mm[i] == 1:
                ti = 0
            elif v5:
                ti = tt * step
            else:
                ti = int(np.float32(tt) * np.float32(spg) * np.float32(TPS))
            for hh in range(h_):
                for ww in range(w_):
                    pos.append((cur + ti, cur + hh, cur + ww)); mx = max(mx, ti, hh, ww)
        i += t_ * h_ * w_
        cur = cur + max(h_, w_) if v5 else cur + mx + 1
    return np.array(pos, dtype=np.int64).T

spg = 2.0 / FPS
logits, pos, emb = run(ids, spg)
fps_cases = []
for fps in (FPS, 1.0, 0.5, 3.0):
    _, p_, _ = run(ids, 2.0 / fps)
    v4, v5 = formula(2.0 / fps, False), formula(2.0 / fps, True)
    fps_cases.append({"fps": fps, "second_per_grid_t": 2.0 / fps, "transformers": p_.tolist(),
                      "published_formula": v4.tolist(), "v5_formula": v5.tolist(),
                      "transformers_is_published": bool((p_ == v4).all()),
                      "transformers_is_v5": bool((p_ == v5).all())})
    print("fps", fps, "published", fps_cases[-1]["transformers_is_published"], "v5",
          fps_cases[-1]["transformers_is_v5"], flush=True)
gen, top_ids, top_lp, cur = [], [], [], list(ids)
for _ in range(6):
    lo, _, _ = run(cur, spg)
    lp = torch.log_softmax(lo[-1], -1)
    t5 = torch.topk(lp, 5)
    top_ids.append(t5.indices.tolist()); top_lp.append(t5.values.tolist())
    nxt = int(lo[-1].argmax()); gen.append(nxt); cur.append(nxt)

checks = {}
try:  # the real video processor on the same frames (its torchvision path may round differently)
    vpc = getattr(transformers, "Qwen2VLVideoProcessor")
    vproc = vpc(size={"shortest_edge": mvg.QWEN_MIN_PIXELS, "longest_edge": mvg.QWEN_MAX_PIXELS},
                patch_size=14, temporal_patch_size=2, merge_size=2,
                image_mean=[0.48145466, 0.4578275, 0.40821073],
                image_std=[0.26862954, 0.26130258, 0.27577711], do_sample_frames=False)
    arr = np.stack([np.asarray(f) for f in frames])
    vo = vproc(videos=[arr], return_tensors="pt", do_sample_frames=False)
    checks["video_processor_grid"] = vo["video_grid_thw"].reshape(-1).tolist()
    pvv = vo["pixel_values_videos"].float().numpy()
    checks["video_processor_pixel_max_diff"] = (float(np.abs(pvv - video_px).max())
                                                if pvv.shape == video_px.shape else str(pvv.shape))
except Exception as ex:
    checks["video_processor_error"] = repr(ex)[:300]
try:  # Qwen2_5_VLProcessor's expansion of the same text
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast.from_pretrained(d)
    proc = transformers.Qwen2_5_VLProcessor(image_processor=ip, tokenizer=fast, video_processor=vproc,
                                            chat_template=mvg.QWEN_TEMPLATE)
    imgs = [Image.open(os.path.join("tests/fixtures/vision", "image.png")).convert("RGB"),
            Image.open(os.path.join(d, "image2.png")).convert("RGB")]
    po = proc(text=[prompt], images=imgs, videos=[arr], fps=FPS, do_sample_frames=False,
              return_tensors="pt")
    checks["processor_ids_equal"] = po["input_ids"][0].tolist() == ids
    if "second_per_grid_ts" in po:
        checks["processor_second_per_grid_ts"] = [float(x) for x in po["second_per_grid_ts"]]
    rendered = proc.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                        add_generation_prompt=True)
    checks["template_renders_prompt"] = rendered == prompt
except Exception as ex:
    checks["processor_error"] = repr(ex)[:300]

emb = emb[0].float().numpy()
mm_np = np.array(mm)
np.asarray(pos, dtype="<i4").tofile(os.path.join(out, "clip_positions.bin"))
emb.astype("<f4").tofile(os.path.join(out, "clip_embeds.bin"))
logits.numpy().astype("<f4").tofile(os.path.join(out, "clip_logits.bin"))
emb[mm_np == 2].astype("<f4").tofile(os.path.join(out, "clip_video_features.bin"))
cref = {"prompt": prompt, "user": user, "ids": ids, "n_tokens": N, "mm_token_type_ids": mm,
        "image_token_id": IMG_ID, "video_token_id": VID_ID, "grid_thw": ref["grid_thw"],
        "video_grid_thw": [T, vh, vw], "n_frames": len(frames), "fps": FPS,
        "second_per_grid_t": spg, "tokens_per_second": TPS, "n_video_tokens": n_vid_tok,
        "greedy": gen, "top5_ids": top_ids, "top5_logprobs": top_lp, "fps_cases": fps_cases,
        "checks": checks, "logits_std": float(logits.std()),
        "torch": torch.__version__, "transformers": transformers.__version__}
with open(os.path.join(out, "clip_reference.json"), "w") as f:
    json.dump(cref, f, indent=1)
    f.write("\n")
print("clip ok", N, "tokens, video grid", [T, vh, vw], "greedy", gen, checks, flush=True)
PY
