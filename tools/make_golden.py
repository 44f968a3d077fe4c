#!/usr/bin/python3
"""make_golden.py - build the tiny Hugging Face models behind the golden tests.

    python3 tools/make_golden.py --out tests/fixtures/golden

Needs torch, transformers and tokenizers (run it on a machine that has them;
the test suite itself only needs the committed output). For each case below it
writes OUT/<case>/ with:

  config.json, *.safetensors   save_pretrained output of a seeded random-weight
                               model (one case sharded, dtypes F32/BF16/F16)
  tokenizer.json, tokenizer_config.json (+ chat template)
                               a small BPE vocabulary built here: SentencePiece
                               style with byte fallback (Llama 2) or byte-level
                               (Llama 3 / Qwen regexes)
  reference.json               text, its token ids from the HF tokenizer, the
                               rendered chat template, library versions
  tokens.txt                   the token ids, space separated
  logits.bin                   float32 little-endian [n_tokens][vocab_size]:
                               the model's logits at every position, computed
                               in float32 on the CPU with eager attention
  tokens_long.txt, logits_long.bin
                               phi3 only: a 50-token text past its LongRoPE
                               original context (transformers' long factors)

Cases: llama, llama3, qwen2, qwen3; gemma2, gemma3 (text), phi3 and mistral
(issue 17: windows of 5-8 tokens that the text crosses, soft-capping, q/k
norms, local/global rope bases, partial rotary with LongRoPE, head_dim 32 of a
64-wide model), whose tokenizer_config carries the published Gemma 3,
Phi-4-mini and Mistral v0.3 templates of tests/fixtures/templates.

Cases of issue 17, part two: qwen3moe (8 experts, 2 per token, normalised
top-k weights; weights redrawn until no token's 2nd and 3rd router logits are
within 0.02, so rounding cannot swap an expert; reference.json records the
experts each layer chose), smollm3 (NoPE every 4th layer; the published
template, also rendered with its /think and /no_think flags into
chat_variants) and lfm2 (short-convolution blocks beside attention; a long
text as well). gptoss (issue 17): GptOssForCausalLM with attention sinks,
sliding window 6 on layers 0 and 2 that the texts cross, YaRN, q/k/v/o
biases, 8 biased experts with 4 per token behind a biased router (the 4th
and 5th logits kept 0.02 apart over both texts) and gate_up weights wide
enough to hit the SwiGLU clamp; the published Harmony template.
qwen3next and qwen35 (issue 17): hybrid Gated DeltaNet / gated attention
models (Qwen3NextForCausalLM with experts and a gated shared expert;
Qwen3_5ForCausalLM, dense, and Qwen3_5MoeForCausalLM when the installed
transformers has them), F32, a long text as well.

Weights are drawn larger than the HF initialiser would (norm gains and biases
away from 1 and 0) so that every term of the forward pass moves the logits.
"""
import argparse
import json
import os
import re
import shutil
import sys
from collections import Counter

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

TEXT = "Hello world! The quick brown fox jumps over the lazy dog, 42 times. Café ✓"

CORPUS = """Hello world! Hello there, world. The quick brown fox jumps over the lazy dog.
The dog sleeps; the fox runs. Quick brown foxes and lazy dogs jump over the world.
Over and over, the quick fox jumps. Hello, hello, hello world! It is 42 times better."""

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello world!"}]


# ---- BPE vocabularies ----

def learn_merges(words, n_merges):
    """Greedy BPE on {tuple of symbols: count}; ties broken by the pair itself."""
    words = dict(words)
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges


def bytes_to_unicode():
    """GPT-2's byte -> printable character map used by byte-level BPE."""
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


