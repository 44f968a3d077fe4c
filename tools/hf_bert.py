"""hf_bert.py - the BERT half of hf_to_gguf.py: BertModel / BertForSequenceClassification.

Writes the GGUF layout llama.cpp's convert_hf_to_gguf.py uses for arch `bert`:
  - keys bert.{context_length, embedding_length, feed_forward_length,
    block_count, attention.head_count, attention.layer_norm_epsilon,
    attention.causal (false), pooling_type}; the pooling type comes from a
    sentence-transformers modules.json + <pooling dir>/config.json when
    present (mean / cls / last), rank (4) for a sequence classifier;
  - tensors token_embd, token_types, position_embd, token_embd_norm,
    blk.N.attn_{q,k,v,output}, attn_output_norm, ffn_up, ffn_down,
    layer_output_norm (weights and biases); a classifier as cls (the BERT
    pooler's dense layer, followed by tanh) and cls.output (the classifier);
  - the WordPiece vocabulary in llama.cpp's "phantom space" form: a word-start
    piece gets a leading U+2581, a "##" continuation loses its "##",
    bracketed specials stay as they are; tokenizer.ggml.model = "bert",
    token_type_count 2, special ids (cls, seperator, padding, unknown, mask).
Used by hf_to_gguf.py; needs numpy only.
"""
import json
import os

import numpy as np

import gguf

POOL_NONE, POOL_MEAN, POOL_CLS, POOL_LAST, POOL_RANK = 0, 1, 2, 3, 4
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED = 1, 2, 3, 4, 5
ARCHITECTURES = ("BertModel", "BertForSequenceClassification")


class BertError(Exception):
    pass


def _read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise BertError(f"{path}: {what} not found")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BertError(f"{path}: invalid JSON: {e}")


def sentence_transformers_pooling(model_dir):
    """The pooling a sentence-transformers checkpoint declares, or None."""
    mpath = os.path.join(model_dir, "modules.json")
    if not os.path.exists(mpath):
        return None
    modules = _read_json(mpath, "modules.json")
    if not isinstance(modules, list):
        raise BertError(f"{mpath}: not a list of modules")
    for mod in modules:
        if isinstance(mod, dict) and mod.get("type") == "sentence_transformers.models.Pooling":
            ppath = os.path.join(model_dir, str(mod.get("path", "")), "config.json")
            cfg = _read_json(ppath, "pooling config")
            if cfg.get("pooling_mode_mean_tokens"):
                return POOL_MEAN
            if cfg.get("pooling_mode_cls_token"):
                return POOL_CLS
            if cfg.get("pooling_mode_lasttoken"):
                return POOL_LAST
            raise BertError(f"{ppath}: pooling mode not supported (mean, cls and last token are)")
    return None


def _need(cfg, path, key):
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise BertError(f"{path}: '{key}' missing or not a positive integer")
    return v


def _phantom(tok):
    if tok.startswith("[") and tok.endswith("]"):
        return tok
    if tok.startswith("##"):
        return tok[2:]
    return "\u2581" + tok


