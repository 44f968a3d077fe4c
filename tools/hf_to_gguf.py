#!/usr/bin/python3
"""hf_to_gguf.py - convert a Hugging Face Llama / Mistral / Qwen2 / Qwen3 / Qwen3-MoE / SmolLM3 /
Gemma 2 / Gemma 3 (text) / Phi-3 / LFM2 / gpt-oss / BERT checkpoint to GGUF.

    tools/hf_to_gguf.py MODEL_DIR OUT.gguf [--type f32|f16|q8_0]

MODEL_DIR is what save_pretrained (or a hub download) leaves: config.json,
model.safetensors or shards listed in model.safetensors.index.json (F32, F16
or BF16), tokenizer.json and tokenizer_config.json. Needs Python 3 and numpy
only; safetensors files are parsed here (8-byte header length, JSON header,
raw little-endian data) and memory-mapped, so tensors are converted one at a
time as they are written.

The output matches what llama.cpp's convert_hf_to_gguf.py writes for these
architectures, so files from either converter load the same way:
  - tensor names token_embd, blk.N.attn_q/k/v/output, attn_norm, ffn_norm,
    ffn_gate/up/down, attn_q_norm/attn_k_norm (qwen3), output_norm, output
    (absent when the embeddings are tied), rope_freqs (llama3 rope scaling);
  - llama Q/K rows are permuted so that RoPE rotates adjacent pairs (2i, 2i+1);
    qwen2/qwen3 keep the HF order (NEOX rope rotates halves i, i + d/2);
  - norm weights, biases and every 1-D tensor stay F32; matrices take --type
    (Q8_0 bit-exact with ggml's reference quantizer; rows that are not a
    multiple of 32 fall back to F16, as llama.cpp does);
  - tokenizer.ggml.*: byte-level BPE ("gpt2", pre-tokenizer named from the
    tokenizer.json regex) or SentencePiece-style BPE with byte fallback
    ("llama", with scores from the merge ranks), special token ids, add_bos,
    and the chat template;
  - embedding checkpoints: a sentence-transformers modules.json +
    1_Pooling/config.json sets <arch>.pooling_type (mean 1, cls 2, last 3);
    Qwen3-Embedding style files whose tensors lack the "model." prefix load
    as Qwen3ForCausalLM with tied embeddings;
  - gemma2 / gemma3: every *norm.weight is stored plus one (HF computes
    x * (1 + w), llama.cpp's converter folds the 1 in); post_attention_norm,
    post_ffw_norm; attention.sliding_window, attn/final_logit_softcapping;
    rope.freq_base_swa (gemma3's local layers); attention.scale =
    query_pre_attn_scalar^-1/2 (llama.cpp derives it from the model size);
  - phi3: fused attn_qkv and ffn_up (gate rows then up rows) as HF stores
    them; rope.dimension_count from partial_rotary_factor; LongRoPE as the
    rope_factors_short/long tensors, rope.scaling.original_context_length and
    rope.scaling.attn_factor; attention.sliding_window (0: none);
  - qwen3moe: ffn_gate_inp (the router, kept F32 as llama.cpp keeps it) and
    the 3-D ffn_gate_exps / ffn_up_exps / ffn_down_exps, stacked from one
    matrix per expert or sliced from transformers 5's fused
    experts.gate_up_proj; expert_count, expert_used_count,
    expert_feed_forward_length and expert_weights_norm (norm_topk_prob);
  - smollm3: llama's layout (Q/K rows permuted); its NoPE layers are every
    4th, as llama.cpp assumes (another no_rope_layers pattern is an error);
  - MistralForCausalLM converts as llama (head_dim may differ from
    hidden/heads: attention.key_length) with attention.sliding_window;
  - gpt-oss (GptOssForCausalLM): dense F32/BF16/F16 experts as
    save_pretrained writes a random or dequantized model - experts.gate_up_proj
    [E, n_embd, 2 ff] with gate and up columns interleaved (gate even, up odd)
    is transposed and split into ffn_gate_exps / ffn_up_exps, down_proj [E,
    ff, n_embd] transposed into ffn_down_exps - or the hub's MXFP4 experts
    (gate_up_proj_blocks [E, 2 ff, n_embd / 32, 16] and _scales [E, 2 ff,
    n_embd / 32], rows interleaved the same way; down_proj_blocks/_scales),
    copied as MXFP4 whatever --type says: each 16-byte block's nibbles
    (values 2j low, 2j + 1 high) reordered to ggml's (j low, j + 16 high)
    behind its E8M0 scale byte; their biases into
    ffn_{gate,up,down}_exps.bias, the router into ffn_gate_inp.weight/.bias
    (F32), self_attn.sinks into attn_sinks.weight, post_attention_layernorm
    into post_attention_norm (llama.cpp's name for the FFN norm); q/k/v/o
    biases; expert_count, expert_used_count, expert_feed_forward_length,
    attention.sliding_window (every other layer from layer 0, checked against
    layer_types) and YaRN (rope.scaling.type yarn, factor,
    original_context_length, yarn_beta_fast/slow);
  - BertModel / BertForSequenceClassification: see hf_bert.py.
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402  (tools/gguf.py)
import hf_bert  # noqa: E402  (tools/hf_bert.py)

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3Model": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3moe",
    "SmolLM3ForCausalLM": "smollm3",
    "Lfm2ForCausalLM": "lfm2",
    "GptOssForCausalLM": "gpt-oss",
    "Qwen3NextForCausalLM": "qwen3next",
    "Qwen3_5ForCausalLM": "qwen35",
    "Qwen3_5MoeForCausalLM": "qwen35moe",
}
# hybrid Gated DeltaNet / gated-attention families (Qwen3-Next, Qwen3.5)
HYBRID = ("qwen3next", "qwen35", "qwen35moe")
GGML_MXFP4 = 39  # gpt-oss experts: blocks of 32 FP4 values and an E8M0 scale
gguf.GGML_TYPES.setdefault(GGML_MXFP4, ("MXFP4", 32, 17))
FILE_TYPES = {"f32": (gguf.GGML_F32, 0), "f16": (gguf.GGML_F16, 1), "q8_0": (gguf.GGML_Q8_0, 7),
              "bf16": (gguf.GGML_BF16, 32)}

# token types stored in tokenizer.ggml.token_type
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6

# The regexes of the HF tokenizer.json Split pre-tokenizers llama.cpp knows by name.
PRE_TOKENIZER_REGEXES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2",
}


class ConvertError(Exception):
    pass


def log(msg):
    sys.stderr.write(f"hf_to_gguf: {msg}\n")


def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConvertError(f"{path}: {what} not found")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: invalid JSON: {e}")


# ---- safetensors ----

# U8: gpt-oss's MXFP4 blocks and scales (read raw, never as floats)
SAFETENSORS_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "U8": ("u1", 1)}


class SafetensorsFile:
    """One .safetensors file: header parsed and checked, data memory-mapped."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ConvertError(f"{path}: truncated safetensors file ({size} bytes)")
            n = int.from_bytes(head, "little")
            if n > size - 8 or n > 256 << 20:
                raise ConvertError(f"{path}: header length {n} past end of file ({size} bytes)")
            try:
                header = json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ConvertError(f"{path}: invalid safetensors header: {e}")
        if not isinstance(header, dict):
            raise ConvertError(f"{path}: safetensors header is not a JSON object")
        self.data_start = 8 + n
        self.tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise ConvertError(f"{path}: tensor '{name}': malformed header entry")
            if dtype not in SAFETENSORS_DTYPES:
                raise ConvertError(f"{path}: tensor '{name}': unsupported dtype {dtype} "
                                   f"(supported: {', '.join(SAFETENSORS_DTYPES)})")
            nbytes = SAFETENSORS_DTYPES[dtype][1] * math.prod(shape)
            if not (0 <= begin <= end and end - begin == nbytes and self.data_start + end <= size):
                raise ConvertError(f"{path}: tensor '{name}': data offsets [{begin}, {end}] do not "
                                   f"fit shape {shape} {dtype} in a {size}-byte file")
            self.tensors[name] = (dtype, tuple(shape), begin, end)
        self.map = np.memmap(path, dtype=np.uint8, mode="r") if size else None

    def load(self, name):
        """The tensor as float32 (U8 tensors as they are)."""
        dtype, shape, begin, end = self.tensors[name]
        raw = self.map[self.data_start + begin:self.data_start + end]
        if dtype == "U8":
            return np.asarray(raw).reshape(shape)
        npt = SAFETENSORS_DTYPES[dtype][0]
        a = raw.view(npt)
        if dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float32).reshape(shape)


