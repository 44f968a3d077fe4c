#!/usr/bin/python3
"""random_outetts.py - a tiny random-weight language model with the OuteTTS 1.0
special tokens, and the reference token ids of an OuteTTS prompt, for the
tests of audio/tts/outetts.c (numpy only).

    tools/random_outetts.py -o lm.gguf [--seed N]
    tools/random_outetts.py --prompt-ids TEXT [--speaker S.json] -o ids.json
    tools/random_model --shape outetts-1.0-0.6b --type q8_0 -o o.gguf [--layers N]

outetts-1.0-0.6b (for benchmarks) is tools/random_model's qwen3-0.6b shape
with a stand-in vocabulary: Qwen3's (../shared/vocab) followed by the
OuteTTS special tokens below, so the embedding has that many more rows (the
published file's ids and exact vocabulary size may differ: assumed, not
looked up).

The vocabulary is byte-level BPE without merges (GPT-2's 256 byte symbols),
then <|endoftext|>, <|im_start|>, <|im_end|> and the OuteTTS 1.0 markers:
<|text_start|> ... <|global_features_end|>, <|t_0.00|> .. <|t_9.99|>,
<|energy_N|>, <|spectral_centroid_N|>, <|pitch_N|> (N 0..100), <|c1_N|> and
<|c2_N|> (N 0..1024), as user-defined tokens. The model is a 1-layer llama
(embedding 32) whose output favours the code tokens a little, so a short
generation yields some (c1, c2) pairs.

--prompt-ids builds the interface-v3 completion prompt from the published
format (outetts 0.4's prompt processor: see audio/tts/outetts.h) and
tokenizes it the way this vocabulary must: each special token's text is
that token, every other byte its byte token (no merges). The C side has to
produce the same ids through its own prompt builder and tokenizer.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

MARKERS = ["<|text_start|>", "<|text_end|>", "<|voice_characteristic_start|>",
           "<|voice_characteristic_end|>", "<|emotion_start|>", "<|emotion_end|>",
           "<|audio_start|>", "<|audio_end|>", "<|code|>", "<|word_start|>", "<|word_end|>",
           "<|features|>", "<|global_features_start|>", "<|global_features_end|>"]


def bytes_to_unicode():
    """GPT-2's byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def vocabulary():
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    types = [1] * 256
    for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        tokens.append(t)
        types.append(3)
    special = MARKERS + [f"<|t_{i / 100:.2f}|>" for i in range(1000)]
    for k in ("energy", "spectral_centroid", "pitch"):
        special += [f"<|{k}_{i}|>" for i in range(101)]
    special += [f"<|c1_{i}|>" for i in range(1025)] + [f"<|c2_{i}|>" for i in range(1025)]
    tokens += special
    types += [4] * len(special)
    return tokens, types


# ---- the published prompt format (outetts 0.4, interface v3) ----

def normalize(text):
    text = re.sub(r"\s+", " ", text)
    text = text.replace("…", "...")
    text = text.strip()
    text = re.sub(r"[“”]", '"', text)
    text = re.sub(r"[‘’]", "'", text)
    text = re.sub(r"[–—]", "-", text)
    return re.sub(r"[\x00-\x1F\x7F-\x9F]", "", text)


def merge_speaker_text(text, speaker_text):
    speaker_text = speaker_text.strip()
    cjk = any("\u3040" <= c <= "\u309f" or "\u30a0" <= c <= "\u30ff" or "\u4e00" <= c <= "\u9fff"
              for c in speaker_text)
    sep = "。" if cjk else ". "
    ends = ["。", "？", "！", "?", "!"] if cjk else [".", "?", "!"]
    rs = ""
    if speaker_text:
        rs = sep if speaker_text[-1] not in ends else ("" if cjk else " ")
    return speaker_text + rs + text.strip(), rs.strip()


def word_text(w, suffix=""):
    f = w.get("features", {})
    s = "<|word_start|>" + w["word"] + suffix + "<|features|>" + "<|t_{:.2f}|>".format(w["duration"])
    s += "".join(f"<|{k}_{f.get(k, 0)}|>" for k in ("energy", "spectral_centroid", "pitch"))
    s += "<|code|>" + "".join(f"<|c1_{a}|><|c2_{b}|>" for a, b in zip(w["c1"], w["c2"]))
    return s + "<|word_end|>"


def prompt(text, speaker=None):
    text = normalize(text)
    codes = None
    if speaker is not None:
        text, sep = merge_speaker_text(text, speaker["text"])
        words = speaker["words"]
        codes = "\n".join(word_text(w, sep if i == len(words) - 1 else "")
                          for i, w in enumerate(words))
    p = "<|im_start|>\n<|text_start|>" + text + "<|text_end|>\n<|audio_start|>\n"
    if codes is not None:
        p += codes + "\n<|word_start|>"
    return p


def tokenize(p, tokens):
    ids = {t: i for i, t in enumerate(tokens)}
    b2u = bytes_to_unicode()
    specials = sorted((t for t in tokens if t.startswith("<|")), key=len, reverse=True)
    pat = re.compile("|".join(re.escape(t) for t in specials))
    out, pos = [], 0
    for m in pat.finditer(p):
        out += [ids[b2u[b]] for b in p[pos:m.start()].encode("utf-8")]
        out.append(ids[m.group(0)])
        pos = m.end()
    out += [ids[b2u[b]] for b in p[pos:].encode("utf-8")]
    return out