def spm_tokenizer(n_merges):
    """Llama 2 style: <unk> <s> </s>, 256 byte tokens, merges, then single chars."""
    words = Counter("\u2581" + w for w in CORPUS.split())
    merges = learn_merges({tuple(w): c for w, c in words.items()}, n_merges)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    for ch in sorted(set("".join(words))):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def bytelevel_tokenizer(n_merges, regex, specials, bos=None, ignore_merges=False):
    """Byte-level BPE (Llama 3 / Qwen 2): 256 byte symbols, merges, added specials."""
    b2u = bytes_to_unicode()
    pieces = re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    words = Counter("".join(b2u[b] for b in p.encode("utf-8")) for p in pieces)
    merges = learn_merges({tuple(w): c for w, c in words.items()}, n_merges)
    vocab = {b2u[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    kw = {"ignore_merges": True} if ignore_merges else {}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, **kw))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    bl = processors.ByteLevel(trim_offsets=False)
    if bos:
        tmpl = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                             special_tokens=[(bos, tok.token_to_id(bos))])
        tok.post_processor = processors.Sequence([bl, tmpl])
    else:
        tok.post_processor = bl
    return tok


# ---- cases ----

BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1)


def case_llama():
    tok = spm_tokenizer(80)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), rms_norm_eps=1e-5,
                                   rope_theta=10000.0, tie_word_embeddings=False,
                                   bos_token_id=1, eos_token_id=2, **BASE)
    return dict(cls=transformers.LlamaForCausalLM, cfg=cfg, tok=fast, template=LLAMA2_TEMPLATE,
                tok_config={"add_bos_token": True, "add_eos_token": False},
                dtype=torch.float32, shard="150KB")


def case_llama3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    tok = bytelevel_tokenizer(60, LLAMA3_RE, specials, bos="<|begin_of_text|>", ignore_merges=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|eot_id|>")
    n = tok.get_vocab_size()
    # Llama 3.2: tied embeddings and llama3 rope scaling. original_max_position_embeddings
    # is chosen so that head_dim 16 has frequencies in all three bands of the formula.
    cfg = transformers.LlamaConfig(
        vocab_size=n, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        bos_token_id=tok.token_to_id("<|begin_of_text|>"),
        eos_token_id=tok.token_to_id("<|eot_id|>"), **BASE)
    return dict(cls=transformers.LlamaForCausalLM, cfg=cfg, tok=fast, template=LLAMA3_TEMPLATE,
                tok_config={}, dtype=torch.bfloat16, shard=None, rope_type="llama3")


def qwen_tok():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = bytelevel_tokenizer(60, QWEN2_RE, specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    return tok, fast


def case_qwen2():
    tok, fast = qwen_tok()
    # Like Qwen2.5: the embedding has more rows than the tokenizer has tokens.
    n = (tok.get_vocab_size() + 31) // 32 * 32
    cfg = transformers.Qwen2Config(vocab_size=n, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                   tie_word_embeddings=True,
                                   eos_token_id=tok.token_to_id("<|im_end|>"), **BASE)
    return dict(cls=transformers.Qwen2ForCausalLM, cfg=cfg, tok=fast, template=CHATML_TEMPLATE,
                tok_config={"add_bos_token": False}, dtype=torch.float32, shard=None)


def case_qwen3():
    tok, fast = qwen_tok()
    n = (tok.get_vocab_size() + 31) // 32 * 32
    # head_dim 32 with 4 heads: q is 128 wide while the hidden size is 64.
    cfg = transformers.Qwen3Config(vocab_size=n, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                   tie_word_embeddings=False, head_dim=32,
                                   eos_token_id=tok.token_to_id("<|im_end|>"), **BASE)
    return dict(cls=transformers.Qwen3ForCausalLM, cfg=cfg, tok=fast, template=CHATML_TEMPLATE,
                tok_config={"add_bos_token": False}, dtype=torch.float16, shard=None)


# ---- families of issue 17: sliding windows, soft-capping, fused projections ----

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                         "templates")
# A second, longer text: past phi3's original context (LongRoPE long factors)
# and several sliding windows.
TEXT_LONG = TEXT + " Over and over, the quick fox jumps; hello there, lazy dogs!"


def published_template(name):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
        return f.read()


def gemma_tok():
    """SentencePiece-style vocabulary with Gemma's turn markers as specials."""
    tok = spm_tokenizer(80)
    tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    return tok, fast


GEMMA_COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                    initializer_range=0.1, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                    pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)


