#!/usr/bin/python3
"""hf_whisper_to_ggml.py - convert a Hugging Face Whisper checkpoint to whisper.cpp's ggml .bin.

    python3 tools/hf_whisper_to_ggml.py MODEL_DIR OUT.bin [--type f32|f16|q8_0]

MODEL_DIR holds config.json (WhisperForConditionalGeneration), *.safetensors
and the tokenizer's vocab.json. The output is the file layout whisper.cpp reads:

  1. magic 0x67676d6c ("ggml"), u32
  2. hparams, 11 x i32: n_vocab, n_audio_ctx, n_audio_state, n_audio_head,
     n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
     n_mels, ftype (+ 1000 * quantization version 2 when quantized)
  3. mel filters: i32 n_mel, i32 n_fft (201), f32 [n_mel][n_fft]: slaney-scale,
     slaney-normalised triangles over 0..8 kHz (what librosa and transformers
     compute for Whisper)
  4. vocab: i32 count, then count x (u32 length, raw bytes): the byte-level BPE
     pieces of vocab.json by id, decoded to bytes; readers add the special
     tokens past the end themselves, as for OpenAI's files
  5. tensors to end of file: i32 n_dims, i32 name length, i32 ggml type,
     i32 ne[n_dims] (ne[0] innermost), name, data (no padding)

Types follow whisper.cpp: with f16, matrices and conv kernels are F16 and
biases, norms, positional embeddings F32; with q8_0, 2-D matrices are Q8_0
(bit-exact with ggml's reference quantizer), conv kernels F16. The layout
helpers (write_header, tensor_type, write_tensor, ...) also serve
tools/random_model, which writes real-shape files with random weights.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_to_gguf import ConvertError, open_checkpoint, quantize_q8_0, read_json  # noqa: E402

GGML_MAGIC = 0x67676D6C
GGML_F32, GGML_F16, GGML_Q5_1, GGML_Q8_0 = 0, 1, 7, 8
FILE_FTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q5_1": 9}   # whisper.cpp's ftype of a file
QUANT_TYPES = {"q8_0": GGML_Q8_0, "q5_1": GGML_Q5_1}
FTYPES = ("f32", "f16", "q8_0")                              # what this converter writes
QNT_VERSION = 2
N_FFT = 400
SAMPLE_RATE = 16000


def log(msg):
    sys.stderr.write(f"hf_whisper_to_ggml: {msg}\n")


def mel_filters(n_mels):
    """float32 [n_mels][1 + N_FFT/2]: slaney mel scale, slaney area normalisation."""
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        lin = 3.0 * f / 200.0
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), lin)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), 200.0 * m / 3.0)

    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), n_mels + 2))
    diff = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    fb *= 2.0 / (edges[2:n_mels + 2] - edges[:n_mels])
    return np.ascontiguousarray(fb.T).astype(np.float32)


def byte_decoder():
    """GPT-2's printable-unicode stand-ins for bytes, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def pieces_to_bytes(pieces):
    """Byte-level BPE pieces (GPT-2's printable stand-ins) -> raw bytes."""
    dec = byte_decoder()
    out = []
    for piece in pieces:
        try:
            out.append(bytes(dec[c] for c in piece))
        except KeyError:
            out.append(piece.encode("utf-8"))  # an added token spelled in plain text
    return out


def vocab_bytes(model_dir, n_vocab):
    path = os.path.join(model_dir, "vocab.json")
    vocab = read_json(path, "tokenizer vocabulary")
    if not isinstance(vocab, dict) or not vocab:
        raise ConvertError(f"{path}: not a non-empty JSON object of piece -> id")
    by_id = {}
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < n_vocab or i in by_id:
            raise ConvertError(f"{path}: piece {piece!r}: bad or duplicate id {i!r} (n_vocab {n_vocab})")
        by_id[i] = piece
    if sorted(by_id) != list(range(len(by_id))):
        raise ConvertError(f"{path}: ids are not contiguous from 0")
    return pieces_to_bytes(by_id[i] for i in range(len(by_id)))