def write_model(path, seed):
    tokens, types = vocabulary()
    nv, e, ff, nh, nkv = len(tokens), 32, 64, 2, 1
    hd = e // nh
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path)
    w.add("general.architecture", "llama")
    w.add("general.name", "tiny random OuteTTS-vocabulary llama (tests)")
    for k, v in (("block_count", 1), ("context_length", 4096), ("embedding_length", e),
                 ("feed_forward_length", ff), ("attention.head_count", nh),
                 ("attention.head_count_kv", nkv), ("vocab_size", nv),
                 ("rope.dimension_count", hd)):
        w.add(f"llama.{k}", v, gguf.GGUF_UINT32)
    w.add("llama.rope.freq_base", 10000.0, gguf.GGUF_FLOAT32)
    w.add("llama.attention.layer_norm_rms_epsilon", 1e-5, gguf.GGUF_FLOAT32)
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.pre", "qwen2")
    w.add("tokenizer.ggml.tokens", tokens)
    w.add("tokenizer.ggml.token_type", types, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
    w.add("tokenizer.ggml.merges", [], gguf.GGUF_ARRAY, gguf.GGUF_STRING)
    w.add("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"), gguf.GGUF_UINT32)
    w.add("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"), gguf.GGUF_UINT32)
    w.add("tokenizer.ggml.add_bos_token", False)

    def mat(r, c, scale=None):
        return (rng.standard_normal((r, c)) * (scale or 1 / np.sqrt(c))).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(nv, e, 0.5), gguf.GGML_F16)
    out = mat(nv, e)
    # code tokens a little likelier, so that short random generations hold pairs
    code0 = tokens.index("<|c1_0|>")
    out[code0:code0 + 2050] += 0.3 * np.sign(rng.standard_normal((1, e))).astype(np.float32)
    w.add_tensor("output.weight", out, gguf.GGML_F16)
    w.add_tensor("output_norm.weight", np.ones(e, np.float32))
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(e, np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(e, np.float32))
    w.add_tensor(p + "attn_q.weight", mat(e, e))
    w.add_tensor(p + "attn_k.weight", mat(nkv * hd, e))
    w.add_tensor(p + "attn_v.weight", mat(nkv * hd, e))
    w.add_tensor(p + "attn_output.weight", mat(e, e))
    w.add_tensor(p + "ffn_gate.weight", mat(ff, e))
    w.add_tensor(p + "ffn_up.weight", mat(ff, e))
    w.add_tensor(p + "ffn_down.weight", mat(e, ff))
    w.write()


SHAPES = ("outetts-1.0-0.6b",)


def wanted(argv):
    """True when a random_model command line names one of these shapes."""
    for i, a in enumerate(argv):
        name = a.split("=", 1)[1] if a.startswith("--shape=") else \
            argv[i + 1] if a == "--shape" and i + 1 < len(argv) else None
        if name in SHAPES:
            return True
    return False


def random_model_main(argv, rm):
    """--shape outetts-1.0-0.6b through random_model's builder (module rm)."""
    ap = argparse.ArgumentParser(prog="random_model")
    ap.add_argument("--shape", choices=SHAPES, required=True)
    ap.add_argument("--type", default="q8_0", choices=sorted(rm.FTYPES))
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int)
    a = ap.parse_args(argv)
    kv = rm._qwen_vocab(rm.QWEN25_ADDED + rm.QWEN3_ADDED)
    tokens = list(kv["tokenizer.ggml.tokens"][1])
    types = list(kv["tokenizer.ggml.token_type"][1])
    have = set(tokens)
    extra, extra_types = vocabulary()
    for t, ty in zip(extra[256:], extra_types[256:]):
        if t not in have:
            tokens.append(t)
            types.append(ty)
    kv["tokenizer.ggml.tokens"][1] = tokens
    kv["tokenizer.ggml.token_type"][1] = types
    vocab_path = a.output + ".vocab.gguf"
    w = gguf.GGUFWriter(vocab_path)
    for key, (vtype, value, elem) in kv.items():
        w.add(key, value, vtype, elem)
    w.write()
    rm.SHAPES[a.shape] = dict(rm.SHAPES["qwen3-0.6b"], hf="OuteAI/OuteTTS-1.0-0.6B",
                              name="OuteTTS 1.0 0.6B (stand-in vocabulary)", n_vocab=len(tokens))
    a.vocab = vocab_path
    try:
        rm.build(a)
    finally:
        os.unlink(vocab_path)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-ids", metavar="TEXT")
    ap.add_argument("--speaker", metavar="S.json")
    a = ap.parse_args()
    if a.prompt_ids is None:
        write_model(a.out, a.seed)
        return 0
    spk = None
    if a.speaker:
        with open(a.speaker, encoding="utf-8") as f:
            spk = json.load(f)
    p = prompt(a.prompt_ids, spk)
    tokens, _ = vocabulary()
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"prompt": p, "ids": tokenize(p, tokens)}, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