def case_gemma2():
    tok, fast = gemma_tok()
    # query_pre_attn_scalar 24 != head_dim 32 (the query scale is its own
    # hyper-parameter); caps small enough to bend the scores and logits;
    # layers alternate sliding (window 6) and full attention.
    cfg = transformers.Gemma2Config(vocab_size=tok.get_vocab_size(), num_hidden_layers=2,
                                    query_pre_attn_scalar=24, sliding_window=6,
                                    attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                                    rope_theta=10000.0, **GEMMA_COMMON)
    return dict(cls=transformers.Gemma2ForCausalLM, cfg=cfg, tok=fast,
                template=published_template("gemma3.jinja"),
                tok_config={"add_bos_token": True, "add_eos_token": False},
                dtype=torch.float32, shard=None)


def case_gemma3():
    tok, fast = gemma_tok()
    # 6 layers: 5 sliding (window 5, rope base 10000) then 1 global (base 1e6);
    # per-head q/k norms; no soft-capping.
    kw = dict(vocab_size=tok.get_vocab_size(), num_hidden_layers=6, query_pre_attn_scalar=24,
              sliding_window=5, **GEMMA_COMMON)
    # transformers 5 keeps one rope dict per layer type; older versions flat keys.
    cfgs = [lambda: transformers.Gemma3TextConfig(
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                **kw),
            lambda: transformers.Gemma3TextConfig(rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                                  **kw)]
    return dict(cls=transformers.Gemma3ForCausalLM, cfg=None, cfgs=cfgs, tok=fast,
                template=published_template("gemma3.jinja"),
                tok_config={"add_bos_token": True, "add_eos_token": False},
                dtype=torch.bfloat16, shard=None)


def case_phi3():
    specials = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    tok = bytelevel_tokenizer(60, QWEN2_RE, specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>",
                                   pad_token="<|endoftext|>")
    n = tok.get_vocab_size()
    # Phi-4-mini shape in small: partial rotary (12 of 16 dims), LongRoPE with
    # short/long factors (6 rotated pairs) and a context 128 / original 40,
    # fused qkv and gate_up, tied embeddings, sliding window 8 on all layers.
    rng = np.random.default_rng(7)
    short = [round(float(x), 4) for x in 1.0 + rng.random(6)]
    long = [round(float(x), 4) for x in 2.0 + 6.0 * rng.random(6)]
    cfg = transformers.Phi3Config(
        vocab_size=n, rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.75,
        rope_scaling={"rope_type": "longrope", "short_factor": short, "long_factor": long,
                      "original_max_position_embeddings": 40},
        original_max_position_embeddings=40, sliding_window=8, tie_word_embeddings=True,
        pad_token_id=tok.token_to_id("<|endoftext|>"), bos_token_id=None,
        eos_token_id=tok.token_to_id("<|end|>"), **BASE)
    return dict(cls=transformers.Phi3ForCausalLM, cfg=cfg, tok=fast,
                template=published_template("phi4-mini.jinja"),
                tok_config={"add_bos_token": False}, dtype=torch.float32, shard=None,
                rope_type="longrope", long_text=TEXT_LONG, short_max=40)


def case_mistral():
    tok = spm_tokenizer(80)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    # Mistral-Nemo / Ministral: head_dim 32 with 4 heads of a 64-wide model;
    # sliding window 7.
    cfg = transformers.MistralConfig(vocab_size=tok.get_vocab_size(), rms_norm_eps=1e-5,
                                     rope_theta=1000000.0, head_dim=32, sliding_window=7,
                                     tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                                     **BASE)
    return dict(cls=transformers.MistralForCausalLM, cfg=cfg, tok=fast,
                template=published_template("mistral-v0.3.jinja"),
                tok_config={"add_bos_token": True, "add_eos_token": False},
                dtype=torch.float32, shard=None)


