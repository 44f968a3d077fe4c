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
linear connector, image split into 2x2 tiles plus a global view).
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
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory (one subdirectory per case)")
    ap.add_argument("--image", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "tests", "fixtures", "vision", "image.png"))
    ap.add_argument("--image-only", metavar="PNG", help="only write the test picture")
    ap.add_argument("--case", action="append", choices=sorted(CASES))
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
    for name in args.case or CASES:
        try:
            build(name, args.out, args.image, seed=4321 + 10 * list(CASES).index(name))
        except Exception as e:  # report every case, then fail
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {e}")
    if failed:
        sys.exit("make_vision_golden: failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
