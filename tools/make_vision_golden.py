#!/usr/bin/python3
"""make_vision_golden.py - tiny Hugging Face vision-language models behind the vision golden tests.

    python3 tools/make_vision_golden.py --image-only tests/fixtures/vision/image.png
    python3 tools/make_vision_golden.py --out tests/fixtures/vision

The first form (numpy only) writes the fixed 160x96 test picture. The second
needs torch, transformers and Pillow (run it where they are installed): for
each case it builds a seeded random-weight model, feeds the picture through
the model's own Hugging Face processor (preprocessing included) and writes
OUT/<case>/ with:

  config.json, model.safetensors, preprocessor_config.json, tokenizer files
                   save_pretrained output (weights stored as bfloat16)
  reference.json   prompt, rendered text, input ids, image token id, shapes,
                   library versions
  pixels.bin       float32 [n_images][3][H][W]: the processor's pixel_values
  features.bin     float32 [n_images][n_patches][n_embd_vision]: the vision
                   tower output the projector reads (llava: hidden state of
                   layer vision_feature_layer without CLS; idefics3: after
                   post_layernorm)
  embeddings.bin   float32 [n_image_tokens][n_embd_text]: projected embeddings
  logits.bin       float32 [n_tokens][vocab]: the full model's logits

Cases: llava (CLIP ViT, quick_gelu, 112 px / patch 14, 2-layer GELU MLP,
feature layer -2) and idefics3 (SigLIP, 64 px / patch 8, pixel shuffle 2,
linear connector, image split into 2x2 tiles plus a global view), qwen2_5_vl
and gemma3 (SigLIP 224 px / patch 14, 4x4 average pool to 16 tokens, soft-
embedding RMSNorm + projection; 6-layer Gemma 3 text model whose image
tokens attend to each other both ways; greedy tokens and top-5 logprobs) and
qwen3vl (16 px patches, learned position table interpolated to the grid,
DeepStack features added to the first LM layers, interleaved M-RoPE).
The reference runs in float32 on the bfloat16-rounded weights.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np

IMAGE_W, IMAGE_H = 160, 96


def test_image():
    """uint8 [H][W][3]: gradients, a disc, a bar and seeded noise (no flat areas)."""
    y, x = np.mgrid[0:IMAGE_H, 0:IMAGE_W].astype(np.float64)
    img = np.zeros((IMAGE_H, IMAGE_W, 3))
    img[..., 0] = 255 * x / (IMAGE_W - 1)
    img[..., 1] = 255 * y / (IMAGE_H - 1)
    img[..., 2] = 128 + 100 * np.sin(x / 7.0) * np.cos(y / 5.0)
    disc = (x - 100) ** 2 + (y - 40) ** 2 < 25 ** 2
    img[disc] = [240, 220, 30]
    img[60:75, 20:90] = [20, 40, 200]
    img += np.random.default_rng(7).normal(0, 12, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def write_png(path, rgb):
    """Minimal RGB8 PNG writer (zlib + CRC chunks)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\0" + rgb[r].tobytes() for r in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


# ---- models (imports below need torch / transformers) ----

TEXT_BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEMPLATE = ("{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}")


def tokenizer(specials):
    import make_golden  # tools/make_golden.py: the byte-level BPE builder
    from transformers import PreTrainedTokenizerFast
    tok = make_golden.bytelevel_tokenizer(60, LLAMA3_RE, specials, bos="<|begin_of_text|>",
                                          ignore_merges=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>")
    fast.chat_template = TEMPLATE
    return tok, fast


def case_llava():
    import transformers
    from PIL import Image
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<image>"]
    tok, fast = tokenizer(specials)
    image_id = tok.token_to_id("<image>")
    vcfg = transformers.CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                         num_attention_heads=4, image_size=112, patch_size=14,
                                         hidden_act="quick_gelu", layer_norm_eps=1e-5,
                                         projection_dim=64)
    tcfg = transformers.LlamaConfig(vocab_size=(tok.get_vocab_size() + 31) // 32 * 32,
                                    bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                                    eos_token_id=tok.token_to_id("<|end_of_text|>"), **TEXT_BASE)
    cfg = transformers.LlavaConfig(vision_config=vcfg, text_config=tcfg, vision_feature_layer=-2,
                                   vision_feature_select_strategy="default",
                                   projector_hidden_act="gelu", tie_word_embeddings=False)
    cfg.image_token_index = image_id
    cfg.image_token_id = image_id
    ip = pil_processor("CLIPImageProcessor")(
        do_resize=True, size={"shortest_edge": 112}, resample=Image.BICUBIC, do_center_crop=True,
        crop_size={"height": 112, "width": 112}, do_rescale=True, do_normalize=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711], do_convert_rgb=True)
    try:
        proc = transformers.LlavaProcessor(image_processor=ip, tokenizer=fast, patch_size=14,
                                           vision_feature_select_strategy="default",
                                           image_token="<image>", num_additional_image_tokens=1,
                                           chat_template=TEMPLATE)
    except TypeError:
        proc = transformers.LlavaProcessor(image_processor=ip, tokenizer=fast, patch_size=14,
                                           vision_feature_select_strategy="default",
                                           image_token="<image>", chat_template=TEMPLATE)
    return dict(cls=transformers.LlavaForConditionalGeneration, cfg=cfg, proc=proc, fast=fast,
                image_id=image_id, prompt="<|begin_of_text|>user: <image>\nWhat is this?\nassistant:")