def case_qwen3moe():
    tok, fast = qwen_tok()
    n = (tok.get_vocab_size() + 31) // 32 * 32
    # Qwen3-30B-A3B in small: 8 experts of 32 (moe_intermediate_size), 2 per
    # token, top-k weights renormalised (norm_topk_prob), q/k norms, head_dim
    # 32 of a 64-wide model, every layer sparse. intermediate_size is the
    # unused dense width. The router's k-th and (k+1)-th logits are kept apart
    # (see routing_margin) so that rounding cannot swap an expert.
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=n, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        eos_token_id=tok.token_to_id("<|im_end|>"), **dict(BASE, num_hidden_layers=3))
    return dict(cls=transformers.Qwen3MoeForCausalLM, cfg=cfg, tok=fast, template=CHATML_TEMPLATE,
                tok_config={"add_bos_token": False}, dtype=torch.float32, shard=None,
                min_routing_margin=0.02)


def case_smollm3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
                "<think>", "</think>"]
    tok = bytelevel_tokenizer(60, LLAMA3_RE, specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|end_of_text|>")
    # SmolLM3-3B in small: 8 layers, NoPE in every 4th (no_rope_layers
    # [1, 1, 1, 0, 1, 1, 1, 0]: layers 3 and 7 attend without rotary), GQA,
    # tied embeddings; the published template with its /think and /no_think
    # system flags.
    cfg = transformers.SmolLM3Config(
        vocab_size=tok.get_vocab_size(), rms_norm_eps=1e-6, rope_theta=5000000.0,
        no_rope_layer_interval=4, use_sliding_window=False, tie_word_embeddings=True,
        pad_token_id=tok.token_to_id("<|end_of_text|>"), bos_token_id=None,
        eos_token_id=tok.token_to_id("<|im_end|>"), **dict(BASE, num_hidden_layers=8))
    return dict(cls=transformers.SmolLM3ForCausalLM, cfg=cfg, tok=fast,
                template=published_template("smollm3.jinja"),
                tok_config={"add_bos_token": False}, dtype=torch.bfloat16, shard=None,
                chat_variants=SMOLLM3_VARIANTS)


def case_lfm2():
    specials = ["<|pad|>", "<|startoftext|>", "<|im_start|>", "<|im_end|>",
                "<|tool_call_start|>", "<|tool_call_end|>"]
    tok = bytelevel_tokenizer(60, LLAMA3_RE, specials, bos="<|startoftext|>")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>",
                                   eos_token="<|im_end|>", pad_token="<|pad|>")
    # LFM2-1.2B in small: 6 layers, short-convolution blocks (kernel 3) with
    # attention at layers 2 and 4 (q/k norms), the feed-forward width
    # auto-adjusted from intermediate_size as LFM2's configs ask (2/3, then up
    # to a multiple of 32: 192 -> 128), tied embeddings.
    layer_types = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
    kw = dict(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=192,
              num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, initializer_range=0.1, norm_eps=1e-5,
              conv_bias=False, conv_L_cache=3, block_multiple_of=32, block_ffn_dim_multiplier=1.0,
              block_auto_adjust_ff_dim=True, tie_word_embeddings=True,
              pad_token_id=tok.token_to_id("<|pad|>"), bos_token_id=tok.token_to_id("<|startoftext|>"),
              eos_token_id=tok.token_to_id("<|im_end|>"))
    cfgs = [lambda: transformers.Lfm2Config(layer_types=layer_types, rope_theta=1000000.0, **kw),
            lambda: transformers.Lfm2Config(full_attn_idxs=[2, 4], rope_theta=1000000.0, **kw)]
    return dict(cls=transformers.Lfm2ForCausalLM, cfg=None, cfgs=cfgs, tok=fast,
                template=CHATML_TEMPLATE, tok_config={"add_bos_token": True, "add_eos_token": False},
                dtype=torch.float32, shard=None, long_text=TEXT_LONG)


