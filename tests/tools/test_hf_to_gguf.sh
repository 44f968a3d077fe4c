#!/bin/sh
# test_hf_to_gguf.sh - tools/hf_to_gguf.py on the golden HF checkpoints: the
# metadata, tokenizer, tensor names/types/shapes it writes, llama Q/K
# permutation and rope_freqs, Q8_0 bit-exact with gguf-py's reference blocks,
# old-style configs (rope_scaling + rope_theta), and a clear error (exit 1, no
# output file) for each broken input.
set -u
: "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "no numpy"; exit 77; }
G=tests/fixtures/golden
D="$TMP/hf2gguf"
rm -rf "$D" && mkdir -p "$D"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

for m in llama llama3 qwen2 qwen3; do
    for t in f32 q8_0; do
        "$PYTHON" tools/hf_to_gguf.py "$G/$m" "$D/$m-$t.gguf" --type $t 2>"$D/$m-$t.log" \
            || { fail "convert $m $t"; cat "$D/$m-$t.log"; }
    done
done

# --- metadata, tokenizer, tensors ---
"$PYTHON" - "$D" "$G" <<'PY' 2>"$D/meta.log" || { fail "metadata checks"; cat "$D/meta.log"; }
import json, math, struct, sys
sys.path.insert(0, "tools")
import numpy as np
import gguf
import hf_to_gguf

D, G = sys.argv[1], sys.argv[2]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)

def tensor(r, name):
    t, shape, off = r.tensors[name]
    return np.frombuffer(bytes(r.data[off:off + 4 * int(np.prod(shape))]), "<f4").reshape(shape)

def st_tensor(model, name):
    ck = hf_to_gguf.open_checkpoint(f"{G}/{model}")
    return ck[name].load(name)