def open_checkpoint(model_dir):
    """name -> SafetensorsFile for every tensor of the checkpoint."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        weight_map = read_json(index_path, "index").get("weight_map")
        if not isinstance(weight_map, dict):
            raise ConvertError(f"{index_path}: no weight_map")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(model_dir, "*.safetensors")))
        if not files:
            bins = glob.glob(os.path.join(model_dir, "*.bin"))
            extra = " (PyTorch .bin checkpoints are not supported: re-save with safetensors)" if bins else ""
            raise ConvertError(f"{model_dir}: no *.safetensors files{extra}")
    tensors = {}
    for fname in files:
        path = os.path.join(model_dir, fname)
        if not os.path.exists(path):
            raise ConvertError(f"{path}: listed in the index but missing")
        st = SafetensorsFile(path)
        for name in st.tensors:
            tensors[name] = st
    log(f"{len(tensors)} tensors in {len(files)} safetensors file(s)")
    return tensors


# ---- hyper-parameters ----

class HParams:
    def __init__(self, model_dir):
        path = os.path.join(model_dir, "config.json")
        cfg = read_json(path, "config.json")
        archs = cfg.get("architectures") or []
        hf_arch = archs[0] if archs else None
        if hf_arch not in ARCHITECTURES:
            raise ConvertError(f"{path}: unsupported architecture {hf_arch!r} "
                               f"(supported: {', '.join(ARCHITECTURES)})")
        self.cfg = cfg
        self.hf_arch = hf_arch
        self.arch = ARCHITECTURES[hf_arch]

        def need(key):
            v = cfg.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConvertError(f"{path}: '{key}' missing or not a positive integer")
            return v

        self.n_vocab = need("vocab_size")
        self.n_embd = need("hidden_size")
        # Qwen3.5-MoE has experts only: its width stands in for the dense one
        self.n_ff = need("intermediate_size" if "intermediate_size" in cfg or hf_arch != "Qwen3_5MoeForCausalLM"
                         else "moe_intermediate_size")
        self.n_layer = need("num_hidden_layers")
        self.n_head = need("num_attention_heads")
        self.n_head_kv = cfg.get("num_key_value_heads") or self.n_head
        self.n_ctx = cfg.get("max_position_embeddings")
        self.head_dim = cfg.get("head_dim") or self.n_embd // self.n_head
        self.norm_eps = float(cfg.get("rms_norm_eps", cfg.get("norm_eps", 1e-6)))
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        if self.n_head % self.n_head_kv:
            raise ConvertError(f"{path}: num_attention_heads {self.n_head} is not a multiple of "
                               f"num_key_value_heads {self.n_head_kv}")
        if self.head_dim % 2:
            raise ConvertError(f"{path}: head_dim {self.head_dim} is odd")
        self.gemma = self.arch in ("gemma2", "gemma3")
        act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu"
        if self.gemma and act not in ("gelu_pytorch_tanh", "gelu_tanh", "gelu"):
            raise ConvertError(f"{path}: hidden_activation {act!r} not supported (gelu_pytorch_tanh)")
        if not self.gemma and act not in ("silu", "swish"):
            raise ConvertError(f"{path}: hidden_act {act!r} not supported (only silu)")
        if self.gemma:
            self.tied = bool(cfg.get("tie_word_embeddings", True))
        if cfg.get("mlp_bias"):
            raise ConvertError(f"{path}: mlp_bias is not supported")
        # transformers >= 5 keeps rope_theta inside rope_parameters; older
        # configs have rope_theta at the top and rope_scaling beside it.
        self.rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        # gemma3 in transformers 5: one rope dict per layer type
        local = dict(self.rope.get("sliding_attention") or {})
        if "full_attention" in self.rope:
            self.rope = dict(self.rope["full_attention"])
        self.rope_theta = float(self.rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        self.rope_theta_swa = float(local.get("rope_theta", cfg.get("rope_local_base_freq", 10000.0)))
        self.rope_type = self.rope.get("rope_type", self.rope.get("type", "default"))
        if self.rope_type == "su":
            self.rope_type = "longrope"
        if self.rope_type not in ("default", "linear", "yarn", "llama3", "longrope"):
            raise ConvertError(f"{path}: rope type {self.rope_type!r} not supported")
        if self.rope_type == "longrope" and self.arch != "phi3":
            raise ConvertError(f"{path}: longrope is only supported for Phi-3")
        if self.gemma and local.get("rope_type", "default") != "default":
            raise ConvertError(f"{path}: sliding_attention rope type {local.get('rope_type')!r} "
                               "not supported")
        self.sliding_window = cfg.get("sliding_window") or 0
        if not isinstance(self.sliding_window, int) or self.sliding_window < 0:
            raise ConvertError(f"{path}: sliding_window {self.sliding_window!r} is not an integer")
        # Which layers slide is fixed per architecture in llama.cpp (gemma2:
        # every other, gemma3: five in six, phi3 / mistral: all): check it.
        types = cfg.get("layer_types")
        if types and self.sliding_window:
            period = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}.get(self.arch, 1)
            want = ["sliding_attention" if period == 1 or (i + 1) % period else "full_attention"
                    for i in range(self.n_layer)]
            if list(types) != want:
                raise ConvertError(f"{path}: layer_types {types} differ from the {self.arch} "
                                   "pattern llama.cpp assumes")
        self.n_rot = self.head_dim
        if self.arch == "phi3":
            prf = float(self.rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
            # llama.cpp's formula (int(rot_pct * n_embd) // n_head)
            self.n_rot = int(prf * self.n_embd) // self.n_head
            if self.n_rot % 2 or not 0 < self.n_rot <= self.head_dim:
                raise ConvertError(f"{path}: partial_rotary_factor {prf} gives {self.n_rot} "
                                   f"rotary dims of {self.head_dim}")
            if cfg.get("qkv_bias") or cfg.get("attention_bias"):
                raise ConvertError(f"{path}: phi3 attention biases are not supported")
        if self.arch == "qwen3moe":
            # transformers 5 saves num_local_experts (num_experts before)
            self.n_expert = need("num_local_experts" if "num_local_experts" in cfg else "num_experts")
            self.n_expert_used = need("num_experts_per_tok")
            self.n_ff_exp = need("moe_intermediate_size")
            if self.n_expert_used > self.n_expert:
                raise ConvertError(f"{path}: num_experts_per_tok {self.n_expert_used} > "
                                   f"num_experts {self.n_expert}")
            # llama.cpp's qwen3moe has every layer sparse
            if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
                raise ConvertError(f"{path}: decoder_sparse_step / mlp_only_layers: dense layers "
                                   "between the MoE ones are not supported")
            self.norm_topk_prob = bool(cfg.get("norm_topk_prob", True))
        if self.arch == "gpt-oss":
            # every layer sparse; experts as wide as intermediate_size; the
            # clamped SwiGLU's constants are fixed in the model code
            self.n_expert = need("num_local_experts")
            self.n_expert_used = need("num_experts_per_tok")
            self.n_ff_exp = self.n_ff
            if self.n_expert_used > self.n_expert:
                raise ConvertError(f"{path}: num_experts_per_tok {self.n_expert_used} > "
                                   f"num_local_experts {self.n_expert}")
            if float(cfg.get("swiglu_limit", 7.0)) != 7.0:
                raise ConvertError(f"{path}: swiglu_limit {cfg.get('swiglu_limit')} (only 7.0)")
            if self.rope_type == "yarn" and self.rope.get("truncate", False):
                log(f"{path}: yarn truncate true: the runtime follows gpt-oss's truncate false")
        if self.arch == "lfm2":
            # short-convolution blocks beside attention: layer_types (or the
            # older full_attn_idxs); the feed-forward width is the tensors'
            # (block_auto_adjust_ff_dim shrinks intermediate_size)
            types = cfg.get("layer_types")
            if not types:
                idxs = cfg.get("full_attn_idxs") or []
                types = ["full_attention" if i in idxs else "conv" for i in range(self.n_layer)]
            if len(types) != self.n_layer or any(x not in ("conv", "full_attention") for x in types):
                raise ConvertError(f"{path}: layer_types {types}: need {self.n_layer} of "
                                   "'conv' / 'full_attention'")
            self.lfm2_attn = [x == "full_attention" for x in types]
            self.l_cache = need("conv_L_cache")
            if cfg.get("conv_bias"):
                raise ConvertError(f"{path}: conv_bias is not supported")
            self.tied = bool(cfg.get("tie_word_embeddings", cfg.get("tie_embedding", True)))
            ff = self.n_ff
            if cfg.get("block_auto_adjust_ff_dim"):
                ff = int(2 * ff / 3)
                mult = cfg.get("block_ffn_dim_multiplier")
                if mult is not None:
                    ff = int(mult * ff)
                m = cfg.get("block_multiple_of", 256)
                ff = m * ((ff + m - 1) // m)
            self.n_ff = ff
        if self.arch in HYBRID:
            self.hybrid_hparams(path, need)
        if self.arch == "smollm3":
            # NoPE layers: llama.cpp fixes them at every 4th ((i + 1) % 4 == 0)
            interval = cfg.get("no_rope_layer_interval", 4)
            want = [int((i + 1) % 4 != 0) for i in range(self.n_layer)]
            have = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(self.n_layer)]
            if list(have) != want:
                raise ConvertError(f"{path}: no_rope_layers {have} differ from the every-4th-layer "
                                   "NoPE pattern llama.cpp assumes")
            if cfg.get("use_sliding_window"):
                raise ConvertError(f"{path}: use_sliding_window is not supported for SmolLM3")

    def hybrid_hparams(self, path, need):
        """Qwen3-Next / Qwen3.5: Gated DeltaNet layer sizes, which layers are
        linear (layer_types, else every full_attention_interval-th is full),
        partial rotary, experts with a shared expert (qwen3next, qwen35moe)."""
        cfg = self.cfg
        self.conv_kernel = need("linear_conv_kernel_dim")
        self.head_k = need("linear_key_head_dim")
        self.head_v = need("linear_value_head_dim")
        self.n_k_heads = need("linear_num_key_heads")
        self.n_v_heads = need("linear_num_value_heads")
        if self.n_v_heads % self.n_k_heads:
            raise ConvertError(f"{path}: linear_num_value_heads {self.n_v_heads} is not a multiple "
                               f"of linear_num_key_heads {self.n_k_heads}")
        interval = cfg.get("full_attention_interval", 4)
        types = cfg.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(self.n_layer)]
        if len(types) != self.n_layer or any(x not in ("linear_attention", "full_attention")
                                             for x in types):
            raise ConvertError(f"{path}: layer_types {types}: need {self.n_layer} of "
                               "'linear_attention' / 'full_attention'")
        self.recurrent = [x == "linear_attention" for x in types]
        # an interval the layer types follow, for readers without the per-layer array
        self.full_interval = next((k for k in range(1, self.n_layer + 1)
                                   if all(r == ((i + 1) % k != 0) for i, r in enumerate(self.recurrent))),
                                  interval)
        prf = float(self.rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25)))
        self.n_rot = int(self.head_dim * prf)
        if self.n_rot % 2 or not 0 < self.n_rot <= self.head_dim:
            raise ConvertError(f"{path}: partial_rotary_factor {prf} gives {self.n_rot} rotary "
                               f"dims of {self.head_dim}")
        if cfg.get("attention_bias"):
            raise ConvertError(f"{path}: attention_bias is not supported for {self.hf_arch}")
        self.sections = None
        if self.arch in ("qwen35", "qwen35moe"):  # text positions: all sections turn alike
            sec = list(self.rope.get("mrope_section") or [11, 11, 10])
            self.sections = (sec + [0, 0, 0, 0])[:4]
        if self.arch in ("qwen3next", "qwen35moe"):
            self.n_expert = need("num_local_experts" if "num_local_experts" in cfg else "num_experts")
            self.n_expert_used = need("num_experts_per_tok")
            self.n_ff_exp = need("moe_intermediate_size")
            self.n_ff_shexp = cfg.get("shared_expert_intermediate_size") or 0
            if self.n_expert_used > self.n_expert:
                raise ConvertError(f"{path}: num_experts_per_tok {self.n_expert_used} > "
                                   f"num_experts {self.n_expert}")
            if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
                raise ConvertError(f"{path}: decoder_sparse_step / mlp_only_layers: dense layers "
                                   "between the MoE ones are not supported")
            self.norm_topk_prob = bool(cfg.get("norm_topk_prob", True))

    def write(self, w, name, file_type):
        a = self.arch
        w.add("general.architecture", a)
        w.add("general.name", name)
        w.add(f"{a}.block_count", self.n_layer, gguf.GGUF_UINT32)
        if self.n_ctx:
            w.add(f"{a}.context_length", int(self.n_ctx), gguf.GGUF_UINT32)
        w.add(f"{a}.embedding_length", self.n_embd, gguf.GGUF_UINT32)
        w.add(f"{a}.feed_forward_length", self.n_ff, gguf.GGUF_UINT32)
        w.add(f"{a}.attention.head_count", self.n_head, gguf.GGUF_UINT32)
        if a == "lfm2":  # per layer: 0 marks a short-convolution layer (llama.cpp)
            w.add(f"{a}.attention.head_count_kv",
                  [self.n_head_kv if at else 0 for at in self.lfm2_attn], gguf.GGUF_ARRAY, gguf.GGUF_UINT32)
            w.add(f"{a}.shortconv.l_cache", self.l_cache, gguf.GGUF_UINT32)
        else:
            w.add(f"{a}.attention.head_count_kv", self.n_head_kv, gguf.GGUF_UINT32)
        factor = self.rope.get("factor")
        if self.rope_type == "linear" and factor is not None:
            w.add(f"{a}.rope.scaling.type", "linear")
            w.add(f"{a}.rope.scaling.factor", float(factor), gguf.GGUF_FLOAT32)
        elif self.rope_type == "yarn" and factor is not None:
            w.add(f"{a}.rope.scaling.type", "yarn")
            w.add(f"{a}.rope.scaling.factor", float(factor), gguf.GGUF_FLOAT32)
            w.add(f"{a}.rope.scaling.original_context_length",
                  int(self.rope["original_max_position_embeddings"]), gguf.GGUF_UINT32)
            for key in ("beta_fast", "beta_slow"):
                if self.rope.get(key) is not None:
                    w.add(f"{a}.rope.scaling.yarn_{key}", float(self.rope[key]), gguf.GGUF_FLOAT32)
        # llama3 scaling is stored as the rope_freqs tensor (see rope_freqs()).
        w.add(f"{a}.rope.freq_base", self.rope_theta, gguf.GGUF_FLOAT32)
        cfg = self.cfg
        if self.sliding_window or a == "phi3":
            # phi3: 0 tells llama.cpp there is no window (Phi-4-mini)
            w.add(f"{a}.attention.sliding_window", self.sliding_window, gguf.GGUF_UINT32)
        if self.gemma:
            if a == "gemma3":
                w.add(f"{a}.rope.freq_base_swa", self.rope_theta_swa, gguf.GGUF_FLOAT32)
            for key in ("attn_logit_softcapping", "final_logit_softcapping"):
                if cfg.get(key):
                    w.add(f"{a}.{key}", float(cfg[key]), gguf.GGUF_FLOAT32)
            qpas = float(cfg.get("query_pre_attn_scalar") or self.head_dim)
            w.add(f"{a}.attention.scale", qpas ** -0.5, gguf.GGUF_FLOAT32)
        if a == "phi3":
            w.add(f"{a}.rope.dimension_count", self.n_rot, gguf.GGUF_UINT32)
            if self.rope_type == "longrope":
                orig = self.rope.get("original_max_position_embeddings",
                                     cfg.get("original_max_position_embeddings"))
                if not isinstance(orig, int) or orig <= 0 or not self.n_ctx:
                    raise ConvertError("longrope needs original_max_position_embeddings and "
                                       "max_position_embeddings")
                scale = self.n_ctx / orig
                attn = self.rope.get("attention_factor")
                if attn is None:  # the LongRoPE paper's default, as HF and llama.cpp compute it
                    attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
                w.add(f"{a}.rope.scaling.original_context_length", orig, gguf.GGUF_UINT32)
                w.add(f"{a}.rope.scaling.attn_factor", float(attn), gguf.GGUF_FLOAT32)
        w.add(f"{a}.attention.layer_norm_rms_epsilon", self.norm_eps, gguf.GGUF_FLOAT32)
        if "head_dim" in self.cfg or self.gemma:
            w.add(f"{a}.attention.key_length", self.head_dim, gguf.GGUF_UINT32)
            w.add(f"{a}.attention.value_length", self.head_dim, gguf.GGUF_UINT32)
        w.add("general.file_type", file_type, gguf.GGUF_UINT32)
        if a in ("llama", "smollm3"):
            w.add(f"{a}.vocab_size", self.n_vocab, gguf.GGUF_UINT32)
            w.add(f"{a}.rope.dimension_count", self.head_dim, gguf.GGUF_UINT32)
        if a == "qwen3moe":
            w.add(f"{a}.expert_count", self.n_expert, gguf.GGUF_UINT32)
            w.add(f"{a}.expert_used_count", self.n_expert_used, gguf.GGUF_UINT32)
            w.add(f"{a}.expert_feed_forward_length", self.n_ff_exp, gguf.GGUF_UINT32)
            # llama.cpp's qwen3moe always renormalises; the key says so explicitly
            w.add(f"{a}.expert_weights_norm", self.norm_topk_prob)
        if a == "gpt-oss":  # softmax over the top-k logits == normalised top-k weights
            w.add(f"{a}.expert_count", self.n_expert, gguf.GGUF_UINT32)
            w.add(f"{a}.expert_used_count", self.n_expert_used, gguf.GGUF_UINT32)
            w.add(f"{a}.expert_feed_forward_length", self.n_ff_exp, gguf.GGUF_UINT32)
        if a in HYBRID:
            w.add(f"{a}.rope.dimension_count", self.n_rot, gguf.GGUF_UINT32)
            if self.sections:
                w.add(f"{a}.rope.dimension_sections", self.sections, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
            w.add(f"{a}.ssm.conv_kernel", self.conv_kernel, gguf.GGUF_UINT32)
            w.add(f"{a}.ssm.state_size", self.head_k, gguf.GGUF_UINT32)
            w.add(f"{a}.ssm.group_count", self.n_k_heads, gguf.GGUF_UINT32)
            w.add(f"{a}.ssm.time_step_rank", self.n_v_heads, gguf.GGUF_UINT32)
            w.add(f"{a}.ssm.inner_size", self.head_v * self.n_v_heads, gguf.GGUF_UINT32)
            w.add(f"{a}.full_attention_interval", self.full_interval, gguf.GGUF_UINT32)
            w.add(f"{a}.attention.recurrent_layers", self.recurrent, gguf.GGUF_ARRAY, gguf.GGUF_BOOL)
            if hasattr(self, "n_expert"):
                w.add(f"{a}.expert_count", self.n_expert, gguf.GGUF_UINT32)
                w.add(f"{a}.expert_used_count", self.n_expert_used, gguf.GGUF_UINT32)
                w.add(f"{a}.expert_feed_forward_length", self.n_ff_exp, gguf.GGUF_UINT32)
                if self.n_ff_shexp:
                    w.add(f"{a}.expert_shared_feed_forward_length", self.n_ff_shexp, gguf.GGUF_UINT32)
                w.add(f"{a}.expert_weights_norm", self.norm_topk_prob)
        w.add("general.quantization_version", 2, gguf.GGUF_UINT32)

    def rope_freqs(self):
        """Llama 3 frequency divisors, one per rotated pair: 1 for short wavelengths,
        factor for long ones, a smooth blend between (the HF llama3 rope formula)."""
        p = self.rope
        factor = float(p.get("factor", 8.0))
        low, high = float(p.get("low_freq_factor", 1.0)), float(p.get("high_freq_factor", 4.0))
        old_ctx = float(p.get("original_max_position_embeddings", 8192))
        d = self.head_dim
        out = []
        for i in range(0, d, 2):
            freq = 1.0 / self.rope_theta ** (i / d)
            wavelen = 2 * math.pi / freq
            if wavelen < old_ctx / high:
                out.append(1.0)
            elif wavelen > old_ctx / low:
                out.append(factor)
            else:
                smooth = (old_ctx / wavelen - low) / (high - low)
                out.append(1.0 / ((1 - smooth) / factor + smooth))
        return np.array(out, dtype=np.float32)


# ---- tensors ----

def tensor_plan(hp, names):
    """[(gguf name, hf name, permute heads or None)] in file order; checks that
    every tensor the architecture needs is present and nothing is left over."""
    plan = [("token_embd.weight", "model.embed_tokens.weight", None)]
    if hp.arch == "lfm2":
        return lfm2_plan(hp, names, plan)
    if hp.arch in HYBRID:
        return hybrid_plan(hp, names, plan)
    for i in range(hp.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        qk_perm = hp.arch in ("llama", "smollm3")
        if hp.arch == "phi3":
            plan += [
                (b + "attn_norm.weight", p + "input_layernorm.weight", None),
                (b + "attn_qkv.weight", p + "self_attn.qkv_proj.weight", None),
                (b + "attn_output.weight", p + "self_attn.o_proj.weight", None),
                (b + "ffn_norm.weight", p + "post_attention_layernorm.weight", None),
                (b + "ffn_up.weight", p + "mlp.gate_up_proj.weight", None),
                (b + "ffn_down.weight", p + "mlp.down_proj.weight", None),
            ]
            continue
        if hp.gemma:
            plan += [
                (b + "attn_norm.weight", p + "input_layernorm.weight", None),
                (b + "attn_q.weight", p + "self_attn.q_proj.weight", None),
                (b + "attn_k.weight", p + "self_attn.k_proj.weight", None),
                (b + "attn_v.weight", p + "self_attn.v_proj.weight", None),
                (b + "attn_output.weight", p + "self_attn.o_proj.weight", None),
            ]
            if hp.arch == "gemma3":
                plan += [(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", None),
                         (b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", None)]
            plan += [
                (b + "post_attention_norm.weight", p + "post_attention_layernorm.weight", None),
                (b + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight", None),
                (b + "ffn_gate.weight", p + "mlp.gate_proj.weight", None),
                (b + "ffn_up.weight", p + "mlp.up_proj.weight", None),
                (b + "ffn_down.weight", p + "mlp.down_proj.weight", None),
                (b + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight", None),
            ]
            continue
        plan += [
            (b + "attn_norm.weight", p + "input_layernorm.weight", None),
            (b + "attn_q.weight", p + "self_attn.q_proj.weight", hp.n_head if qk_perm else None),
            (b + "attn_k.weight", p + "self_attn.k_proj.weight", hp.n_head_kv if qk_perm else None),
            (b + "attn_v.weight", p + "self_attn.v_proj.weight", None),
            (b + "attn_output.weight", p + "self_attn.o_proj.weight", None),
        ]
        # Biases: qwen2 always has q/k/v biases; llama has them with attention_bias.
        for proj, perm in (("q", hp.n_head), ("k", hp.n_head_kv), ("v", None)):
            hf = p + f"self_attn.{proj}_proj.bias"
            if hf in names or hp.arch == "qwen2":
                plan.append((b + f"attn_{proj}.bias", hf, perm if qk_perm and proj != "v" else None))
        if p + "self_attn.o_proj.bias" in names:
            plan.append((b + "attn_output.bias", p + "self_attn.o_proj.bias", None))
        if hp.arch in ("qwen3", "qwen3moe"):
            plan += [(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", None),
                     (b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", None)]
        if hp.arch == "qwen3moe":
            plan += [(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", None),
                     (b + "ffn_gate_inp.weight", p + "mlp.gate.weight", None)]
            plan += expert_plan(hp, names, b, p + "mlp.experts.")
            continue
        if hp.arch == "gpt-oss":
            plan += gptoss_plan(names, b, p)
            continue
        plan += [
            (b + "ffn_norm.weight", p + "post_attention_layernorm.weight", None),
            (b + "ffn_gate.weight", p + "mlp.gate_proj.weight", None),
            (b + "ffn_up.weight", p + "mlp.up_proj.weight", None),
            (b + "ffn_down.weight", p + "mlp.down_proj.weight", None),
        ]
    plan.append(("output_norm.weight", "model.norm.weight", None))
    if "lm_head.weight" in names and not hp.tied:
        plan.append(("output.weight", "lm_head.weight", None))
    elif not hp.tied:
        raise ConvertError("lm_head.weight missing and tie_word_embeddings is false")
    missing = [hf for _, src, _ in plan for hf in source_names(src) if hf not in names]
    if missing:
        raise ConvertError(f"checkpoint lacks {len(missing)} tensor(s) {hp.hf_arch} needs: "
                           + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    used = {hf for _, src, _ in plan for hf in source_names(src)} | {"lm_head.weight"}
    extra = [n for n in names if n not in used and not n.endswith("rotary_emb.inv_freq")]
    if extra:
        raise ConvertError(f"checkpoint has {len(extra)} tensor(s) this converter does not know: "
                           + ", ".join(sorted(extra)[:5]))
    return plan


def lfm2_plan(hp, names, plan):
    """LFM2 in llama.cpp's names: operator_norm -> attn_norm, the conv block's
    in_proj / conv (squeezed to [n_embd, l_cache]) / out_proj under
    shortconv., attention with q/k norms, w1/w3/w2 -> ffn_gate/up/down, and
    the final embedding_norm -> token_embd_norm (applied after the layers)."""
    for i in range(hp.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        plan.append((b + "attn_norm.weight", p + "operator_norm.weight", None))
        if hp.lfm2_attn[i]:
            plan += [(b + "attn_q.weight", p + "self_attn.q_proj.weight", None),
                     (b + "attn_k.weight", p + "self_attn.k_proj.weight", None),
                     (b + "attn_v.weight", p + "self_attn.v_proj.weight", None),
                     (b + "attn_output.weight", p + "self_attn.out_proj.weight", None),
                     (b + "attn_q_norm.weight", p + "self_attn.q_layernorm.weight", None),
                     (b + "attn_k_norm.weight", p + "self_attn.k_layernorm.weight", None)]
        else:
            plan += [(b + "shortconv.in_proj.weight", p + "conv.in_proj.weight", None),
                     (b + "shortconv.conv.weight", ("squeeze", p + "conv.conv.weight"), None),
                     (b + "shortconv.out_proj.weight", p + "conv.out_proj.weight", None)]
        plan += [(b + "ffn_norm.weight", p + "ffn_norm.weight", None),
                 (b + "ffn_gate.weight", p + "feed_forward.w1.weight", None),
                 (b + "ffn_up.weight", p + "feed_forward.w3.weight", None),
                 (b + "ffn_down.weight", p + "feed_forward.w2.weight", None)]
    plan.append(("token_embd_norm.weight", "model.embedding_norm.weight", None))
    if not hp.tied:
        plan.append(("output.weight", "lm_head.weight", None))
    missing = [hf for _, src, _ in plan for hf in source_names(src) if hf not in names]
    if missing:
        raise ConvertError(f"checkpoint lacks {len(missing)} tensor(s) {hp.hf_arch} needs: "
                           + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    used = {hf for _, src, _ in plan for hf in source_names(src)} | {"lm_head.weight"}
    extra = [n for n in names if n not in used]
    if extra:
        raise ConvertError(f"checkpoint has {len(extra)} tensor(s) this converter does not know: "
                           + ", ".join(sorted(extra)[:5]))
    return plan


def hybrid_plan(hp, names, plan):
    """Qwen3-Next / Qwen3.5 in llama.cpp's names and layouts. Gated DeltaNet
    layers: attn_qkv (q of every key head, then k, then v) and attn_gate (z)
    - Qwen3-Next's fused in_proj_qkvz is grouped per key head and split here -
    ssm_ba (Qwen3-Next: per key head its b then its a rows) or ssm_beta /
    ssm_alpha (Qwen3.5), ssm_conv1d [channels, kernel] (F32), ssm_dt.bias,
    ssm_a = -exp(A_log), ssm_norm, ssm_out. Qwen3.5's value heads are put in
    tiled order (value head j uses key head j % key heads), as llama.cpp's
    converter does; Qwen3-Next's stay grouped (j / (value / key heads)).
    Attention layers: attn_q holds per head its query then its gate rows.
    Norm gains other than ssm_norm are stored plus one (HF: x * (1 + w))."""
    nk, nv, hk, hv = hp.n_k_heads, hp.n_v_heads, hp.head_k, hp.head_v
    r, n = nv // nk, hp.n_embd
    kd, vd = nk * hk, nv * hv
    conv = 2 * kd + vd
    tiled = hp.arch != "qwen3next"

    def tile(a, axis, head):  # value heads grouped by key head -> tiled
        if not tiled or r == 1:
            return a
        a = np.moveaxis(a, axis, 0)
        rest = a.shape[1:]
        a = a.reshape(nk, r, head, *rest).swapaxes(0, 1).reshape(nv * head, *rest)
        return np.ascontiguousarray(np.moveaxis(a, 0, axis))

    def qkvz(part):
        def f(w):
            g = w.reshape(nk, 2 * hk + 2 * r * hv, n)
            q, k = g[:, :hk], g[:, hk:2 * hk]
            v, z = g[:, 2 * hk:2 * hk + r * hv], g[:, 2 * hk + r * hv:]
            if part == "z":
                return np.ascontiguousarray(z.reshape(vd, n))
            return np.ascontiguousarray(np.concatenate(
                [q.reshape(kd, n), k.reshape(kd, n), v.reshape(vd, n)]))
        return f

    def qkv_tiled(w):
        return np.concatenate([w[:2 * kd], tile(w[2 * kd:], 0, hv)])

    def conv_w(w):  # [channels, 1, kernel] -> [channels, kernel], value channels tiled
        w = w.reshape(w.shape[0], w.shape[-1])
        return np.concatenate([w[:2 * kd], tile(w[2 * kd:], 0, hv)])

    moe = hasattr(hp, "n_expert")
    for i in range(hp.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        plan.append((b + "attn_norm.weight", p + "input_layernorm.weight", None))
        if hp.recurrent[i]:
            la = p + "linear_attn."
            if hp.arch == "qwen3next":
                qkvz_shape = (conv + vd, n)
                plan += [(b + "attn_qkv.weight", ("fn", la + "in_proj_qkvz.weight", (conv, n), qkvz("qkv"),
                                                  qkvz_shape), None),
                         (b + "attn_gate.weight", ("fn", la + "in_proj_qkvz.weight", (vd, n), qkvz("z"),
                                                   qkvz_shape), None),
                         (b + "ssm_ba.weight", la + "in_proj_ba.weight", None)]
            else:
                plan += [(b + "attn_qkv.weight", ("fn", la + "in_proj_qkv.weight", (conv, n), qkv_tiled,
                                                  (conv, n)), None),
                         (b + "attn_gate.weight", ("fn", la + "in_proj_z.weight", (vd, n),
                                                   lambda w: tile(w, 0, hv), (vd, n)), None),
                         (b + "ssm_beta.weight", ("fn", la + "in_proj_b.weight", (nv, n),
                                                  lambda w: tile(w, 0, 1), (nv, n)), None),
                         (b + "ssm_alpha.weight", ("fn", la + "in_proj_a.weight", (nv, n),
                                                   lambda w: tile(w, 0, 1), (nv, n)), None)]
            plan += [(b + "ssm_conv1d.weight", ("fn", la + "conv1d.weight", (conv, hp.conv_kernel), conv_w,
                                                (conv, 1, hp.conv_kernel)), None),
                     (b + "ssm_dt.bias", ("fn", la + "dt_bias", (nv,), lambda a: tile(a, 0, 1), (nv,)), None),
                     (b + "ssm_a", ("fn", la + "A_log", (nv,),
                                    lambda a: -np.exp(tile(a.astype(np.float32), 0, 1)), (nv,)), None),
                     (b + "ssm_norm.weight", la + "norm.weight", None),
                     (b + "ssm_out.weight", ("fn", la + "out_proj.weight", (n, vd),
                                             lambda w: tile(w, 1, hv), (n, vd)), None)]
        else:
            sa = p + "self_attn."
            plan += [(b + "attn_q.weight", sa + "q_proj.weight", None),
                     (b + "attn_k.weight", sa + "k_proj.weight", None),
                     (b + "attn_v.weight", sa + "v_proj.weight", None),
                     (b + "attn_output.weight", sa + "o_proj.weight", None),
                     (b + "attn_q_norm.weight", sa + "q_norm.weight", None),
                     (b + "attn_k_norm.weight", sa + "k_norm.weight", None)]
        plan.append((b + "post_attention_norm.weight", p + "post_attention_layernorm.weight", None))
        if moe:
            plan.append((b + "ffn_gate_inp.weight", p + "mlp.gate.weight", None))
            plan += expert_plan(hp, names, b, p + "mlp.experts.")
            if hp.n_ff_shexp:
                se = p + "mlp.shared_expert."
                plan += [(b + "ffn_gate_shexp.weight", se + "gate_proj.weight", None),
                         (b + "ffn_up_shexp.weight", se + "up_proj.weight", None),
                         (b + "ffn_down_shexp.weight", se + "down_proj.weight", None),
                         (b + "ffn_gate_inp_shexp.weight", ("fn", p + "mlp.shared_expert_gate.weight",
                                                           (n,), lambda w: w.reshape(-1), (1, n)), None)]
        else:
            plan += [(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", None),
                     (b + "ffn_up.weight", p + "mlp.up_proj.weight", None),
                     (b + "ffn_down.weight", p + "mlp.down_proj.weight", None)]
    plan.append(("output_norm.weight", "model.norm.weight", None))
    if not hp.tied:
        plan.append(("output.weight", "lm_head.weight", None))
    missing = [hf for _, src, _ in plan for hf in source_names(src) if hf not in names]
    if missing:
        raise ConvertError(f"checkpoint lacks {len(missing)} tensor(s) {hp.hf_arch} needs: "
                           + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    used = {hf for _, src, _ in plan for hf in source_names(src)} | {"lm_head.weight"}
    extra = [x for x in names if x not in used and not x.startswith("mtp.")]
    if extra:
        raise ConvertError(f"checkpoint has {len(extra)} tensor(s) this converter does not know: "
                           + ", ".join(sorted(extra)[:5]))
    return plan


def expert_plan(hp, names, b, e):
    """The three 3-D expert tensors of one MoE layer: transformers 5 keeps
    them fused (experts.gate_up_proj [E, 2 ff, n_embd], gate rows first, and
    experts.down_proj [E, n_embd, ff]); older checkpoints (and the hub's
    files) have one 2-D matrix per expert, stacked here."""
    if e + "gate_up_proj" in names:
        ff = hp.n_ff_exp
        return [(b + "ffn_gate_exps.weight", ("rows", e + "gate_up_proj", 0, ff), None),
                (b + "ffn_up_exps.weight", ("rows", e + "gate_up_proj", ff, 2 * ff), None),
                (b + "ffn_down_exps.weight", e + "down_proj", None)]
    return [(b + f"ffn_{w}_exps.weight",
             ("stack", [f"{e}{i}.{w}_proj.weight" for i in range(hp.n_expert)]), None)
            for w in ("gate", "up", "down")]


def gptoss_plan(names, b, p):
    """Sinks, the FFN norm (llama.cpp: post_attention_norm), router and the
    dense experts of one gpt-oss layer: gate_up_proj [E, n_embd, 2 ff] has
    x @ W's layout with gate and up columns interleaved."""
    e = p + "mlp.experts."
    mx = e + "gate_up_proj_blocks" in names
    gu = [("mxfp4", e + "gate_up_proj", k) for k in (0, 1)] if mx else \
        [("interleaved", e + "gate_up_proj", k) for k in (0, 1)]
    down = ("mxfp4", e + "down_proj", None) if mx else ("transpose", e + "down_proj")
    return [(b + "attn_sinks.weight", p + "self_attn.sinks", None),
            (b + "post_attention_norm.weight", p + "post_attention_layernorm.weight", None),
            (b + "ffn_gate_inp.weight", p + "mlp.router.weight", None),
            (b + "ffn_gate_inp.bias", p + "mlp.router.bias", None),
            (b + "ffn_gate_exps.weight", gu[0], None),
            (b + "ffn_gate_exps.bias", ("interleaved", e + "gate_up_proj_bias", 0), None),
            (b + "ffn_up_exps.weight", gu[1], None),
            (b + "ffn_up_exps.bias", ("interleaved", e + "gate_up_proj_bias", 1), None),
            (b + "ffn_down_exps.weight", down, None),
            (b + "ffn_down_exps.bias", e + "down_proj_bias", None)]