def case_gptoss():
    specials = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                "<|start|>", "<|end|>", "<|message|>", "<|call|>"]
    tok = bytelevel_tokenizer(60, LLAMA3_RE, specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|return|>",
                                   pad_token="<|endoftext|>")
    # gpt-oss-20b in small: 3 layers alternating sliding (window 6, layers 0
    # and 2) and full attention, a learned sink logit per head, q/k/v/o
    # biases, head_dim 32 of a 64-wide model, YaRN (factor 32 over an original
    # 4096 as the published config, truncate false), 8 experts with 4 per
    # token (softmax over the top-4 router logits, router bias), interleaved
    # gate_up [E, H, 2I] with biases, clamped SwiGLU (alpha 1.702, limit 7).
    # intermediate 48 so that H (64), I and 2I (96) tell the layouts apart.
    rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": False}
    kw = dict(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=48,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              num_local_experts=8, num_experts_per_tok=4, sliding_window=6,
              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
              attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
              initializer_range=0.1, tie_word_embeddings=False,
              pad_token_id=tok.token_to_id("<|endoftext|>"), bos_token_id=None,
              eos_token_id=tok.token_to_id("<|return|>"))
    cfgs = [lambda: transformers.GptOssConfig(rope_parameters=dict(rope, rope_theta=150000.0), **kw),
            lambda: transformers.GptOssConfig(rope_scaling=rope, rope_theta=150000.0, **kw)]
    return dict(cls=transformers.GptOssForCausalLM, cfg=None, cfgs=cfgs, tok=fast,
                template=published_template("gpt-oss.jinja"),
                tok_config={"add_bos_token": False}, dtype=torch.bfloat16, shard=None,
                rope_type="yarn", long_text=TEXT_LONG, min_routing_margin=0.02,
                extra_randomize=gptoss_randomize)