def case_idefics3():
    import transformers
    from PIL import Image
    specials = (["<|begin_of_text|>", "<|end_of_text|>", "<fake_token_around_image>", "<image>",
                 "<global-img>", "<end_of_utterance>"]
                + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)])
    tok, fast = tokenizer(specials)
    image_id = tok.token_to_id("<image>")
    vcfg = transformers.Idefics3VisionConfig(hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             num_channels=3, image_size=64, patch_size=8,
                                             hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    tcfg = transformers.LlamaConfig(vocab_size=(tok.get_vocab_size() + 31) // 32 * 32,
                                    bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                                    eos_token_id=tok.token_to_id("<|end_of_text|>"), **TEXT_BASE)
    cfg = transformers.Idefics3Config(vision_config=vcfg, text_config=tcfg, scale_factor=2,
                                      image_token_id=image_id, tie_word_embeddings=False)
    ip = pil_processor("Idefics3ImageProcessor")(
        do_convert_rgb=True, do_resize=True, size={"longest_edge": 128}, resample=Image.LANCZOS,
        do_image_splitting=True, max_image_size={"longest_edge": 64}, do_rescale=True,
        do_normalize=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_pad=True)
    proc = transformers.Idefics3Processor(image_processor=ip, tokenizer=fast, image_seq_len=16,
                                          chat_template=TEMPLATE)
    return dict(cls=transformers.Idefics3ForConditionalGeneration, cfg=cfg, proc=proc, fast=fast,
                image_id=image_id, prompt="<|begin_of_text|>user: <image>What is this?\nassistant:")


def pil_processor(name):
    """The Pillow-backed image processor (transformers >= 5 names it <name>Pil;
    its default backend resizes with torchvision, which is not Pillow's filter)."""
    import transformers
    return getattr(transformers, name + "Pil", None) or getattr(transformers, name)


CASES = {"llava": case_llava, "idefics3": case_idefics3}


def randomize(model, gen):
    """Norm gains 1 +- 0.2, biases and other vectors +- 0.2 (HF starts them at 1 and 0)."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def submodule(model, *paths):
    for path in paths:
        m = model
        try:
            for part in path.split("."):
                m = getattr(m, part)
            return m
        except AttributeError:
            continue
    raise AttributeError(f"none of {paths}")


def save_f32(path, t):
    np.ascontiguousarray(t.detach().float().cpu().numpy()).astype("<f4").tofile(path)


def build(name, out, image_path, seed):
    import torch
    import transformers
    from PIL import Image
    spec = CASES[name]()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    torch.manual_seed(seed)
    cfg = spec["cfg"]
    cfg._attn_implementation = "eager"
    model = spec["cls"](cfg).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    bf16_round(model)

    image = Image.open(image_path).convert("RGB")
    proc = spec["proc"]
    inputs = proc(text=[spec["prompt"]], images=[image] if name == "llava" else [[image]],
                  return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    pv = inputs["pixel_values"].float()
    n_image_tokens = sum(1 for i in ids if i == spec["image_id"])

    with torch.no_grad():
        out_all = model(**inputs)
        logits = out_all.logits[0].float()
        if name == "llava":
            vt = submodule(model, "model.vision_tower", "vision_tower")
            mp = submodule(model, "model.multi_modal_projector", "multi_modal_projector")
            hs = vt(pv, output_hidden_states=True).hidden_states
            feats = hs[cfg.vision_feature_layer][:, 1:]
            emb = mp(feats)
            pixels = pv
        else:
            vm = submodule(model, "model.vision_model", "vision_model")
            cn = submodule(model, "model.connector", "connector")
            pixels = pv[0]
            mask = torch.ones(pixels.shape[0], pixels.shape[2] // 8, pixels.shape[3] // 8,
                              dtype=torch.bool)
            feats = vm(pixel_values=pixels, patch_attention_mask=mask).last_hidden_state
            emb = cn(feats)
        emb = emb.reshape(-1, emb.shape[-1])
        if emb.shape[0] != n_image_tokens:
            raise RuntimeError(f"{name}: {emb.shape[0]} embeddings for {n_image_tokens} image tokens")
        # The fusion recipe the C side uses: token embeddings with image rows
        # substituted in order, through the language model alone.
        embed = model.get_input_embeddings()
        x = embed(torch.tensor([ids]))[0].clone()
        x[torch.tensor(ids) == spec["image_id"]] = emb
        lm = submodule(model, "model.language_model", "language_model.model", "model.text_model")
        head = model.get_output_embeddings()
        h = lm(inputs_embeds=x[None]).last_hidden_state
        logits2 = head(h)[0]
        fuse_diff = float((logits2 - logits).abs().max())
        if fuse_diff > 1e-4:
            raise RuntimeError(f"{name}: fused-embedding logits differ by {fuse_diff}")

    model.to(torch.bfloat16).save_pretrained(d)
    proc.save_pretrained(d)
    spec["fast"].save_pretrained(d)
    save_f32(os.path.join(d, "pixels.bin"), pixels)
    save_f32(os.path.join(d, "features.bin"), feats)
    save_f32(os.path.join(d, "embeddings.bin"), emb)
    save_f32(os.path.join(d, "logits.bin"), logits)
    ref = {"case": name, "prompt": spec["prompt"],
           "rendered": spec["fast"].decode(ids), "ids": ids, "n_tokens": len(ids),
           "image_token_id": spec["image_id"], "n_image_tokens": n_image_tokens,
           "pixels_shape": list(pixels.shape), "features_shape": list(feats.shape),
           "embeddings_shape": list(emb.shape), "vocab_size": int(logits.shape[-1]),
           "fused_logits_max_diff": fuse_diff, "seed": seed,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "image_processor": type(proc.image_processor).__name__,
           "features_abs_max": float(feats.abs().max()), "embeddings_std": float(emb.std()),
           "logits_std": float(logits.std())}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {len(ids)} tokens ({n_image_tokens} image), pixels {list(pixels.shape)}, "
          f"{size / 1024:.0f} KiB: {sorted(os.listdir(d))}", file=sys.stderr)


# ---- Qwen2.5-VL (its own flow: dynamic resolution, grid_thw, M-RoPE) ----

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QWEN_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
# Two images as the server renders an OpenAI message [image, text, image, text]
# (parts joined by a newline, each image part replaced by QWEN_MARKER).
QWEN_USER = QWEN_MARKER + "\nWhat is this?\n" + QWEN_MARKER + "\nAnd this?"
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 56 * 56, 28 * 28 * 64
QWEN_SMALL_MAX_PIXELS = 28 * 28 * 8  # second processor: exercises the max_pixels branch
QWEN_CROP = (30, 20, 130, 80)      # the second picture: a 100x60 crop of the first


def qwen_vl_processor(min_pixels, max_pixels, patch, mean, std):
    """Qwen2VLImageProcessor (Pillow) with the given bounds, patch size and
    normalisation (the Qwen2.5-VL and Qwen3-VL cases differ only there)."""
    from PIL import Image
    cls = pil_processor("Qwen2VLImageProcessor")
    kw = dict(do_resize=True, resample=Image.BICUBIC, do_rescale=True, do_normalize=True,
              image_mean=mean, image_std=std, do_convert_rgb=True, patch_size=patch,
              temporal_patch_size=2, merge_size=2)
    try:
        return cls(size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, **kw)
    except (TypeError, ValueError):
        return cls(min_pixels=min_pixels, max_pixels=max_pixels, **kw)


def qwen_image_processor(min_pixels, max_pixels):
    return qwen_vl_processor(min_pixels, max_pixels, 14, [0.48145466, 0.4578275, 0.40821073],
                             [0.26862954, 0.26130258, 0.27577711])


def qwen_tokenizer():
    """The byte-level test tokenizer with Qwen's special tokens and chat
    template: (tok, fast, ids_of, vocab rounded up to 32)."""
    from transformers import PreTrainedTokenizerFast
    tok = make_golden_bytelevel(QWEN_SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = QWEN_TEMPLATE
    ids_of = {t: tok.token_to_id(t) for t in QWEN_SPECIALS}
    return tok, fast, ids_of, (tok.get_vocab_size() + 31) // 32 * 32


def qwen_prompt_ids(tok, fast, ids_of, grids):
    """QWEN_USER through the chat template with each image's pads expanded
    (as Qwen2_5_VLProcessor and Qwen3VLProcessor do): (prompt, rows per
    image, ids, input_ids)."""
    import torch
    prompt = fast.apply_chat_template([{"role": "user", "content": QWEN_USER}], tokenize=False,
                                      add_generation_prompt=True)
    n_img_tokens = [int(g.prod()) // 4 for g in grids]  # 2x2 merge
    pieces = prompt.split("<|image_pad|>")
    assert len(pieces) == 3, pieces
    ids = []
    for i, piece in enumerate(pieces):
        ids += tok.encode(piece, add_special_tokens=False).ids
        if i < 2:
            ids += [ids_of["<|image_pad|>"]] * n_img_tokens[i]
    return prompt, n_img_tokens, ids, torch.tensor([ids])


def qwen_runner(model, ids_of, pixel_values, grid_thw):
    """The whole model on a prompt of ids with the images (no cache)."""
    import torch

    def run(ids_t):
        # newer releases want mm_token_type_ids (1 = image token) for M-RoPE
        kw = dict(input_ids=ids_t, attention_mask=torch.ones_like(ids_t), pixel_values=pixel_values,
                  image_grid_thw=grid_thw, use_cache=False)
        mm = (ids_t == ids_of["<|image_pad|>"]).to(torch.int32)
        try:
            return model(mm_token_type_ids=mm, **kw)
        except TypeError:
            return model(**kw)
    return run


def greedy_top5(run, input_ids, steps=6):
    """Greedy continuation (no cache: each step recomputes the M-RoPE ids):
    the tokens, each step's top-5 ids and log-probs."""
    import torch
    gen, top_ids, top_lp = [], [], []
    cur = input_ids
    for _ in range(steps):
        lo = run(cur).logits[0, -1].float()
        lp = torch.log_softmax(lo, -1)
        t5 = torch.topk(lp, 5)
        top_ids.append(t5.indices.tolist())
        top_lp.append(t5.values.tolist())
        nxt = int(lo.argmax())
        gen.append(nxt)
        cur = torch.cat([cur, torch.tensor([[nxt]])], 1)
    return gen, top_ids, top_lp


def bf16_round(model):
    """Every weight rounded to bfloat16 (what save_pretrained stores), kept in float."""
    import torch
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def save_video_config(d, processor_type, min_pixels, max_pixels):
    """video_preprocessor_config.json with the bounds the video goldens
    (tools/qwen_video_golden.sh) give the video processor: the image bounds,
    so the 160x96 test frames keep the image size (real checkpoints' video
    bounds are far larger). hf_mmproj_to_gguf.py writes them as
    clip.vision.video_min_pixels / video_max_pixels."""
    with open(os.path.join(d, "video_preprocessor_config.json"), "w") as f:
        json.dump({"video_processor_type": processor_type,
                   "size": {"shortest_edge": min_pixels, "longest_edge": max_pixels}}, f, indent=2)


def build_qwen(out, image_path, seed):
    """Qwen2_5_VLForConditionalGeneration: window attention (window 112 px),
    full attention on blocks 1 and 3, RMSNorm + SwiGLU ViT, 2x2 patch merger;
    M-RoPE text model with mrope_section [2, 3, 3] (head_dim 16)."""
    import torch
    import transformers
    from PIL import Image
    name = "qwen2_5_vl"
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok, fast, ids_of, vocab = qwen_tokenizer()
    vision = dict(depth=4, hidden_size=48, hidden_act="silu", intermediate_size=80, num_heads=3,
                  in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                  tokens_per_second=2, window_size=112, out_hidden_size=64,
                  fullatt_block_indexes=[1, 3], initializer_range=0.1)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                initializer_range=0.1, rms_norm_eps=1e-6, rope_theta=10000.0,
                rope_parameters=dict(rope), tie_word_embeddings=False,
                bos_token_id=ids_of["<|endoftext|>"], eos_token_id=ids_of["<|im_end|>"])
    cfg = transformers.Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids_of["<|image_pad|>"],
        video_token_id=ids_of["<|video_pad|>"], vision_start_token_id=ids_of["<|vision_start|>"],
        vision_end_token_id=ids_of["<|vision_end|>"], tie_word_embeddings=False)
    tc = cfg.text_config
    rp = getattr(tc, "rope_parameters", None) or getattr(tc, "rope_scaling", None) or {}
    if list(rp.get("mrope_section", [])) != [2, 3, 3]:  # older releases: rope_scaling
        tc.rope_scaling = {"type": "mrope", "rope_type": "default", "mrope_section": [2, 3, 3]}
    cfg._attn_implementation = "eager"
    try:
        cfg.vision_config._attn_implementation = "eager"
        cfg.text_config._attn_implementation = "eager"
    except AttributeError:
        pass
    torch.manual_seed(seed)
    model = transformers.Qwen2_5_VLForConditionalGeneration(cfg).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    bf16_round(model)

    image = Image.open(image_path).convert("RGB")
    image2 = image.crop(QWEN_CROP)
    image2.save(os.path.join(d, "image2.png"))
    ip = qwen_image_processor(QWEN_MIN_PIXELS, QWEN_MAX_PIXELS)
    small = qwen_image_processor(QWEN_MIN_PIXELS, QWEN_SMALL_MAX_PIXELS)
    enc = [ip(images=[im], return_tensors="pt") for im in (image, image2)]
    enc_small = small(images=[image], return_tensors="pt")
    pv = [e["pixel_values"].float() for e in enc]
    grids = [e["image_grid_thw"].reshape(-1, 3) for e in enc]
    visual = submodule(model, "model.visual", "visual")
    prompt, n_img_tokens, ids, input_ids = qwen_prompt_ids(tok, fast, ids_of, grids)
    pixel_values = torch.cat(pv, 0)
    grid_thw = torch.cat(grids, 0)

    captured = {}

    def grab(key):
        def hook(mod, args, kwargs, output=None):
            if key not in captured:
                captured[key] = (args, kwargs)
        return hook

    lm = submodule(model, "model.language_model", "language_model", "model")
    h1 = lm.register_forward_pre_hook(grab("lm"), with_kwargs=True)
    h2 = visual.merger.register_forward_pre_hook(grab("merger"), with_kwargs=True)
    blocks = []
    hb = [b.register_forward_hook(lambda m, a, o: blocks.append(o[0] if isinstance(o, tuple) else o))
          for b in visual.blocks]
    with torch.no_grad():
        out1 = visual(pv[0], grid_thw=grids[0])
        ma, mkw = captured.pop("merger")
        vit_out = (ma[0] if ma else next(v for v in mkw.values() if torch.is_tensor(v))).float()
        cand = [out1] if torch.is_tensor(out1) else [getattr(out1, k, None) for k in
                                                     ("pooler_output", "last_hidden_state")]
        feats = next(c for c in cand if c is not None and c.shape[0] == n_img_tokens[0])
        block_outs = [b.reshape(-1, b.shape[-1]).clone() for b in blocks[:len(visual.blocks)]]
        out2 = visual(pv[1], grid_thw=grids[1])
        cand = [out2] if torch.is_tensor(out2) else [getattr(out2, k, None) for k in
                                                     ("pooler_output", "last_hidden_state")]
        feats2 = next(c for c in cand if c is not None and c.shape[0] == n_img_tokens[1])
        run = qwen_runner(model, ids_of, pixel_values, grid_thw)
        o = run(input_ids)
        logits = o.logits[0].float()
        a, kw = captured["lm"]
        pos = kw.get("position_ids")
        if pos is None and len(a) > 2:
            pos = a[2]
        gen, top_ids, top_lp = greedy_top5(run, input_ids)
    for h in [h1, h2] + hb:
        h.remove()
    if pos is None:
        raise RuntimeError("qwen: no position_ids reached the language model")
    pos = pos.reshape(-1, pos.shape[-1])[-3:]  # [3][n]: temporal, height, width

    model.to(torch.bfloat16).save_pretrained(d)
    ip.save_pretrained(d)
    save_video_config(d, "Qwen2VLVideoProcessor", QWEN_MIN_PIXELS, QWEN_MAX_PIXELS)
    fast.save_pretrained(d)
    save_f32(os.path.join(d, "pixels.bin"), pv[0])
    save_f32(os.path.join(d, "pixels2.bin"), pv[1])
    save_f32(os.path.join(d, "pixels_small.bin"), enc_small["pixel_values"])
    save_f32(os.path.join(d, "features.bin"), feats)
    save_f32(os.path.join(d, "features2.bin"), feats2)
    save_f32(os.path.join(d, "vit_out.bin"), vit_out)
    save_f32(os.path.join(d, "block0.bin"), block_outs[0])
    save_f32(os.path.join(d, "logits.bin"), logits)
    np.asarray(pos.cpu().numpy(), dtype="<i4").tofile(os.path.join(d, "positions.bin"))
    ref = {"case": name, "prompt": prompt, "user": QWEN_USER, "ids": ids, "n_tokens": len(ids),
           "image_token_id": ids_of["<|image_pad|>"], "special_ids": ids_of,
           "grid_thw": [g.reshape(-1).tolist() for g in grids],
           "grid_thw_small": enc_small["image_grid_thw"].reshape(-1).tolist(),
           "n_image_tokens": n_img_tokens, "crop": list(QWEN_CROP),
           "min_pixels": QWEN_MIN_PIXELS, "max_pixels": QWEN_MAX_PIXELS,
           "small_max_pixels": QWEN_SMALL_MAX_PIXELS,
           "pixels_shape": list(pv[0].shape), "features_shape": list(feats.shape),
           "vit_out_shape": list(vit_out.shape), "block0_shape": list(block_outs[0].shape),
           "vocab_size": int(logits.shape[-1]), "positions_shape": list(pos.shape),
           "greedy": gen, "greedy_text": fast.decode(gen), "top5_ids": top_ids, "top5_logprobs": top_lp,
           "seed": seed, "torch": torch.__version__, "transformers": transformers.__version__,
           "image_processor": type(ip).__name__,
           "features_abs_max": float(feats.abs().max()), "logits_std": float(logits.std())}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {len(ids)} tokens ({n_img_tokens} image), grids {ref['grid_thw']}, "
          f"{size / 1024:.0f} KiB: {sorted(os.listdir(d))}", file=sys.stderr)