def add_vocab(w, model_dir, n_vocab):
    path = os.path.join(model_dir, "tokenizer.json")
    tj = _read_json(path, "tokenizer.json")
    model = tj.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise BertError(f"{path}: tokenizer model {model.get('type')!r} not supported for BERT "
                        "(only WordPiece)")
    vocab = dict(model["vocab"])
    specials = set()
    for t in tj.get("added_tokens") or []:
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            specials.add(t["id"])
    if max(vocab.values()) >= n_vocab:
        raise BertError(f"{path}: token id {max(vocab.values())} is outside vocab_size {n_vocab}")
    tokens = [None] * n_vocab
    for text, i in vocab.items():
        tokens[i] = text
    unk = model.get("unk_token", "[UNK]")
    types = []
    for i, text in enumerate(tokens):
        if text is None:
            tokens[i] = f"[PAD{i}]"
            types.append(TOK_UNUSED)
        elif text == unk:
            types.append(TOK_UNKNOWN)
        elif i in specials:
            types.append(TOK_CONTROL)
        else:
            types.append(TOK_NORMAL)
    norm = tj.get("normalizer") or {}
    norms = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
    lower, strip = True, None
    for n in norms:
        if n.get("type") == "BertNormalizer":
            lower = bool(n.get("lowercase", True))
            strip = n.get("strip_accents")
        elif n.get("type") == "Lowercase":
            lower = True
    strip = lower if strip is None else bool(strip)
    w.add("tokenizer.ggml.model", "bert")
    w.add("tokenizer.ggml.tokens", [_phantom(t) for t in tokens])
    w.add("tokenizer.ggml.token_type", types, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
    w.add("tokenizer.ggml.token_type_count", 2, gguf.GGUF_UINT32)
    w.add("tokenizer.ggml.normalizer.lowercase", lower)
    w.add("tokenizer.ggml.normalizer.strip_accents", strip)
    by_text = {t: i for t, i in vocab.items()}
    for text, key in (("[CLS]", "cls_token_id"), ("[SEP]", "seperator_token_id"),
                      ("[PAD]", "padding_token_id"), (unk, "unknown_token_id"),
                      ("[MASK]", "mask_token_id")):
        if text in by_text:
            w.add(f"tokenizer.ggml.{key}", by_text[text], gguf.GGUF_UINT32)
    for text in ("[CLS]", "[SEP]"):
        if text not in by_text:
            raise BertError(f"{path}: no {text} token")
    return len(tokens)


def convert(model_dir, out, ggml_type, file_type, ckpt, quantize_q8_0, log):
    """Write OUT from MODEL_DIR; ckpt maps tensor names to SafetensorsFile."""
    path = os.path.join(model_dir, "config.json")
    cfg = _read_json(path, "config.json")
    hf_arch = (cfg.get("architectures") or [None])[0]
    rank = hf_arch == "BertForSequenceClassification"
    n_vocab, H = _need(cfg, path, "vocab_size"), _need(cfg, path, "hidden_size")
    F, L = _need(cfg, path, "intermediate_size"), _need(cfg, path, "num_hidden_layers")
    n_head, n_ctx = _need(cfg, path, "num_attention_heads"), _need(cfg, path, "max_position_embeddings")
    n_types = cfg.get("type_vocab_size", 2)
    if H % n_head:
        raise BertError(f"{path}: hidden_size {H} is not a multiple of num_attention_heads {n_head}")
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise BertError(f"{path}: hidden_act {act!r} not supported (only gelu)")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise BertError(f"{path}: position_embedding_type {cfg['position_embedding_type']!r} "
                        "not supported (only absolute)")
    pooling = POOL_RANK if rank else sentence_transformers_pooling(model_dir)
    names = set(ckpt)
    prefix = "bert." if any(n.startswith("bert.") for n in names) else ""
    plan = [("token_embd.weight", "embeddings.word_embeddings.weight", (n_vocab, H)),
            ("token_types.weight", "embeddings.token_type_embeddings.weight", (n_types, H)),
            ("position_embd.weight", "embeddings.position_embeddings.weight", (n_ctx, H)),
            ("token_embd_norm.weight", "embeddings.LayerNorm.weight", (H,)),
            ("token_embd_norm.bias", "embeddings.LayerNorm.bias", (H,))]
    for i in range(L):
        p, b = f"encoder.layer.{i}.", f"blk.{i}."
        for g, hf, shape in (("attn_q", "attention.self.query", (H, H)),
                             ("attn_k", "attention.self.key", (H, H)),
                             ("attn_v", "attention.self.value", (H, H)),
                             ("attn_output", "attention.output.dense", (H, H)),
                             ("attn_output_norm", "attention.output.LayerNorm", (H,)),
                             ("ffn_up", "intermediate.dense", (F, H)),
                             ("ffn_down", "output.dense", (H, F)),
                             ("layer_output_norm", "output.LayerNorm", (H,))):
            plan.append((b + g + ".weight", p + hf + ".weight", shape))
            plan.append((b + g + ".bias", p + hf + ".bias", shape[:1]))
    plan = [(g, prefix + hf, s) for g, hf, s in plan]
    n_labels = 0
    if rank:
        n_labels = cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 1
        plan += [("cls.weight", "bert.pooler.dense.weight", (H, H)),
                 ("cls.bias", "bert.pooler.dense.bias", (H,)),
                 ("cls.output.weight", "classifier.weight", (n_labels, H)),
                 ("cls.output.bias", "classifier.bias", (n_labels,))]
    missing = [hf for _, hf, _ in plan if hf not in names]
    if missing:
        raise BertError(f"checkpoint lacks {len(missing)} tensor(s) {hf_arch} needs: "
                        + ", ".join(missing[:5]))
    used = {hf for _, hf, _ in plan}
    ignored = {prefix + "embeddings.position_ids", "bert.pooler.dense.weight", "bert.pooler.dense.bias",
               "pooler.dense.weight", "pooler.dense.bias"}
    extra = [n for n in names if n not in used and n not in ignored]
    if extra:
        raise BertError(f"checkpoint has {len(extra)} tensor(s) this converter does not know: "
                        + ", ".join(sorted(extra)[:5]))

    name = cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir))
    log(f"{hf_arch} -> bert: {L} layers, hidden {H}, heads {n_head}, ff {F}, vocab {n_vocab}, "
        f"ctx {n_ctx}, pooling {pooling}" + (f", {n_labels} label(s)" if rank else ""))
    w = gguf.GGUFWriter(out)
    a = "bert"
    w.add("general.architecture", a)
    w.add("general.name", name)
    w.add(f"{a}.context_length", n_ctx, gguf.GGUF_UINT32)
    w.add(f"{a}.embedding_length", H, gguf.GGUF_UINT32)
    w.add(f"{a}.feed_forward_length", F, gguf.GGUF_UINT32)
    w.add(f"{a}.block_count", L, gguf.GGUF_UINT32)
    w.add(f"{a}.attention.head_count", n_head, gguf.GGUF_UINT32)
    w.add(f"{a}.attention.layer_norm_epsilon", float(cfg.get("layer_norm_eps", 1e-12)),
          gguf.GGUF_FLOAT32)
    w.add(f"{a}.attention.causal", False)
    if pooling is not None:
        w.add(f"{a}.pooling_type", pooling, gguf.GGUF_UINT32)
    w.add("general.file_type", file_type, gguf.GGUF_UINT32)
    w.add("general.quantization_version", 2, gguf.GGUF_UINT32)
    add_vocab(w, model_dir, n_vocab)
    for gname, hfname, want in plan:
        dtype, shape, _, _ = ckpt[hfname].tensors[hfname]
        if tuple(shape) != tuple(want):
            raise BertError(f"{ckpt[hfname].path}: tensor '{hfname}': shape {list(shape)}, "
                            f"expected {list(want)} from config.json")
        t = ggml_type
        # 1-D tensors, norms and the embedding tables read by row stay F32
        # (llama.cpp keeps token_types F32 too); matrices take --type.
        if len(shape) == 1 or gname in ("token_types.weight", "position_embd.weight"):
            t = gguf.GGML_F32
        elif t == gguf.GGML_Q8_0 and shape[-1] % 32:
            t = gguf.GGML_F16

        def data(hfname=hfname, t=t):
            x = ckpt[hfname].load(hfname)
            if t == gguf.GGML_Q8_0:
                return quantize_q8_0(x)
            return x.astype("<f4" if t == gguf.GGML_F32 else "<f2").tobytes()

        w.add_tensor_raw(gname, t, tuple(shape), data)
    return w