def gptoss_randomize(model, gen):
    """Sinks large enough to take a real share of the softmax, expert biases
    (2-D, so randomize() leaves them at zero), gate_up weights wide enough
    that some gate and up values pass the clamp limit of 7, a wide router."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("gate_up_proj_bias") or name.endswith("down_proj_bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("gate_up_proj"):
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))
            elif name.endswith("router.weight"):
                # router logits spread wide (std ~6): with 4 of 8 experts
                # over ~130 token-layers, draws whose 4th and 5th logits
                # stay 0.02 apart everywhere are common enough
                p.copy_(0.8 * torch.randn(p.shape, generator=gen))


# Qwen3-Next / Qwen3.5 in small (issue 17): Gated DeltaNet layers (conv
# kernel 4, 2 key heads of 16, 4 value heads of 16: two value heads share a
# key head) beside gated full-attention layers (layers 1 and 3: q/k norms,
# head_dim 32 of a 64-wide model, rotary on a quarter of it, sigmoid output
# gate). qwen3next: 8 experts of 32, 2 per token, renormalised, plus a
# shared expert of 48 behind a sigmoid gate. qwen35: a dense SwiGLU FFN and
# the interleaved M-RoPE sections of Qwen3.5 (equal for text positions).
NEXT_LAYERS = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
NEXT_DIMS = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, max_position_embeddings=128, initializer_range=0.1,
                 rms_norm_eps=1e-6, linear_conv_kernel_dim=4, linear_key_head_dim=16,
                 linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                 tie_word_embeddings=False, layer_types=NEXT_LAYERS)


def next_cfgs(cls_name, rope, **kw):
    """Config candidates: rope_parameters (transformers 5) or the older keys."""
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no {cls_name}")
    return [lambda: cls(rope_parameters=dict(rope), **kw),
            lambda: cls(rope_theta=rope["rope_theta"],
                        partial_rotary_factor=rope["partial_rotary_factor"], **kw)]


def case_qwen3next():
    tok, fast = qwen_tok()
    n = (tok.get_vocab_size() + 31) // 32 * 32
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}
    kw = dict(NEXT_DIMS, vocab_size=n, intermediate_size=96, num_experts=8, num_experts_per_tok=2,
              moe_intermediate_size=32, shared_expert_intermediate_size=48, norm_topk_prob=True,
              decoder_sparse_step=1, mlp_only_layers=[],
              eos_token_id=tok.token_to_id("<|im_end|>"))
    if getattr(transformers, "Qwen3NextForCausalLM", None) is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no Qwen3NextForCausalLM")
    return dict(cls=transformers.Qwen3NextForCausalLM, cfg=None,
                cfgs=next_cfgs("Qwen3NextConfig", rope, **kw), tok=fast,
                template=CHATML_TEMPLATE, tok_config={"add_bos_token": False},
                dtype=torch.float32, shard=None, long_text=TEXT_LONG, min_routing_margin=0.02,
                extra_randomize=next_randomize)


def case_qwen35():
    tok, fast = qwen_tok()
    n = (tok.get_vocab_size() + 31) // 32 * 32
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    kw = dict(NEXT_DIMS, vocab_size=n, intermediate_size=96,
              eos_token_id=tok.token_to_id("<|im_end|>"))
    cls = getattr(transformers, "Qwen3_5ForCausalLM", None)
    if cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no Qwen3_5ForCausalLM")
    return dict(cls=cls, cfg=None, cfgs=next_cfgs("Qwen3_5TextConfig", rope, **kw), tok=fast,
                template=published_template("qwen3.5.jinja"), tok_config={"add_bos_token": False},
                dtype=torch.float32, shard=None, long_text=TEXT_LONG,
                extra_randomize=next_randomize)


def case_qwen35moe():
    tok, fast = qwen_tok()
    n = (tok.get_vocab_size() + 31) // 32 * 32
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    kw = dict(NEXT_DIMS, vocab_size=n, num_experts=8, num_experts_per_tok=2,
              moe_intermediate_size=32, shared_expert_intermediate_size=48,
              eos_token_id=tok.token_to_id("<|im_end|>"))
    cls = getattr(transformers, "Qwen3_5MoeForCausalLM", None)
    if cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no Qwen3_5MoeForCausalLM")
    return dict(cls=cls, cfg=None, cfgs=next_cfgs("Qwen3_5MoeTextConfig", rope, **kw), tok=fast,
                template=published_template("qwen3.5.jinja"), tok_config={"add_bos_token": False},
                dtype=torch.float32, shard=None, long_text=TEXT_LONG, min_routing_margin=0.02,
                extra_randomize=next_randomize)


def next_randomize(model, gen):
    """Gated DeltaNet: decays of different speeds per value head (A_log and
    dt_bias spread), conv kernels and the gated norm away from their
    initial values, so that the state carries information over many tokens."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.linspace(-2.0, 0.5, p.numel()).reshape(p.shape))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("conv1d.weight"):
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))


# SmolLM3's reasoning switches: enable_thinking, and the /think and /no_think
# flags of the system message, which override it.
SMOLLM3_VARIANTS = [
    dict(messages=[{"role": "system", "content": "You are terse. /no_think"},
                   {"role": "user", "content": "Hello world!"}], kwargs={}),
    dict(messages=[{"role": "system", "content": "You are terse. /think"},
                   {"role": "user", "content": "Hello world!"}],
         kwargs={"enable_thinking": False}),
    dict(messages=[{"role": "user", "content": "Hello world!"}],
         kwargs={"enable_thinking": False}),
]