# ---- Gemma 3 (SigLIP at a fixed size, 4x4 average pool, soft-embedding norm,
# bidirectional attention over each image's tokens in the causal LM) ----

GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                  "<end_of_image>", "<image_soft_token>"]
GEMMA_SIZE, GEMMA_PATCH, GEMMA_TOKENS = 224, 14, 16   # 16x16 patches pooled 4x4 -> 16 tokens
GEMMA_WINDOW = 8                                      # shorter than an image: the OR of the masks shows
# The prompt as the server renders an OpenAI message [image, text] (parts
# joined by a newline, the image part replaced by the marker the chat
# template itself writes, <start_of_image>), then expanded as
# Gemma3Processor does: "\n\n<start_of_image>" + image tokens +
# "<end_of_image>\n\n".
GEMMA_USER = "<start_of_image>\nWhat is this?"
GEMMA_RENDERED = "<start_of_turn>user\n" + GEMMA_USER + "<end_of_turn>\n<start_of_turn>model\n"


def build_gemma3(out, image_path, seed):
    """Gemma3ForConditionalGeneration: SigLIP 224 px / patch 14 (2 layers),
    mm_tokens_per_image 16 (avg pool 4), text 6 layers (5 sliding, window 8
    shorter than the image's 16 tokens, then 1 global)."""
    import torch
    import transformers
    from PIL import Image
    name = "gemma3"
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok = make_golden_bytelevel(GEMMA_SPECIALS)
    from transformers import PreTrainedTokenizerFast
    ids_of = {t: tok.token_to_id(t) for t in GEMMA_SPECIALS}
    from tokenizers import processors
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", ids_of["<bos>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>")
    vocab = (tok.get_vocab_size() + 31) // 32 * 32
    vcfg = transformers.SiglipVisionConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                           num_attention_heads=3, num_channels=3, image_size=GEMMA_SIZE,
                                           patch_size=GEMMA_PATCH, hidden_act="gelu_pytorch_tanh",
                                           layer_norm_eps=1e-6, vision_use_head=False)
    kw = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
              max_position_embeddings=512, initializer_range=0.1, rms_norm_eps=1e-6,
              hidden_activation="gelu_pytorch_tanh", sliding_window=GEMMA_WINDOW,
              pad_token_id=ids_of["<pad>"], bos_token_id=ids_of["<bos>"], eos_token_id=ids_of["<eos>"],
              tie_word_embeddings=True)
    try:
        tcfg = transformers.Gemma3TextConfig(
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, **kw)
    except (TypeError, ValueError, KeyError):
        tcfg = transformers.Gemma3TextConfig(rope_theta=1000000.0, rope_local_base_freq=10000.0, **kw)
    cfg = transformers.Gemma3Config(text_config=tcfg, vision_config=vcfg, mm_tokens_per_image=GEMMA_TOKENS,
                                    boi_token_index=ids_of["<start_of_image>"],
                                    eoi_token_index=ids_of["<end_of_image>"],
                                    image_token_index=ids_of["<image_soft_token>"])
    try:
        cfg.image_token_id = ids_of["<image_soft_token>"]
    except AttributeError:  # a read-only alias of image_token_index
        pass
    cfg._attn_implementation = "eager"
    for sub in ("vision_config", "text_config"):
        try:
            getattr(cfg, sub)._attn_implementation = "eager"
        except AttributeError:
            pass
    torch.manual_seed(seed)
    model = transformers.Gemma3ForConditionalGeneration(cfg).float().eval()
    gen_ = torch.Generator().manual_seed(seed + 1)
    randomize(model, gen_)
    with torch.no_grad():
        # the projector starts at zero (and its norm at 0 = gain 1): draw both
        mp = submodule(model, "model.multi_modal_projector", "multi_modal_projector")
        mp.mm_input_projection_weight.copy_(0.15 * torch.randn(mp.mm_input_projection_weight.shape,
                                                               generator=gen_))
        mp.mm_soft_emb_norm.weight.copy_(0.3 * torch.randn(mp.mm_soft_emb_norm.weight.shape, generator=gen_))
        for n_, p in model.named_parameters():  # Gemma RMSNorm gains are (1 + w): centre w on 0
            if p.dim() == 1 and "norm" in n_ and "vision_tower" not in n_ and "mm_soft_emb_norm" not in n_:
                p.sub_(1.0)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

    image = Image.open(image_path).convert("RGB")
    # what the C side computes: Pillow's 8-bit bilinear resize, x / 255, (x - 0.5) / 0.5
    pil = np.asarray(image.resize((GEMMA_SIZE, GEMMA_SIZE), Image.BILINEAR), dtype=np.float32)
    pil = ((pil.astype(np.float64) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]
    try:
        ip = pil_processor("Gemma3ImageProcessor")(
            do_resize=True, size={"height": GEMMA_SIZE, "width": GEMMA_SIZE}, resample=Image.BILINEAR,
            do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5], do_convert_rgb=True, do_pan_and_scan=False)
        pv = ip(images=[image], return_tensors="pt")["pixel_values"].float()
    except Exception as e:  # no usable processor class: Pillow by hand, as the processor documents
        print(f"gemma3: image processor failed ({e!r}); pixel values by hand", file=sys.stderr)
        ip = None
        pv = torch.from_numpy(pil.astype(np.float32))
    pil_diff = float(np.abs(pil - pv.numpy()).max())
    seq = ("\n\n<start_of_image>" + "<image_soft_token>" * GEMMA_TOKENS + "<end_of_image>\n\n")
    text = "<bos>" + GEMMA_RENDERED.replace("<start_of_image>", seq)
    ids = tok.encode(text, add_special_tokens=False).ids
    image_id = ids_of["<image_soft_token>"]
    n_image_tokens = sum(1 for i in ids if i == image_id)
    assert n_image_tokens == GEMMA_TOKENS, n_image_tokens
    input_ids = torch.tensor([ids])

    def run(ids_t, bidirectional=True):
        tt = (ids_t == image_id).long()
        kw = dict(input_ids=ids_t, attention_mask=torch.ones_like(ids_t), pixel_values=pv, use_cache=False)
        if bidirectional:
            kw["token_type_ids"] = tt
        return model(**kw)

    with torch.no_grad():
        vt = submodule(model, "model.vision_tower", "vision_tower")
        feats = vt(pixel_values=pv).last_hidden_state
        emb = mp(feats)
        emb = emb.reshape(-1, emb.shape[-1])
        logits = run(input_ids).logits[0].float()
        causal = run(input_ids, False).logits[0].float()
        bidir_diff = float((logits - causal).abs().max())
        # the fusion recipe the C side uses: scaled token embeddings with the
        # image rows substituted (not scaled), through the model with the mask
        x = model.get_input_embeddings()(input_ids)[0].clone()
        x[input_ids[0] == image_id] = emb
        fused = model(inputs_embeds=x[None], token_type_ids=(input_ids == image_id).long(),
                      attention_mask=torch.ones_like(input_ids), use_cache=False).logits[0].float()
        fuse_diff = float((fused - logits).abs().max())
        if fuse_diff > 1e-4:  # recorded (the C test compares against the full model's logits)
            print(f"gemma3: warning: fused-embedding logits differ by {fuse_diff}", file=sys.stderr)
        gen, top_ids, top_lp = greedy_top5(run, input_ids)

    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    model.to(torch.bfloat16).save_pretrained(d)
    if ip is not None:
        ip.save_pretrained(d)
    else:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump({"image_processor_type": "Gemma3ImageProcessor", "do_resize": True,
                       "size": {"height": GEMMA_SIZE, "width": GEMMA_SIZE}, "resample": 2, "do_rescale": True,
                       "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
                       "image_std": [0.5] * 3, "do_pan_and_scan": False, "image_seq_length": GEMMA_TOKENS}, f)
    if pil_diff > 1e-6:
        np.asarray(pil, dtype="<f4").tofile(os.path.join(d, "pixels_pil.bin"))
    # the published Gemma 3 template: an image part renders as <start_of_image>
    tpl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "templates",
                       "gemma3.jinja")
    with open(tpl, encoding="utf-8") as f:
        fast.chat_template = f.read()
    try:
        by_template = fast.apply_chat_template([{"role": "user", "content": GEMMA_USER}], tokenize=False,
                                               add_generation_prompt=True)
    except Exception as e:  # recorded, not fatal: the C side uses GEMMA_RENDERED
        by_template = f"error: {e}"
    fast.save_pretrained(d)
    tcp = os.path.join(d, "tokenizer_config.json")
    with open(tcp) as f:
        tc = json.load(f)
    tc.update({"add_bos_token": True, "add_eos_token": False})
    with open(tcp, "w") as f:
        json.dump(tc, f, indent=1)
    save_f32(os.path.join(d, "pixels.bin"), pv)
    save_f32(os.path.join(d, "features.bin"), feats)
    save_f32(os.path.join(d, "embeddings.bin"), emb)
    save_f32(os.path.join(d, "logits.bin"), logits)
    ref = {"case": name, "rendered": GEMMA_RENDERED, "text": text, "ids": ids, "n_tokens": len(ids),
           "image_token_id": image_id, "special_ids": ids_of, "n_image_tokens": n_image_tokens,
           "image_span": [ids.index(image_id), ids.index(image_id) + n_image_tokens - 1],
           "template_rendered": by_template, "template_matches": by_template == "<bos>" + GEMMA_RENDERED,
           "sliding_window": GEMMA_WINDOW, "tied_output": tied, "pixels_vs_pillow_max_diff": pil_diff,
           "pixels_shape": list(pv.shape), "features_shape": list(feats.shape),
           "embeddings_shape": list(emb.shape), "vocab_size": int(logits.shape[-1]),
           "fused_logits_max_diff": fuse_diff, "bidirectional_vs_causal_max_diff": bidir_diff,
           "greedy": gen, "greedy_text": fast.decode(gen), "top5_ids": top_ids, "top5_logprobs": top_lp,
           "greedy_margins": [t[0] - t[1] for t in top_lp],
           "seed": seed, "torch": torch.__version__, "transformers": transformers.__version__,
           "image_processor": type(ip).__name__ if ip is not None else "by hand (Pillow)",
           "features_abs_max": float(feats.abs().max()), "embeddings_std": float(emb.std()),
           "logits_std": float(logits.std())}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {len(ids)} tokens ({n_image_tokens} image), bidirectional vs causal {bidir_diff:.3g}, "
          f"{size / 1024:.0f} KiB: {sorted(os.listdir(d))}", file=sys.stderr)


