#!/usr/bin/python3
"""make_whisper_golden.py - the tiny Whisper model behind tests/test_whisper.c.

    python3 tools/make_whisper_golden.py --out tests/fixtures/whisper

Needs torch and transformers (run it on a machine that has them; the test suite
only needs the committed output). Writes into OUT:

  config.json, model.safetensors  a seeded random WhisperForConditionalGeneration
                                  (d_model 64, 2+2 layers, 4 heads, 80 mels,
                                  1500 audio positions, made-up 512-token vocab)
  vocab.json                      byte-level BPE pieces for the 512 ids
  reference.json                  decoder tokens, shapes, library versions
  encoder_out.bin                 float32 [1500][64]: encoder output for the
                                  features of input_features() below
  logits.bin                      float32 [n_tokens][512]: decoder logits for
                                  TOKENS over that encoder output
  mel_filters_80.bin, mel_filters_128.bin
                                  float32 [n_mels][201]: WhisperFeatureExtractor's
                                  slaney filters (checks the converter's numpy ones)
  mel_80.bin                      float32 [80][MEL_FRAMES]: the extractor's log-mel
                                  of test_waveform() (first MEL_FRAMES frames)

Both input_features() and test_waveform() are closed formulas that the C test
recomputes, so no large input arrays are stored. Weights are drawn larger than
the HF initialiser would so that every term of the forward pass moves the output.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import transformers
from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

N_VOCAB = 512
D_MODEL = 64
TOKENS = [1, 5, 17, 300, 42, 7, 99, 511, 256, 3]
MEL_FRAMES = 400


def input_features():
    """float32 [80][3000]: x[m][t] = sin(0.0021 (m+1) t + 0.37 m) + 0.25 cos(0.05 t)."""
    m = np.arange(80, dtype=np.float64)[:, None]
    t = np.arange(3000, dtype=np.float64)[None, :]
    return (np.sin(0.0021 * (m + 1) * t + 0.37 * m) + 0.25 * np.cos(0.05 * t)).astype(np.float32)


def test_waveform():
    """float32 [48000] (3 s at 16 kHz): two tones, a chirp and a burst."""
    t = np.arange(48000, dtype=np.float64) / 16000.0
    x = (0.4 * np.sin(2 * math.pi * 440.0 * t) + 0.3 * np.sin(2 * math.pi * (100.0 + 400.0 * t) * t)
         + 0.1 * np.sin(2 * math.pi * 3000.0 * t) * (t < 1.5))
    return x.astype(np.float32)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def make_vocab():
    b2u = bytes_to_unicode()
    pieces = [b2u[b] for b in range(256)]
    words = ["the", "and", "hello", "world", "speech", "whisper", "kitchen", "light"]
    i = 0
    while len(pieces) < N_VOCAB - 1:
        w = words[i % len(words)]
        p = ("Ġ" if (i // len(words)) % 2 == 0 else "") + w[: 2 + (i // (2 * len(words))) % (len(w) - 1)]
        p += "" if (i // (2 * len(words))) < 8 else str(i)
        if p not in pieces:
            pieces.append(p)
        i += 1
    pieces.append("<|endoftext|>")
    return {p: k for k, p in enumerate(pieces)}


def randomize(model):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "model.encoder.embed_positions.weight":
                continue  # Whisper's fixed sinusoids
            if p.dim() == 1:
                base = 1.0 if "layer_norm" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    cfg = WhisperConfig(vocab_size=N_VOCAB, num_mel_bins=80, d_model=D_MODEL,
                        encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=4 * D_MODEL, decoder_ffn_dim=4 * D_MODEL,
                        max_source_positions=1500, max_target_positions=64,
                        pad_token_id=N_VOCAB - 1, bos_token_id=N_VOCAB - 1, eos_token_id=N_VOCAB - 1,
                        decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None,
                        activation_function="gelu")
    model = WhisperForConditionalGeneration(cfg).eval().float()
    randomize(model)
    model.save_pretrained(args.out, safe_serialization=True)
    with open(os.path.join(args.out, "vocab.json"), "w") as f:
        json.dump(make_vocab(), f, ensure_ascii=False, indent=0)

    feats = torch.from_numpy(input_features())[None]
    toks = torch.tensor([TOKENS])
    with torch.no_grad():
        enc = model.model.encoder(feats).last_hidden_state
        out = model(encoder_outputs=(enc,), decoder_input_ids=toks)
    enc.numpy()[0].astype("<f4").tofile(os.path.join(args.out, "encoder_out.bin"))
    out.logits.numpy()[0].astype("<f4").tofile(os.path.join(args.out, "logits.bin"))

    for n_mels in (80, 128):
        fe = WhisperFeatureExtractor(feature_size=n_mels)
        np.ascontiguousarray(fe.mel_filters.T).astype("<f4").tofile(
            os.path.join(args.out, "mel_filters_%d.bin" % n_mels))
    fe = WhisperFeatureExtractor(feature_size=80)
    mel = fe(test_waveform(), sampling_rate=16000, return_tensors="np").input_features[0]
    np.ascontiguousarray(mel[:, :MEL_FRAMES]).astype("<f4").tofile(os.path.join(args.out, "mel_80.bin"))

    ref = {
        "tokens": TOKENS,
        "n_vocab": N_VOCAB,
        "d_model": D_MODEL,
        "mel_frames": MEL_FRAMES,
        "encoder_out_absmax": float(enc.abs().max()),
        "logits_absmax": float(out.logits.abs().max()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
    }
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(json.dumps(ref))


if __name__ == "__main__":
    main()