def tensor_names(n_enc, n_dec):
    """ggml name -> HF name."""
    m = {
        "encoder.conv1.weight": "model.encoder.conv1.weight",
        "encoder.conv1.bias": "model.encoder.conv1.bias",
        "encoder.conv2.weight": "model.encoder.conv2.weight",
        "encoder.conv2.bias": "model.encoder.conv2.bias",
        "encoder.positional_embedding": "model.encoder.embed_positions.weight",
        "encoder.ln_post.weight": "model.encoder.layer_norm.weight",
        "encoder.ln_post.bias": "model.encoder.layer_norm.bias",
        "decoder.token_embedding.weight": "model.decoder.embed_tokens.weight",
        "decoder.positional_embedding": "model.decoder.embed_positions.weight",
        "decoder.ln.weight": "model.decoder.layer_norm.weight",
        "decoder.ln.bias": "model.decoder.layer_norm.bias",
    }
    attn = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "out_proj"}
    for side, n, hf_side in (("encoder", n_enc, "encoder"), ("decoder", n_dec, "decoder")):
        for i in range(n):
            g, h = f"{side}.blocks.{i}.", f"model.{hf_side}.layers.{i}."
            parts = [("attn", "self_attn")] + ([("cross_attn", "encoder_attn")] if side == "decoder" else [])
            for gp, hp in parts:
                for gk, hk in attn.items():
                    m[f"{g}{gp}.{gk}.weight"] = f"{h}{hp}.{hk}.weight"
                    if gk != "key":
                        m[f"{g}{gp}.{gk}.bias"] = f"{h}{hp}.{hk}.bias"
                m[f"{g}{gp}_ln.weight"] = f"{h}{hp}_layer_norm.weight"
                m[f"{g}{gp}_ln.bias"] = f"{h}{hp}_layer_norm.bias"
            m[f"{g}mlp_ln.weight"] = f"{h}final_layer_norm.weight"
            m[f"{g}mlp_ln.bias"] = f"{h}final_layer_norm.bias"
            m[f"{g}mlp.0.weight"] = f"{h}fc1.weight"
            m[f"{g}mlp.0.bias"] = f"{h}fc1.bias"
            m[f"{g}mlp.2.weight"] = f"{h}fc2.weight"
            m[f"{g}mlp.2.bias"] = f"{h}fc2.bias"
    return m


def expected_shape(name, hp):
    d, nm = hp["d_model"], hp["num_mel_bins"]
    if name == "encoder.conv1.weight":
        return (d, nm, 3)
    if name == "encoder.conv2.weight":
        return (d, d, 3)
    if name == "encoder.positional_embedding":
        return (hp["max_source_positions"], d)
    if name == "decoder.positional_embedding":
        return (hp["max_target_positions"], d)
    if name == "decoder.token_embedding.weight":
        return (hp["vocab_size"], d)
    if name.endswith("mlp.0.weight"):
        return (hp["encoder_ffn_dim" if name.startswith("encoder") else "decoder_ffn_dim"], d)
    if name.endswith("mlp.2.weight"):
        return (d, hp["encoder_ffn_dim" if name.startswith("encoder") else "decoder_ffn_dim"])
    if name.endswith("mlp.0.bias"):
        return (hp["encoder_ffn_dim" if name.startswith("encoder") else "decoder_ffn_dim"],)
    if name.endswith(".weight") and "_ln" not in name and "ln_post" not in name and not name.endswith("ln.weight"):
        return (d, d)
    return (d,)


def stored_shape(name, shape):
    """whisper.cpp keeps the conv biases as [1, n_state]: numpy shape (n_state, 1)."""
    if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
        return (shape[0], 1)
    return tuple(shape)


def tensor_type(name, shape, type_name):
    """ggml type of a tensor (stored shape) in a file of type_name."""
    keep_f32 = len(shape) < 2 or name.endswith("positional_embedding") or name.endswith("conv1.bias") \
        or name.endswith("conv2.bias")
    if type_name == "f32" or keep_f32:
        return GGML_F32
    if type_name in QUANT_TYPES and len(shape) == 2 and shape[-1] % 32 == 0:
        return QUANT_TYPES[type_name]
    return GGML_F16


def tensor_data(name, a, type_name):
    """(ggml type, numpy shape to store, bytes)."""
    a = a.reshape(stored_shape(name, a.shape))
    ttype = tensor_type(name, a.shape, type_name)
    if ttype == GGML_F32:
        return ttype, a.shape, a.astype("<f4").tobytes()
    if ttype == GGML_Q8_0:
        return ttype, a.shape, quantize_q8_0(a)
    return GGML_F16, a.shape, a.astype("<f2").tobytes()