expect = {  # arch, tokenizer model, pre, tied, add_bos, eos text
    "llama": ("llama", "llama", "default", False, True, "</s>"),
    "llama3": ("llama", "gpt2", "llama-bpe", True, True, "<|eot_id|>"),
    "qwen2": ("qwen2", "gpt2", "qwen2", True, False, "<|im_end|>"),
    "qwen3": ("qwen3", "gpt2", "qwen2", False, False, "<|im_end|>"),
}
for m, (arch, tokm, pre, tied, add_bos, eos) in expect.items():
    cfg = json.load(open(f"{G}/{m}/config.json"))
    tc = json.load(open(f"{G}/{m}/tokenizer_config.json"))
    r = gguf.GGUFReader(f"{D}/{m}-f32.gguf")
    q = gguf.GGUFReader(f"{D}/{m}-q8_0.gguf")
    g = r.get
    check(g("general.architecture") == arch, f"{m}: arch")
    check(g(f"{arch}.block_count") == 2 and g(f"{arch}.embedding_length") == 64, f"{m}: dims")
    check(g(f"{arch}.feed_forward_length") == 128 and g(f"{arch}.context_length") == 128, f"{m}: ff/ctx")
    check(g(f"{arch}.attention.head_count") == 4 and g(f"{arch}.attention.head_count_kv") == 2, f"{m}: heads")
    hd = cfg.get("head_dim", 64 // 4)
    check(g(f"{arch}.attention.key_length") == cfg.get("head_dim"), f"{m}: key_length")
    check(abs(g(f"{arch}.attention.layer_norm_rms_epsilon") - cfg["rms_norm_eps"]) < 1e-12, f"{m}: eps")
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    check(g(f"{arch}.rope.freq_base") == theta, f"{m}: rope theta")
    check(g("general.file_type") == 0 and q.get("general.file_type") == 7, f"{m}: file_type")
    check((arch == "llama") == (g(f"{arch}.rope.dimension_count") is not None), f"{m}: rope dims key")
    # tokenizer
    toks = g("tokenizer.ggml.tokens")
    check(g("tokenizer.ggml.model") == tokm and g("tokenizer.ggml.pre") == pre, f"{m}: tokenizer kind")
    check(len(toks) == cfg["vocab_size"], f"{m}: {len(toks)} tokens, vocab_size {cfg['vocab_size']}")
    check(toks[g("tokenizer.ggml.eos_token_id")] == eos, f"{m}: eos")
    check(g("tokenizer.ggml.add_bos_token") == add_bos, f"{m}: add_bos")
    check(g("tokenizer.chat_template") == tc["chat_template"], f"{m}: chat template")
    types = g("tokenizer.ggml.token_type")
    if tokm == "llama":
        check(toks[:3] == ["<unk>", "<s>", "</s>"] and types[:4] == [2, 3, 3, 6], f"{m}: spm specials")
        check(toks[3 + 0x41] == "<0x41>" and g("tokenizer.ggml.bos_token_id") == 1, f"{m}: byte tokens")
        sc = g("tokenizer.ggml.scores")
        merges = json.load(open(f"{G}/{m}/tokenizer.json"))["model"]["merges"]
        first = "".join(merges[0]) if isinstance(merges[0], list) else merges[0].replace(" ", "")
        check(sc[toks.index(first)] == 0.0 and max(sc[259:]) == 0.0, f"{m}: scores")
        check(g("tokenizer.ggml.add_space_prefix") is True, f"{m}: add_space_prefix")
    else:
        check(len(g("tokenizer.ggml.merges")) > 50, f"{m}: merges")
        check(types[-1] == (5 if m.startswith("qwen") else 3), f"{m}: last token type")
        if m.startswith("qwen"):  # vocab_size padded past the tokenizer
            check(toks[-1] == f"[PAD{len(toks) - 1}]", f"{m}: pad tokens")
            check(g("tokenizer.ggml.padding_token_id") == toks.index("<|endoftext|>"), f"{m}: pad id")
    # tensors: names, types, shapes
    names = set(r.tensors)
    check(("output.weight" in names) == (not tied), f"{m}: output.weight presence")
    check(("rope_freqs.weight" in names) == (m == "llama3"), f"{m}: rope_freqs presence")
    check(("blk.1.attn_q.bias" in names) == (m == "qwen2"), f"{m}: biases")
    check(("blk.0.attn_k_norm.weight" in names) == (m == "qwen3"), f"{m}: q/k norm")
    for name, (t, shape, _) in q.tensors.items():
        want = gguf.GGML_F32 if len(shape) == 1 else gguf.GGML_Q8_0
        check(t == want, f"{m}: {name} type {t} in the q8_0 file")
        check(r.tensors[name][0] == gguf.GGML_F32 and r.tensors[name][1] == shape, f"{m}: {name} f32 file")
    # llama: Q/K rows permuted so that pairs (2i, 2i+1) hold HF's (i, i + d/2)
    wq = tensor(r, "blk.0.attn_q.weight")
    hf = st_tensor(m, "model.layers.0.self_attn.q_proj.weight")
    if arch == "llama":
        check(np.array_equal(wq[1], hf[hd // 2]) and np.array_equal(wq[2], hf[1]), f"{m}: q permutation")
        wk = tensor(r, "blk.1.attn_k.weight")
        hk = st_tensor(m, "model.layers.1.self_attn.k_proj.weight")
        check(np.array_equal(wk[hd + 1], hk[hd + hd // 2]), f"{m}: k permutation")
    else:
        check(np.array_equal(wq, hf), f"{m}: q unpermuted")
    check(np.array_equal(tensor(r, "token_embd.weight"), st_tensor(m, "model.embed_tokens.weight")),
          f"{m}: embeddings")
    if m == "llama3":
        rp = cfg["rope_parameters"]
        f = tensor(r, "rope_freqs.weight")
        check(f.shape == (hd // 2,) and f[0] == 1.0 and f[-1] == rp["factor"] and 1 < f[1] < rp["factor"],
              f"{m}: rope_freqs {f}")

# Q8_0 bit-exact with gguf-py's quantizer (tests/fixtures/quant/q8_0.bin)
raw = open("tests/fixtures/quant/q8_0.bin", "rb").read()
ty, rows, cols, in_rows = struct.unpack_from("<4I", raw, 8)
x = np.frombuffer(raw, "<f4", in_rows * cols, 24).reshape(in_rows, cols)
want = raw[24 + 4 * in_rows * cols:][:in_rows * cols // 32 * 34]
check(ty == 8 and hf_to_gguf.quantize_q8_0(x) == want, "q8_0 blocks differ from gguf-py")

for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY

# --- old-style config: rope_scaling + top-level rope_theta, as transformers 4 wrote ---
mkdir -p "$D/old" && cp "$G"/llama3/* "$D/old/"
"$PYTHON" - "$D/old/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
rp = c.pop("rope_parameters")
c["rope_theta"] = rp.pop("rope_theta")
c["rope_scaling"] = rp
json.dump(c, open(sys.argv[1], "w"))
PY
"$PYTHON" tools/hf_to_gguf.py "$D/old" "$D/old.gguf" --type f32 2>/dev/null || fail "old-style config"
"$PYTHON" - "$D/old.gguf" "$D/llama3-f32.gguf" <<'PY' || fail "old-style config differs"
import sys
sys.path.insert(0, "tools")
import gguf
a, b = gguf.GGUFReader(sys.argv[1]), gguf.GGUFReader(sys.argv[2])
assert a.tensor_bytes("rope_freqs.weight") == b.tensor_bytes("rope_freqs.weight")
assert a.get("llama.rope.freq_base") == b.get("llama.rope.freq_base")
PY

# --- broken inputs: exit 1, a message naming the cause, no output file ---
broken() { # broken NAME PATTERN: convert $D/NAME, expect failure mentioning PATTERN
    rm -f "$D/out.gguf"
    if "$PYTHON" tools/hf_to_gguf.py "$D/$1" "$D/out.gguf" --type q8_0 2>"$D/err.txt"; then
        fail "$1: converted"
    elif ! grep -qF -- "$2" "$D/err.txt"; then
        fail "$1: message lacks '$2':"; sed 's/^/    /' "$D/err.txt"
    fi
    [ ! -e "$D/out.gguf" ] && [ ! -e "$D/out.gguf.tmp" ] || fail "$1: left an output file"
}
edit() { # edit NAME SRC PYTHON-EXPR-ON-c: copy SRC and rewrite its config.json
    rm -rf "$D/$1" && mkdir -p "$D/$1" && cp "$G/$2"/* "$D/$1/"
    "$PYTHON" -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $3; json.dump(c, open(p,'w'))" \
        "$D/$1/config.json"
}
edit arch qwen2 'c["architectures"] = ["GPT2LMHeadModel"]'
broken arch "unsupported architecture 'GPT2LMHeadModel'"
edit hidden qwen2 'c["hidden_size"] = 32'
broken hidden "shape [320, 64], expected [320, 32]"
edit heads qwen3 'c["num_key_value_heads"] = 3'
broken heads "not a multiple of num_key_value_heads 3"
edit act llama 'c["hidden_act"] = "gelu"'
broken act "hidden_act 'gelu' not supported"
edit nolayers llama 'del c["num_hidden_layers"]'
broken nolayers "'num_hidden_layers' missing"
edit untied llama3 'c["tie_word_embeddings"] = False'
broken untied "lm_head.weight missing"
mkdir -p "$D/empty"
broken empty "config.json not found"
edit badjson qwen2 'pass'
echo '{"architectures": [' > "$D/badjson/config.json"
broken badjson "invalid JSON"
edit nost qwen2 'pass'
rm "$D/nost/model.safetensors"
broken nost "no *.safetensors files"
edit notok qwen2 'pass'
rm "$D/notok/tokenizer.json"
broken notok "tokenizer.json"
edit shard llama 'pass'
rm "$D/shard/model-00002-of-00004.safetensors"
broken shard "model-00002-of-00004.safetensors: listed in the index but missing"
edit trunc qwen3 'pass'
head -c 4000 "$G/qwen3/model.safetensors" > "$D/trunc/model.safetensors"
broken trunc "do not fit shape"
edit dtype qwen3 'pass'
"$PYTHON" - "$D/dtype/model.safetensors" <<'PY'
import json, struct, sys
# a valid file whose only tensor is I32: the dtype must be refused by name
h = json.dumps({"model.embed_tokens.weight": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(8))
PY
broken dtype "unsupported dtype I32"

# --- the result loads in omniserve ---
if [ -x "${OMNI:-}" ]; then
    "$OMNI" inspect "$D/qwen3-q8_0.gguf" >"$D/inspect.txt" 2>&1 || fail "omniserve inspect"
    grep -q "qwen3" "$D/inspect.txt" || fail "inspect output lacks qwen3"
fi

[ $fails -eq 0 ] || exit 1
echo "hf_to_gguf: all checks passed"