# ---- Qwen3-VL (16 px patches, learned position embeddings interpolated to
# the grid + 2-D rotary, LayerNorm + GELU blocks, no windows; DeepStack
# features added to the first LM layers; interleaved M-RoPE) ----

QWEN3_MIN_PIXELS, QWEN3_MAX_PIXELS = 64 * 64, 32 * 32 * 64
QWEN3_POS_GRID = 5                 # learned position table 5x5: interpolated to 6x10 and 4x6
QWEN3_DEEPSTACK = [0, 2]           # vision blocks whose output feeds a DeepStack merger
QWEN3_MROPE = [4, 2, 2]            # head_dim 16: 8 rotary pairs, t gets the rest as in [24, 20, 20]


def qwen3_image_processor(min_pixels, max_pixels):
    return qwen_vl_processor(min_pixels, max_pixels, 16, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])


def build_qwen3vl(out, image_path, seed, moe=False):
    """Qwen3VLForConditionalGeneration: ViT of 4 LayerNorm + GELU(tanh) blocks
    (48 wide, 3 heads), 16 px patches, a 5x5 learned position table
    interpolated to each grid, DeepStack mergers after blocks 0 and 2 added
    to the outputs of LM layers 0 and 1; a 3-layer Qwen3 text model (QK-norm,
    head_dim 16) with interleaved M-RoPE sections [4, 2, 2]. moe:
    Qwen3VLMoeForConditionalGeneration, the text model's FFNs 8 experts of
    32, top 2 (case qwen3vlmoe)."""
    import torch
    import transformers
    from PIL import Image
    name = "qwen3vlmoe" if moe else "qwen3vl"
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok, fast, ids_of, vocab = qwen_tokenizer()
    vision = dict(depth=4, hidden_size=48, hidden_act="gelu_pytorch_tanh", intermediate_size=80,
                  num_heads=3, in_channels=3, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=64,
                  num_position_embeddings=QWEN3_POS_GRID * QWEN3_POS_GRID,
                  deepstack_visual_indexes=list(QWEN3_DEEPSTACK), initializer_range=0.1)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(QWEN3_MROPE),
            "mrope_interleaved": True}
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=512, initializer_range=0.1, rms_norm_eps=1e-6,
                rope_theta=10000.0, rope_parameters=dict(rope),
                tie_word_embeddings=False, attention_bias=False,
                bos_token_id=ids_of["<|endoftext|>"], eos_token_id=ids_of["<|im_end|>"])
    if moe:
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                    mlp_only_layers=[], norm_topk_prob=True)
    cfg = (transformers.Qwen3VLMoeConfig if moe else transformers.Qwen3VLConfig)(
        text_config=text, vision_config=vision, image_token_id=ids_of["<|image_pad|>"],
        video_token_id=ids_of["<|video_pad|>"], vision_start_token_id=ids_of["<|vision_start|>"],
        vision_end_token_id=ids_of["<|vision_end|>"], tie_word_embeddings=False)
    tc = cfg.text_config
    rp = getattr(tc, "rope_parameters", None) or getattr(tc, "rope_scaling", None) or {}
    if list(rp.get("mrope_section", [])) != QWEN3_MROPE:  # older releases: rope_scaling
        tc.rope_scaling = dict(rope)
        rp = tc.rope_scaling
    if list(rp.get("mrope_section", [])) != QWEN3_MROPE:
        raise RuntimeError(f"qwen3vl: mrope_section did not reach the text config: {rp}")
    if getattr(tc, "head_dim", 16) != 16:
        raise RuntimeError(f"qwen3vl: head_dim {tc.head_dim}")
    cfg._attn_implementation = "eager"
    for sub in ("vision_config", "text_config"):
        try:
            getattr(cfg, sub)._attn_implementation = "eager"
        except AttributeError:
            pass
    torch.manual_seed(seed)
    model = (transformers.Qwen3VLMoeForConditionalGeneration if moe else
             transformers.Qwen3VLForConditionalGeneration)(cfg).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    if moe:  # fused expert tensors: whatever the release initialises them to, draw them
        gen_e = torch.Generator().manual_seed(seed + 2)
        with torch.no_grad():
            for n_, p_ in model.named_parameters():
                if ".experts." in n_ and p_.dim() == 3:
                    p_.copy_(0.1 * torch.randn(p_.shape, generator=gen_e))
    bf16_round(model)

    image = Image.open(image_path).convert("RGB")
    image2 = image.crop(QWEN_CROP)
    image2.save(os.path.join(d, "image2.png"))
    ip = qwen3_image_processor(QWEN3_MIN_PIXELS, QWEN3_MAX_PIXELS)
    enc = [ip(images=[im], return_tensors="pt") for im in (image, image2)]
    pv = [e["pixel_values"].float() for e in enc]
    grids = [e["image_grid_thw"].reshape(-1, 3) for e in enc]
    visual = submodule(model, "model.visual", "visual")
    prompt, n_img_tokens, ids, input_ids = qwen_prompt_ids(tok, fast, ids_of, grids)
    pixel_values = torch.cat(pv, 0)
    grid_thw = torch.cat(grids, 0)

    # what reaches the merger, each DeepStack merger and the LM (hooks work
    # whatever the release's return types are)
    captured = {}

    def pre(key):
        def hook(mod, args, kwargs):
            captured.setdefault(key, (args, kwargs))
        return hook

    def post(key):
        def hook(mod, args, output):
            captured.setdefault(key, output[0] if isinstance(output, tuple) else output)
        return hook

    lm = submodule(model, "model.language_model", "language_model", "model")
    hooks = [lm.register_forward_pre_hook(pre("lm"), with_kwargs=True),
             visual.merger.register_forward_pre_hook(pre("merger_in"), with_kwargs=True),
             visual.merger.register_forward_hook(post("merger_out")),
             visual.blocks[0].register_forward_hook(post("block0"))]
    for i, m in enumerate(visual.deepstack_merger_list):
        hooks.append(m.register_forward_hook(post(f"ds{i}")))

    def vision_run(px, grid):
        captured.clear()
        visual(px, grid_thw=grid)
        ma, mkw = captured["merger_in"]
        vin = (ma[0] if ma else next(v for v in mkw.values() if torch.is_tensor(v))).float()
        feats_ = captured["merger_out"].float()
        ds_ = torch.stack([captured[f"ds{i}"].float() for i in range(len(QWEN3_DEEPSTACK))])
        return vin, feats_, ds_, captured["block0"].float()

    with torch.no_grad():
        vit_out, feats, ds, block0 = vision_run(pv[0], grids[0])
        _, feats2, ds2, _ = vision_run(pv[1], grids[1])
        if feats.shape[0] != n_img_tokens[0] or feats2.shape[0] != n_img_tokens[1]:
            raise RuntimeError(f"qwen3vl: {feats.shape} / {feats2.shape} rows for {n_img_tokens}")
        try:
            posemb = visual.fast_pos_embed_interpolate(grids[0]).float()
        except Exception as e:  # recorded only
            print(f"qwen3vl: no fast_pos_embed_interpolate ({e!r})", file=sys.stderr)
            posemb = None
        patch_only = visual.patch_embed(pv[0]).float()

        run = qwen_runner(model, ids_of, pixel_values, grid_thw)
        captured.clear()
        o = run(input_ids)
        logits = o.logits[0].float()
        a, kw = captured["lm"]
        pos = kw.get("position_ids")
        if pos is None and len(a) > 2:
            pos = a[2]
        merged = kw.get("inputs_embeds")
        dsv = kw.get("deepstack_visual_embeds")
        vmask = kw.get("visual_pos_masks")
        if merged is None or dsv is None:
            raise RuntimeError(f"qwen3vl: LM kwargs {sorted(kw)}")
        merged = merged[0].float()
        dsv = torch.stack([t.float() for t in dsv])
        ds_all = torch.cat([ds, ds2], 1)
        ds_diff = float((dsv - ds_all).abs().max())
        merged_diff = float((merged[input_ids[0] == ids_of["<|image_pad|>"]]
                             - torch.cat([feats, feats2], 0)).abs().max())
        # the same language model without DeepStack: how much the injection moves the logits
        lm_kw = dict(inputs_embeds=merged[None], position_ids=pos, attention_mask=torch.ones_like(input_ids),
                     use_cache=False)
        head = model.get_output_embeddings()
        try:  # recorded, not fatal: the C test compares against the full model's logits
            plain = head(lm(**lm_kw).last_hidden_state)[0].float()
            with_ds = head(lm(visual_pos_masks=vmask, deepstack_visual_embeds=list(dsv), **lm_kw)
                           .last_hidden_state)[0].float()
            deepstack_effect = float((plain - logits).abs().max())
            fuse_diff = float((with_ds - logits).abs().max())
        except Exception as e:
            print(f"qwen3vl: the LM by hand failed ({e!r})", file=sys.stderr)
            deepstack_effect = fuse_diff = None
        if fuse_diff is not None and fuse_diff > 1e-4:
            print(f"qwen3vl: warning: the LM with DeepStack by hand differs by {fuse_diff}", file=sys.stderr)
        gen, top_ids, top_lp = greedy_top5(run, input_ids)
    for h in hooks:
        h.remove()
    if pos is None:
        raise RuntimeError("qwen3vl: no position_ids reached the language model")
    pos = pos.reshape(-1, pos.shape[-1])[-3:]  # [3][n]: temporal, height, width

    model.to(torch.bfloat16).save_pretrained(d)
    ip.save_pretrained(d)
    save_video_config(d, "Qwen3VLVideoProcessor", QWEN3_MIN_PIXELS, QWEN3_MAX_PIXELS)
    fast.save_pretrained(d)
    save_f32(os.path.join(d, "pixels.bin"), pv[0])
    save_f32(os.path.join(d, "pixels2.bin"), pv[1])
    save_f32(os.path.join(d, "features.bin"), feats)
    save_f32(os.path.join(d, "features2.bin"), feats2)
    save_f32(os.path.join(d, "deepstack.bin"), ds)       # [n_ds][rows][64]
    save_f32(os.path.join(d, "deepstack2.bin"), ds2)
    save_f32(os.path.join(d, "vit_out.bin"), vit_out)
    save_f32(os.path.join(d, "block0.bin"), block0)
    save_f32(os.path.join(d, "patch_embed.bin"), patch_only)
    if posemb is not None:
        save_f32(os.path.join(d, "pos_embed.bin"), posemb)
    save_f32(os.path.join(d, "merged.bin"), merged)     # [n_tokens][64]: LM input rows
    save_f32(os.path.join(d, "logits.bin"), logits)
    np.asarray(pos.cpu().numpy(), dtype="<i4").tofile(os.path.join(d, "positions.bin"))
    ref = {"case": name, "prompt": prompt, "user": QWEN_USER, "ids": ids, "n_tokens": len(ids),
           "image_token_id": ids_of["<|image_pad|>"], "special_ids": ids_of,
           "grid_thw": [g.reshape(-1).tolist() for g in grids],
           "n_image_tokens": n_img_tokens, "crop": list(QWEN_CROP),
           "min_pixels": QWEN3_MIN_PIXELS, "max_pixels": QWEN3_MAX_PIXELS,
           "deepstack_visual_indexes": list(QWEN3_DEEPSTACK), "mrope_section": list(QWEN3_MROPE),
           "pos_grid": QWEN3_POS_GRID,
           "pixels_shape": list(pv[0].shape), "features_shape": list(feats.shape),
           "deepstack_shape": list(ds.shape), "vit_out_shape": list(vit_out.shape),
           "block0_shape": list(block0.shape), "merged_shape": list(merged.shape),
           "pos_embed_shape": list(posemb.shape) if posemb is not None else None,
           "vocab_size": int(logits.shape[-1]), "positions_shape": list(pos.shape),
           "deepstack_vs_lm_kwargs_max_diff": ds_diff, "merged_vs_features_max_diff": merged_diff,
           "lm_by_hand_max_diff": fuse_diff, "logits_without_deepstack_max_diff": deepstack_effect,
           "greedy": gen, "greedy_text": fast.decode(gen), "top5_ids": top_ids, "top5_logprobs": top_lp,
           "greedy_margins": [t[0] - t[1] for t in top_lp],
           "seed": seed, "torch": torch.__version__, "transformers": transformers.__version__,
           "image_processor": type(ip).__name__,
           "expert_shapes": {n_: list(p_.shape) for n_, p_ in model.named_parameters()
                             if ".layers.0.mlp." in n_} if moe else None,
           "features_abs_max": float(feats.abs().max()), "logits_std": float(logits.std())}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {len(ids)} tokens ({n_image_tokens_str(n_img_tokens)} image), grids {ref['grid_thw']}, "
          f"deepstack moves the logits by {deepstack_effect}, {size / 1024:.0f} KiB: "
          f"{sorted(os.listdir(d))}", file=sys.stderr)