def file_ftype(type_name):
    """The hparams' ftype: whisper.cpp's, plus 1000 * quantization version when quantized."""
    return FILE_FTYPES[type_name] + (QNT_VERSION * 1000 if type_name in QUANT_TYPES else 0)


def write_header(f, hp, ftype, tokens):
    """Parts 1-4 of the layout: magic, hparams (hp: config.json's keys), mel filters, vocab."""
    f.write(struct.pack("<I", GGML_MAGIC))
    f.write(struct.pack("<11i", hp["vocab_size"], hp["max_source_positions"], hp["d_model"],
                        hp["encoder_attention_heads"], hp["encoder_layers"], hp["max_target_positions"],
                        hp["d_model"], hp["decoder_attention_heads"], hp["decoder_layers"],
                        hp["num_mel_bins"], ftype))
    filters = mel_filters(hp["num_mel_bins"])
    f.write(struct.pack("<ii", *filters.shape))
    f.write(filters.astype("<f4").tobytes())
    f.write(struct.pack("<i", len(tokens)))
    for t in tokens:
        f.write(struct.pack("<I", len(t)))
        f.write(t)


def write_tensor(f, name, ttype, shape, data):
    """Part 5, one tensor: header with ne reversed from the numpy shape, name, data."""
    name = name.encode()
    f.write(struct.pack("<iii", len(shape), len(name), ttype))
    f.write(struct.pack(f"<{len(shape)}i", *reversed(shape)))
    f.write(name)
    f.write(data)


def convert(model_dir, out, type_name):
    cfg = read_json(os.path.join(model_dir, "config.json"), "config")
    if "WhisperForConditionalGeneration" not in (cfg.get("architectures") or []) and cfg.get("model_type") != "whisper":
        raise ConvertError(f"{model_dir}/config.json: not a WhisperForConditionalGeneration config")
    keys = ["vocab_size", "num_mel_bins", "d_model", "encoder_layers", "decoder_layers",
            "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
            "max_source_positions", "max_target_positions"]
    hp = {}
    for k in keys:
        v = cfg.get(k)
        if not isinstance(v, int) or v <= 0:
            raise ConvertError(f"{model_dir}/config.json: '{k}' missing or not a positive integer ({v!r})")
        hp[k] = v
    if hp["num_mel_bins"] not in (80, 128):
        raise ConvertError(f"{model_dir}/config.json: num_mel_bins {hp['num_mel_bins']} (Whisper uses 80 or 128)")
    if cfg.get("activation_function", "gelu") != "gelu":
        raise ConvertError(f"{model_dir}/config.json: activation_function {cfg.get('activation_function')!r} "
                           "(whisper.cpp files imply gelu)")
    for k in ("encoder_attention_heads", "decoder_attention_heads"):
        if hp["d_model"] % hp[k]:
            raise ConvertError(f"{model_dir}/config.json: d_model {hp['d_model']} not a multiple of {k} {hp[k]}")

    ckpt = open_checkpoint(model_dir)
    names = tensor_names(hp["encoder_layers"], hp["decoder_layers"])
    for g, h in names.items():
        if h not in ckpt:
            raise ConvertError(f"{model_dir}: tensor '{h}' (for '{g}') not in the checkpoint")
    tokens = vocab_bytes(model_dir, hp["vocab_size"])

    with open(out, "wb") as f:
        write_header(f, hp, file_ftype(type_name), tokens)
        for g, h in names.items():
            a = ckpt[h].load(h)
            want = expected_shape(g, hp)
            if tuple(a.shape) != want:
                raise ConvertError(f"{model_dir}: tensor '{h}': shape {tuple(a.shape)}, expected {want}")
            write_tensor(f, g, *tensor_data(g, a, type_name))
    log(f"wrote {out}: {len(names)} tensors, {len(tokens)} vocab pieces, {hp['num_mel_bins']} mel filters, "
        f"type {type_name}")


def main():
    ap = argparse.ArgumentParser(description="Convert a Hugging Face Whisper checkpoint to whisper.cpp ggml.")
    ap.add_argument("model_dir", help="directory with config.json, *.safetensors, vocab.json")
    ap.add_argument("out", help="output ggml .bin file")
    ap.add_argument("--type", choices=FTYPES, default="f16",
                    help="type of the weight matrices (default f16); biases and norms stay f32")
    args = ap.parse_args()
    try:
        convert(args.model_dir, args.out, args.type)
    except (ConvertError, OSError) as e:
        sys.stderr.write(f"hf_whisper_to_ggml: error: {e}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