CASES = {"llama": case_llama, "llama3": case_llama3, "qwen2": case_qwen2, "qwen3": case_qwen3,
         "gemma2": case_gemma2, "gemma3": case_gemma3, "phi3": case_phi3, "mistral": case_mistral,
         "qwen3moe": case_qwen3moe, "smollm3": case_smollm3, "lfm2": case_lfm2,
         "gptoss": case_gptoss, "qwen3next": case_qwen3next, "qwen35": case_qwen35,
         "qwen35moe": case_qwen35moe}



def randomize(model, gen):
    """Norm gains 1 +- 0.2 and biases +- 0.2 (HF initialises them to 1 and 0)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def routing_margin(model, ids, k, chosen=None):
    """Smallest gap between the k-th and (k+1)-th router logit over every
    token and MoE layer, computed from each sparse block's input; the experts
    each layer picks go into chosen (a list) when given."""
    gaps = []

    def hook(mod, args):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        router = mod.gate if hasattr(mod, "gate") else mod.router  # gpt-oss: router + bias
        logits = x @ router.weight.float().t()
        if getattr(router, "bias", None) is not None:
            logits = logits + router.bias.float()
        top = torch.topk(logits, k + 1, dim=-1)
        gaps.append(float((top.values[:, k - 1] - top.values[:, k]).min()))
        if chosen is not None:
            chosen.append(top.indices[:, :k].tolist())
    handles = [m.register_forward_pre_hook(hook) for n, m in model.named_modules()
               if (hasattr(m, "gate") or hasattr(m, "router")) and hasattr(m, "experts")]
    if not handles:
        raise RuntimeError("no MoE blocks found for the routing margin")
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in handles:
        h.remove()
    return min(gaps)


def build(name, out, seed):
    spec = CASES[name]()
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    torch.manual_seed(seed)
    cfg = spec["cfg"]
    for make_cfg in spec.get("cfgs", []):  # the first candidate config that builds a model
        try:
            cfg = make_cfg()
            cfg._attn_implementation = "eager"
            spec["cls"](cfg)
            break
        except Exception as e:
            print(f"{name}: config candidate failed: {e}", file=sys.stderr)
            cfg = None
    cfg._attn_implementation = "eager"
    if spec.get("rope_type"):
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type")) != spec["rope_type"]:
            raise RuntimeError(f"{name}: config lost the rope scaling: {rope}")
    fast = spec["tok"]
    fast.chat_template = spec["template"]
    ids = fast(TEXT)["input_ids"]

    def make_model(s):
        torch.manual_seed(s)
        model = spec["cls"](cfg).float().eval()
        randomize(model, torch.Generator().manual_seed(s + 1))
        if spec.get("extra_randomize"):
            spec["extra_randomize"](model, torch.Generator().manual_seed(s + 2))
        # The reference runs in float32 on exactly the values that are stored.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(spec["dtype"]).float())
        return model
    model = make_model(seed)
    margin = None
    if spec.get("min_routing_margin"):
        # MoE: draw weights until no token's k-th and (k+1)-th router logits
        # are closer than the margin (a near-tie would let rounding pick
        # another expert and change the logits discontinuously).
        for attempt in range(200):
            margin = routing_margin(model, ids, cfg.num_experts_per_tok)
            if spec.get("long_text"):  # the long text's tokens route too
                margin = min(margin, routing_margin(model, fast(spec["long_text"])["input_ids"],
                                                    cfg.num_experts_per_tok))
            if margin >= spec["min_routing_margin"]:
                break
            seed += 7919
            model = make_model(seed)
        else:
            raise RuntimeError(f"{name}: no draw with routing margin {spec['min_routing_margin']}")
        print(f"{name}: routing margin {margin:.4f} (seed {seed})", file=sys.stderr)
        chosen = []
        routing_margin(model, ids, cfg.num_experts_per_tok, chosen)
    try:
        chat = fast.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # a template that refuses the system turn, say
        print(f"{name}: chat template: {e}", file=sys.stderr)
        chat = None
    long_ids = fast(spec["long_text"])["input_ids"] if spec.get("long_text") else None
    if spec.get("short_max") and not len(ids) <= spec["short_max"] < len(long_ids):
        raise RuntimeError(f"{name}: {len(ids)} / {len(long_ids)} tokens do not straddle "
                           f"{spec['short_max']}")

    # inv_freq buffers after each run: LongRoPE swaps them by sequence length
    def rope_state():
        st = {n: [float(v) for v in b.flatten()] for n, b in model.named_buffers() if "inv_freq" in n}
        for n, mod in model.named_modules():
            if hasattr(mod, "attention_scaling"):
                st[n + ".attention_scaling"] = float(mod.attention_scaling)
        return st
    debug = {}
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
        debug["rope_after_text"] = rope_state()
        logits_long = None
        if long_ids:
            logits_long = model(torch.tensor([long_ids])).logits[0].float().numpy()
            debug["rope_after_long_text"] = rope_state()

    save_kw = {"max_shard_size": spec["shard"]} if spec["shard"] else {}
    model.to(spec["dtype"]).save_pretrained(d, **save_kw)
    fast.save_pretrained(d)
    tc_path = os.path.join(d, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    tc.update(spec["tok_config"])
    tc.setdefault("chat_template", spec["template"])
    with open(tc_path, "w") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
    jinja = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)  # keep one copy of the template, in tokenizer_config.json

    # Reload what was written and check it reproduces the reference exactly.
    again = spec["cls"].from_pretrained(d, torch_dtype=torch.float32,
                                        attn_implementation="eager").eval()
    with torch.no_grad():
        logits2 = again(torch.tensor([ids])).logits[0].float().numpy()
    if not np.array_equal(logits, logits2):
        raise RuntimeError(f"{name}: reloaded model differs by {np.abs(logits - logits2).max()}")

    logits.astype("<f4").tofile(os.path.join(d, "logits.bin"))
    if logits_long is not None:
        logits_long.astype("<f4").tofile(os.path.join(d, "logits_long.bin"))
        with open(os.path.join(d, "tokens_long.txt"), "w") as f:
            f.write(" ".join(map(str, long_ids)) + "\n")
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    variants = []
    for v in spec.get("chat_variants", []):
        variants.append(dict(v, rendered=fast.apply_chat_template(
            v["messages"], tokenize=False, add_generation_prompt=True, **v["kwargs"])))
    ref = {"text": TEXT, "ids": ids, "n_tokens": len(ids), "vocab_size": cfg.vocab_size,
           "chat_messages": CHAT, "chat_rendered": chat, "seed": seed,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "tokenizers": tokenizers.__version__,
           "logits_abs_max": float(np.abs(logits).max()), "logits_std": float(logits.std())}
    if variants:
        ref["chat_variants"] = variants
    if margin is not None:
        ref["routing_margin"] = margin
        ref["routing_experts"] = chosen  # [layer][token][k], best first
    if long_ids:
        ref.update(text_long=spec["long_text"], ids_long=long_ids, n_tokens_long=len(long_ids))
    if spec.get("long_text") or name in ("gemma2", "gemma3", "phi3", "mistral"):
        ref["debug"] = debug
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: {len(ids)} tokens, vocab {cfg.vocab_size}, logits std {logits.std():.3f}, "
          f"{size / 1024:.0f} KiB: {sorted(os.listdir(d))}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (one subdirectory per case)")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"tokenizers {tokenizers.__version__}", file=sys.stderr)
    torch.set_num_threads(1)
    failed = []
    for name in args.case or CASES:
        try:
            build(name, args.out, seed=1234 + 10 * list(CASES).index(name))
        except Exception as e:  # report every case, then fail
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {e}")
    if failed:
        sys.exit("make_golden: failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