def n_image_tokens_str(n):
    return "+".join(str(x) for x in n)


def make_golden_bytelevel(specials):
    import make_golden  # tools/make_golden.py: the byte-level BPE builder
    return make_golden.bytelevel_tokenizer(60, make_golden.QWEN2_RE, specials)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory (one subdirectory per case)")
    ap.add_argument("--image", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "tests", "fixtures", "vision", "image.png"))
    ap.add_argument("--image-only", metavar="PNG", help="only write the test picture")
    ap.add_argument("--case", action="append", choices=sorted(CASES) + ["qwen2_5_vl", "gemma3", "qwen3vl", "qwen3vlmoe"])
    args = ap.parse_args()
    if args.image_only:
        write_png(args.image_only, test_image())
        return
    if not args.out:
        ap.error("--out is required")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(args.image, os.path.join(args.out, "image.png"))
    failed = []
    for name in args.case or list(CASES) + ["qwen2_5_vl", "gemma3", "qwen3vl"]:
        try:
            if name == "qwen2_5_vl":
                build_qwen(args.out, args.image, seed=5678)
                continue
            if name == "gemma3":
                build_gemma3(args.out, args.image, seed=6789)
                continue
            if name in ("qwen3vl", "qwen3vlmoe"):
                build_qwen3vl(args.out, args.image, seed=7890, moe=name == "qwen3vlmoe")
                continue
            build(name, args.out, args.image, seed=4321 + 10 * list(CASES).index(name))
        except Exception as e:  # report every case, then fail
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {e}")
    if failed:
        sys.exit("make_vision_golden: failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