def source_names(src):
    """HF tensor names a plan entry reads: a name, ("stack", [names]),
    ("rows", name, first, end), ("squeeze", name) (a [n, 1, k] conv weight
    as [n, k]), ("transpose", name) (the last two axes of a 3-D tensor
    swapped) or ("interleaved", name, parity) (gpt-oss: every other column,
    from parity, of [E, n, 2 ff] as [E, ff, n], or of [E, 2 ff] as [E, ff])."""
    if isinstance(src, str):
        return [src]
    if src[0] == "mxfp4":
        return [src[1] + "_blocks", src[1] + "_scales"]
    return src[1] if src[0] == "stack" else [src[1]]
    # ("fn", name, shape, f, source shape): f(the tensor) of the given shape (hybrid layouts)


def source_shape(ckpt, src):
    if isinstance(src, str):
        return ckpt[src].tensors[src][1]
    if src[0] == "fn":  # ("fn", name, shape out, f, shape in)
        have = tuple(ckpt[src[1]].tensors[src[1]][1])
        if have != tuple(src[4]):
            raise ConvertError(f"{ckpt[src[1]].path}: tensor '{src[1]}': shape {list(have)}, "
                               f"expected {list(src[4])} from config.json")
        return tuple(src[2])
    if src[0] == "mxfp4":  # blocks [E, rows, cols / 32, 16]: every other row for gate / up
        shape = tuple(ckpt[src[1] + "_blocks"].tensors[src[1] + "_blocks"][1])
        sshape = tuple(ckpt[src[1] + "_scales"].tensors[src[1] + "_scales"][1])
        if len(shape) != 4 or shape[3] != 16 or sshape != shape[:3] or (src[2] is not None and shape[1] % 2):
            raise ConvertError(f"tensor '{src[1]}_blocks': shape {list(shape)} with scales "
                               f"{list(sshape)}, expected [E, rows, cols / 32, 16] and [E, rows, cols / 32]")
        return (shape[0], shape[1] // (1 if src[2] is None else 2), shape[2] * 32)
    if src[0] in ("transpose", "interleaved"):
        shape = tuple(ckpt[src[1]].tensors[src[1]][1])
        if len(shape) == 3 and (src[0] == "transpose" or shape[2] % 2 == 0):
            return (shape[0], shape[2] // (2 if src[0] == "interleaved" else 1), shape[1])
        if src[0] == "interleaved" and len(shape) == 2 and shape[1] % 2 == 0:
            return (shape[0], shape[1] // 2)
        raise ConvertError(f"tensor '{src[1]}': shape {list(shape)} cannot be "
                           f"{'split' if src[0] == 'interleaved' else 'transposed'}")
    if src[0] == "squeeze":
        shape = ckpt[src[1]].tensors[src[1]][1]
        if len(shape) != 3 or shape[1] != 1:
            raise ConvertError(f"tensor '{src[1]}': shape {list(shape)}, expected [n, 1, k]")
        return (shape[0], shape[2])
    if src[0] == "stack":
        shapes = {ckpt[n].tensors[n][1] for n in src[1]}
        if len(shapes) != 1:
            raise ConvertError(f"experts {src[1][0]} ...: shapes differ: {sorted(shapes)}")
        return (len(src[1]),) + shapes.pop()
    shape = ckpt[src[1]].tensors[src[1]][1]
    if len(shape) != 3 or src[3] > shape[1]:
        raise ConvertError(f"tensor '{src[1]}': shape {list(shape)}, expected [experts, "
                           f">= {src[3]}, n]")
    return (shape[0], src[3] - src[2], shape[2])


def source_load(ckpt, src):
    if isinstance(src, str):
        a = ckpt[src].load(src)
        if a.dtype == np.uint8:
            raise ConvertError(f"tensor '{src}': U8 data where weights are expected")
        return a
    if src[0] == "transpose":
        return np.ascontiguousarray(ckpt[src[1]].load(src[1]).transpose(0, 2, 1))
    if src[0] == "fn":
        return np.ascontiguousarray(src[3](ckpt[src[1]].load(src[1]))).reshape(src[2])
    if src[0] == "mxfp4":
        return mxfp4_ggml(ckpt[src[1] + "_blocks"].load(src[1] + "_blocks"),
                          ckpt[src[1] + "_scales"].load(src[1] + "_scales"), src[2])
    if src[0] == "interleaved":
        a = ckpt[src[1]].load(src[1])
        if a.ndim == 3:
            return np.ascontiguousarray(a[:, :, src[2]::2].transpose(0, 2, 1))
        return np.ascontiguousarray(a[:, src[2]::2])
    if src[0] == "squeeze":
        a = ckpt[src[1]].load(src[1])
        return np.ascontiguousarray(a.reshape(a.shape[0], a.shape[2]))
    if src[0] == "stack":
        return np.stack([ckpt[n].load(n) for n in src[1]])
    return np.ascontiguousarray(ckpt[src[1]].load(src[1])[:, src[2]:src[3], :])


def mxfp4_ggml(blocks, scales, parity):
    """OpenAI's MXFP4 ([E, rows, G, 16] bytes, value 2j in byte j's low
    nibble and 2j + 1 in its high one; [E, rows, G] E8M0 scales) as ggml's
    block_mxfp4 rows: the scale byte, then 16 bytes holding value j low and
    j + 16 high. parity 0 / 1 keeps the even / odd rows (gate / up)."""
    if blocks.dtype != np.uint8 or scales.dtype != np.uint8:
        raise ConvertError("MXFP4 blocks and scales must be U8")
    if parity is not None:
        blocks, scales = blocks[:, parity::2], scales[:, parity::2]
    codes = np.empty(blocks.shape[:-1] + (32,), np.uint8)
    codes[..., 0::2] = blocks & 0x0F
    codes[..., 1::2] = blocks >> 4
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return np.ascontiguousarray(np.concatenate([scales[..., None], qs], axis=-1))


def expected_shape(hp, gname):
    """numpy-style shape of a GGUF tensor from the hyper-parameters."""
    base = gname.split(".", 2)[-1] if gname.startswith("blk.") else gname
    q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    return {
        "token_embd.weight": (hp.n_vocab, hp.n_embd), "output.weight": (hp.n_vocab, hp.n_embd),
        "output_norm.weight": (hp.n_embd,), "attn_norm.weight": (hp.n_embd,),
        "ffn_norm.weight": (hp.n_embd,),
        "attn_q.weight": (q, hp.n_embd), "attn_k.weight": (kv, hp.n_embd),
        "attn_v.weight": (kv, hp.n_embd), "attn_output.weight": (hp.n_embd, q),
        "attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,), "attn_output.bias": (hp.n_embd,),
        "attn_q_norm.weight": (hp.head_dim,), "attn_k_norm.weight": (hp.head_dim,),
        "post_attention_norm.weight": (hp.n_embd,), "post_ffw_norm.weight": (hp.n_embd,),
        "attn_qkv.weight": (q + 2 * kv, hp.n_embd),
        "ffn_gate.weight": (hp.n_ff, hp.n_embd),
        "ffn_up.weight": ((2 if hp.arch == "phi3" else 1) * hp.n_ff, hp.n_embd),
        "ffn_down.weight": (hp.n_embd, hp.n_ff),
        "ffn_gate_inp.weight": (getattr(hp, "n_expert", 0), hp.n_embd),
        "token_embd_norm.weight": (hp.n_embd,),
        "shortconv.in_proj.weight": (3 * hp.n_embd, hp.n_embd),
        "shortconv.conv.weight": (hp.n_embd, getattr(hp, "l_cache", 0)),
        "shortconv.out_proj.weight": (hp.n_embd, hp.n_embd),
        "ffn_gate_exps.weight": (getattr(hp, "n_expert", 0), getattr(hp, "n_ff_exp", 0), hp.n_embd),
        "ffn_up_exps.weight": (getattr(hp, "n_expert", 0), getattr(hp, "n_ff_exp", 0), hp.n_embd),
        "ffn_down_exps.weight": (getattr(hp, "n_expert", 0), hp.n_embd, getattr(hp, "n_ff_exp", 0)),
        "attn_sinks.weight": (hp.n_head,),
        "ffn_gate_inp.bias": (getattr(hp, "n_expert", 0),),
        "ffn_gate_exps.bias": (getattr(hp, "n_expert", 0), getattr(hp, "n_ff_exp", 0)),
        "ffn_up_exps.bias": (getattr(hp, "n_expert", 0), getattr(hp, "n_ff_exp", 0)),
        "ffn_down_exps.bias": (getattr(hp, "n_expert", 0), hp.n_embd),
    }.get(base) or hybrid_shape(hp, base)


def hybrid_shape(hp, base):
    """Shapes of the Qwen3-Next / Qwen3.5 tensors (attn_q: query and gate rows);
    None for the tensors they share with the other families."""
    if hp.arch not in HYBRID:
        raise ConvertError(f"no shape known for tensor '{base}'")
    kd, vd, nv = hp.n_k_heads * hp.head_k, hp.n_v_heads * hp.head_v, hp.n_v_heads
    sh = getattr(hp, "n_ff_shexp", 0)
    return {
        "attn_q.weight": (2 * hp.n_head * hp.head_dim, hp.n_embd),
        "attn_qkv.weight": (2 * kd + vd, hp.n_embd), "attn_gate.weight": (vd, hp.n_embd),
        "ssm_ba.weight": (2 * nv, hp.n_embd), "ssm_beta.weight": (nv, hp.n_embd),
        "ssm_alpha.weight": (nv, hp.n_embd), "ssm_conv1d.weight": (2 * kd + vd, hp.conv_kernel),
        "ssm_dt.bias": (nv,), "ssm_a": (nv,), "ssm_norm.weight": (hp.head_v,),
        "ssm_out.weight": (hp.n_embd, vd),
        "ffn_gate_shexp.weight": (sh, hp.n_embd), "ffn_up_shexp.weight": (sh, hp.n_embd),
        "ffn_down_shexp.weight": (hp.n_embd, sh), "ffn_gate_inp_shexp.weight": (hp.n_embd,),
    }.get(base)


def permute_rope(w, n_head):
    """HF stores each head's rotated pairs as (i, i + d/2); GGUF llama wants
    (2i, 2i + 1): interleave the two halves of every head's rows."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def quantize_q8_0(a):
    """ggml's Q8_0: blocks of 32, d = max|x| / 127 (stored f16), q = roundf(x / d)."""
    blocks = a.reshape(-1, 32).astype(np.float32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    x = blocks * inv
    ax = np.abs(x)
    whole = np.floor(ax)
    q = np.sign(x) * (whole + (ax - whole >= 0.5))  # roundf: halves away from zero
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8)
    out[:, 2:] = q.astype(np.int8).view(np.uint8)
    return out.tobytes()


def add_tensors(w, hp, ckpt, ggml_type):
    names = set(ckpt)
    plan = tensor_plan(hp, names)
    if hp.rope_type == "llama3":
        freqs = hp.rope_freqs()
        w.add_tensor("rope_freqs.weight", freqs, gguf.GGML_F32)
    if hp.rope_type == "longrope":
        for kind in ("long", "short"):
            f = hp.rope.get(f"{kind}_factor")
            if not isinstance(f, list) or len(f) != hp.n_rot // 2:
                raise ConvertError(f"rope {kind}_factor: need a list of {hp.n_rot // 2} numbers "
                                   f"(rotary dims / 2)")
            w.add_tensor(f"rope_factors_{kind}.weight", np.array(f, dtype=np.float32), gguf.GGML_F32)
    counts = {}
    for gname, hfname, perm in plan:
        shape = tuple(source_shape(ckpt, hfname))
        want = (hp.arch in HYBRID and hybrid_shape(hp, gname.split(".", 2)[-1])) or \
            expected_shape(hp, gname)
        if shape != want:
            first = source_names(hfname)[0]
            raise ConvertError(f"{ckpt[first].path}: tensor '{first}': shape {list(shape)}, "
                               f"expected {list(want)} from config.json")
        t = ggml_type
        if not isinstance(hfname, str) and hfname[0] == "mxfp4":
            t = GGML_MXFP4  # the hub's gpt-oss experts stay MXFP4, as llama.cpp's converter keeps them
        # the MoE router stays F32, as llama.cpp's converter and quantizer keep it
        if t == GGML_MXFP4:
            pass
        elif (len(shape) == 1 or gname.endswith("_norm.weight") or ".ffn_gate_inp." in gname
                or gname.endswith("shortconv.conv.weight") or gname.endswith(".bias")
                or gname.endswith("ssm_conv1d.weight")):
            t = gguf.GGML_F32
        elif t == gguf.GGML_Q8_0 and shape[-1] % 32:
            log(f"{gname}: row length {shape[-1]} is not a multiple of 32, stored as F16")
            t = gguf.GGML_F16
        counts[t] = counts.get(t, 0) + 1

        def data(hfname=hfname, perm=perm, t=t, gname=gname):
            a = source_load(ckpt, hfname)
            if t == GGML_MXFP4:
                return a.tobytes()
            if perm:
                a = permute_rope(a, perm)
            if (hp.gemma or hp.arch in HYBRID) and gname.endswith("norm.weight") \
                    and not gname.endswith("ssm_norm.weight"):
                a = a + np.float32(1)  # HF's x * (1 + w), as llama.cpp stores it
            if t == gguf.GGML_Q8_0:
                return quantize_q8_0(a)
            if t == gguf.GGML_BF16:  # round to nearest even, as llama.cpp's converter
                u = np.ascontiguousarray(a, "<f4").view("<u4")
                return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
            return a.astype("<f4" if t == gguf.GGML_F32 else "<f2").tobytes()

        w.add_tensor_raw(gname, t, shape, data)
    log("tensor types: " + ", ".join(f"{gguf.GGML_TYPES[t][0]} x{n}" for t, n in sorted(counts.items())))


# ---- tokenizer ----

def token_content(entry):
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def looks_special(text):
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>")


def template_ends(post):
    """(first, last) special token of a TemplateProcessing 'single' template."""
    procs = post.get("processors", [post]) if post else []
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            single = p.get("single") or []
            first = single[0].get("SpecialToken", {}).get("id") if single else None
            last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            return first, last, True
    return None, None, False


def pre_tokenizer_name(tj, path):
    pre = tj.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    for p in parts:
        if p.get("type") == "Split":
            regex = (p.get("pattern") or {}).get("Regex")
            if regex in PRE_TOKENIZER_REGEXES:
                return PRE_TOKENIZER_REGEXES[regex]
            log(f"{path}: unknown pre-tokenizer regex {regex!r}: using 'default'")
            return "default"
    kinds = [p.get("type") for p in parts]
    if "ByteLevel" in kinds and any(p.get("use_regex", True) for p in parts if p.get("type") == "ByteLevel"):
        if any(p.get("type") == "Digits" and p.get("individual_digits") for p in parts):
            return "smollm"
        return "gpt-2"
    log(f"{path}: pre-tokenizer {kinds} not recognised: using 'default'")
    return "default"


def add_tokenizer(w, hp, model_dir):
    path = os.path.join(model_dir, "tokenizer.json")
    tj = read_json(path, "tokenizer.json (tokenizer.model-only checkpoints are not supported)")
    tc_path = os.path.join(model_dir, "tokenizer_config.json")
    tc = read_json(tc_path, "tokenizer_config.json") if os.path.exists(tc_path) else {}
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ConvertError(f"{path}: tokenizer model {model.get('type')!r} not supported (only BPE)")
    vocab = dict(model["vocab"])
    added = {}
    for t in tj.get("added_tokens") or []:
        vocab[t["content"]] = t["id"]
        added[t["id"]] = t
    n_max = max(vocab.values()) + 1
    if n_max > hp.n_vocab:
        raise ConvertError(f"{path}: token id {n_max - 1} is outside the model's vocab_size {hp.n_vocab}")
    tokens = [None] * hp.n_vocab
    for text, i in vocab.items():
        tokens[i] = text
    types = []
    merges = model.get("merges") or []
    merges = [m if isinstance(m, str) else " ".join(
        "".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in m) for m in merges]
    spm = bool(model.get("byte_fallback"))
    unk = model.get("unk_token")
    for i, text in enumerate(tokens):
        if text is None:
            tokens[i] = f"[PAD{i}]"
            types.append(TOK_UNUSED)
        elif i in added:
            types.append(TOK_CONTROL if added[i].get("special") or looks_special(text) else TOK_USER_DEFINED)
            if spm and text == unk:
                types[-1] = TOK_UNKNOWN
        elif spm and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            types.append(TOK_BYTE)
        elif spm and text == unk:
            types.append(TOK_UNKNOWN)
        else:
            types.append(TOK_NORMAL)
    if spm:
        # SentencePiece BPE merges the pair whose result scores highest; the HF
        # merge list is that order, so a token's score is minus its merge rank.
        rank = {}
        for r, m in enumerate(merges):
            a, _, b = m.partition(" ")
            rank.setdefault(a + b, r)
        scores = [0.0 if t != TOK_NORMAL else -float(rank.get(text, len(merges) + i))
                  for i, (text, t) in enumerate(zip(tokens, types))]
        norm = tj.get("normalizer") or {}
        norms = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
        pre = tj.get("pre_tokenizer") or {}
        space_prefix = any(n.get("type") == "Prepend" for n in norms) or (
            pre.get("type") == "Metaspace" and pre.get("prepend_scheme", "always") != "never")
        w.add("tokenizer.ggml.model", "llama")
        w.add("tokenizer.ggml.pre", "default")
        w.add("tokenizer.ggml.tokens", tokens)
        w.add("tokenizer.ggml.scores", scores, gguf.GGUF_ARRAY, gguf.GGUF_FLOAT32)
        w.add("tokenizer.ggml.token_type", types, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
        w.add("tokenizer.ggml.add_space_prefix", space_prefix)
        kind = "SentencePiece-style BPE (llama)"
    else:
        pre = pre_tokenizer_name(tj, path)
        w.add("tokenizer.ggml.model", "gpt2")
        w.add("tokenizer.ggml.pre", pre)
        w.add("tokenizer.ggml.tokens", tokens)
        w.add("tokenizer.ggml.token_type", types, gguf.GGUF_ARRAY, gguf.GGUF_INT32)
        w.add("tokenizer.ggml.merges", merges, gguf.GGUF_ARRAY, gguf.GGUF_STRING)
        kind = f"byte-level BPE (gpt2, pre '{pre}')"

    # Special tokens: tokenizer_config.json first, then config.json's *_token_id.
    by_text = {t["content"]: t["id"] for t in tj.get("added_tokens") or []}
    ids = {}
    for typ in ("bos", "eos", "unk", "sep", "pad"):
        text = token_content(tc.get(f"{typ}_token"))
        if text is not None and text in by_text:
            ids[typ] = by_text[text]
    for typ in ("bos", "eos", "unk", "sep", "pad"):
        v = hp.cfg.get(f"{typ}_token_id")
        if typ not in ids and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < hp.n_vocab:
            ids[typ] = v
    key = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
           "sep": "seperator_token_id", "pad": "padding_token_id"}
    for typ, i in ids.items():
        w.add(f"tokenizer.ggml.{key[typ]}", i, gguf.GGUF_UINT32)
    first, last, has_template = template_ends(tj.get("post_processor"))
    for typ, end in (("bos", first), ("eos", last)):
        flag = tc.get(f"add_{typ}_token")
        if not isinstance(flag, bool) and has_template:
            flag = end is not None and by_text.get(end) == ids.get(typ)
        if isinstance(flag, bool):
            w.add(f"tokenizer.ggml.add_{typ}_token", flag)

    template = tc.get("chat_template")
    if template is None:
        jinja = os.path.join(model_dir, "chat_template.jinja")
        cjson = os.path.join(model_dir, "chat_template.json")
        if os.path.exists(jinja):
            with open(jinja, encoding="utf-8") as f:
                template = f.read()
        elif os.path.exists(cjson):
            template = read_json(cjson, "chat_template.json").get("chat_template")
    if isinstance(template, list):
        for t in template:
            if t.get("name") == "default":
                w.add("tokenizer.chat_template", t["template"])
            else:
                w.add(f"tokenizer.chat_template.{t['name']}", t["template"])
    elif isinstance(template, str):
        w.add("tokenizer.chat_template", template)
    log(f"tokenizer: {kind}, {len(tokens)} tokens, special ids {ids}, "
        f"chat template {'yes' if template else 'no'}")


def convert(model_dir, out, type_name):
    if not os.path.isdir(model_dir):
        raise ConvertError(f"{model_dir}: not a directory")
    ggml_type, file_type = FILE_TYPES[type_name]
    cfg = read_json(os.path.join(model_dir, "config.json"), "config.json")
    if (cfg.get("architectures") or [None])[0] in hf_bert.ARCHITECTURES:
        try:
            w = hf_bert.convert(model_dir, out, ggml_type, file_type, open_checkpoint(model_dir),
                                quantize_q8_0, log)
        except hf_bert.BertError as e:
            raise ConvertError(str(e))
        return write_out(w, out)
    hp = HParams(model_dir)
    log(f"{hp.hf_arch} -> {hp.arch}: {hp.n_layer} layers, hidden {hp.n_embd}, heads {hp.n_head}/"
        f"{hp.n_head_kv}, head_dim {hp.head_dim}, ff {hp.n_ff}, vocab {hp.n_vocab}, "
        f"rope {hp.rope_type} theta {hp.rope_theta:g}, {'tied' if hp.tied else 'untied'} output")
    ckpt = open_checkpoint(model_dir)
    if "model.embed_tokens.weight" not in ckpt and "embed_tokens.weight" in ckpt:
        # A bare Qwen3Model save (Qwen3-Embedding): the names without "model.".
        for n, st in list(ckpt.items()):
            st.tensors["model." + n] = st.tensors[n]
            ckpt["model." + n] = st
            del ckpt[n]
        hp.tied = True
    name = hp.cfg.get("_name_or_path") or os.path.basename(os.path.normpath(model_dir))
    w = gguf.GGUFWriter(out)
    hp.write(w, name, file_type)
    try:
        pooling = hf_bert.sentence_transformers_pooling(model_dir)
    except hf_bert.BertError as e:
        raise ConvertError(str(e))
    if pooling is not None:
        w.add(f"{hp.arch}.pooling_type", pooling, gguf.GGUF_UINT32)
    add_tokenizer(w, hp, model_dir)
    add_tensors(w, hp, ckpt, ggml_type)
    write_out(w, out)


def write_out(w, out):
    tmp = out + ".tmp"
    w.path = tmp
    try:
        total = w.write(progress=True)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    log(f"wrote {out}: {total / 2**20:.1f} MiB")


def main():
    ap = argparse.ArgumentParser(description="Convert a Hugging Face Llama/Qwen2/Qwen3 checkpoint to GGUF.")
    ap.add_argument("model_dir", help="directory with config.json, *.safetensors, tokenizer.json")
    ap.add_argument("out", help="output .gguf file")
    ap.add_argument("--type", choices=sorted(FILE_TYPES), default="f16",
                    help="type of the weight matrices (default f16); norms and biases stay f32")
    args = ap.parse_args()
    try:
        convert(args.model_dir, args.out, args.type)
    except ConvertError as e:
        sys.stderr.write(f"hf_to_gguf: error: {e}\n")
        sys.exit(1)
    except OSError as e:
        sys.stderr.write(f"hf_to_gguf: error: {e}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
