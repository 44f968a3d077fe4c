#!/bin/sh
# test_random_model.sh - tools/random_model: --list, bad arguments, seeded
# reproducibility, and 2-layer models of every shape in two types checked with
# tools/gguf.py against the real models' hyper-parameters and llama.cpp's
# per-tensor type rules (Q6_K layers of Q4_K_M/Q5_K_M, fallbacks for rows that
# are not a multiple of 256). One model per architecture, together covering
# every tensor type written, must run through `omniserve bench` (finite logits).
# Whisper shapes: 1-layer ggml files checked against whisper.cpp's layout and
# the real hparams, loaded by `omniserve bench-stt` (English-only Q8_0 and
# multilingual Q5_1).
set -u
: "${OMNI:=build/omniserve}" "${PYTHON:=/usr/bin/python3}" "${TMP:=/tmp}"
[ -d ../shared/vocab ] || { echo "no ../shared/vocab"; exit 77; }
RM=tools/random_model
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

# --- --list and bad arguments (exit 2 with a message) ---
list=$($RM --list) || fail "--list exited $?"
for s in qwen2.5-0.5b qwen2.5-1.5b llama-3.2-1b smollm2-135m qwen3-0.6b; do
    echo "$list" | grep -q "^$s " || fail "--list lacks $s"
done
bad() { # bad EXPECTED_TEXT ARGS...: must exit 2 and say EXPECTED_TEXT
    want=$1; shift
    out=$($RM "$@" 2>&1); rc=$?
    [ $rc -eq 2 ] || fail "'$*' exited $rc, want 2"
    echo "$out" | grep -qF -- "$want" || fail "'$*' did not say '$want': $out"
}
bad "--shape is required" --type q8_0 -o "$TMP/x.gguf"
bad "invalid choice" --shape gpt-5 --type q8_0 -o "$TMP/x.gguf"
bad "invalid choice" --shape qwen2.5-0.5b --type q3_k -o "$TMP/x.gguf"
bad "--layers must be 1..24" --shape qwen2.5-0.5b --type q8_0 --layers 0 -o "$TMP/x.gguf"
bad "does not exist" --shape qwen2.5-0.5b --type q8_0 -o "$TMP/no/such/dir/x.gguf"
bad "no such file" --shape qwen2.5-0.5b --type q8_0 --vocab "$TMP/none.gguf" -o "$TMP/x.gguf"
bad "more than the model's 49152" --shape smollm2-135m --type q8_0 --layers 1 \
    --vocab ../shared/vocab/ggml-vocab-gpt-2.gguf -o "$TMP/x.gguf"

# --- same seed, same bytes; another seed, other bytes ---
gen() { $RM "$@" 2>"$TMP/rm.err" || { fail "random_model $* exited $?"; cat "$TMP/rm.err"; }; }
gen --shape smollm2-135m --type q4_0 --layers 1 --seed 7 -o "$TMP/rm_a.gguf"
gen --shape smollm2-135m --type q4_0 --layers 1 --seed 7 -o "$TMP/rm_b.gguf"
gen --shape smollm2-135m --type q4_0 --layers 1 --seed 8 -o "$TMP/rm_c.gguf"
cmp -s "$TMP/rm_a.gguf" "$TMP/rm_b.gguf" || fail "same seed gave different files"
cmp -s "$TMP/rm_a.gguf" "$TMP/rm_c.gguf" && fail "different seeds gave the same file"
grep -q "tensors, .* MiB" "$TMP/rm.err" || fail "no progress on stderr"
rm -f "$TMP"/rm_[abc].gguf

# --- every shape in two types: metadata, tensor types, a forward pass ---
# Two checks run at a time (each is mostly one Python process); a failing
# check appends to $TMP/rm_failed, and its log is printed at the end.
check() { # check SHAPE TYPE [bench]: generate with 2 layers, verify, bench, delete
    f="$TMP/rm_$1_$2.gguf"; fails0=$fails
    $RM --shape "$1" --type "$2" --layers 2 -o "$f" 2>"$f.err" || { fail "random_model exited $?"; cat "$f.err"; }
    "$PYTHON" - "$f" "$1" "$2" <<'PY' || fail "$1 $2: metadata/type checks"
import sys
sys.path.insert(0, "tools")
import numpy as np
import gguf

path, shape, qtype = sys.argv[1:]
r = gguf.GGUFReader(path)
T = {v[0]: k for k, v in gguf.GGML_TYPES.items()}
bad = []

def want(what, got, exp):
    if isinstance(exp, float) and isinstance(got, float) and abs(got - exp) <= 1e-6 * abs(exp):
        return
    if got != exp:
        bad.append(f"{what}: {got!r}, want {exp!r}")

# published config.json facts: arch, embd, heads, kv heads, ff, vocab, ctx, theta, eps
HP = {
    "qwen2.5-0.5b": ("qwen2", 896, 14, 2, 4864, 151936, 32768, 1e6, 1e-6),
    "qwen2.5-1.5b": ("qwen2", 1536, 12, 2, 8960, 151936, 32768, 1e6, 1e-6),
    "llama-3.2-1b": ("llama", 2048, 32, 8, 8192, 128256, 131072, 500000.0, 1e-5),
    "smollm2-135m": ("llama", 576, 9, 3, 1536, 49152, 8192, 100000.0, 1e-5),
    "qwen3-0.6b": ("qwen3", 1024, 16, 8, 3072, 151936, 40960, 1e6, 1e-6),
}
arch, embd, nh, nkv, ff, vocab, ctx, theta, eps = HP[shape]
f32 = lambda x: float(np.float32(x))
want("architecture", r.get("general.architecture"), arch)
want("block_count", r.get(f"{arch}.block_count"), 2)
want("embedding_length", r.get(f"{arch}.embedding_length"), embd)
want("head_count", r.get(f"{arch}.attention.head_count"), nh)
want("head_count_kv", r.get(f"{arch}.attention.head_count_kv"), nkv)
want("feed_forward_length", r.get(f"{arch}.feed_forward_length"), ff)
want("context_length", r.get(f"{arch}.context_length"), ctx)
want("freq_base", r.get(f"{arch}.rope.freq_base"), f32(theta))
want("rms eps", r.get(f"{arch}.attention.layer_norm_rms_epsilon"), f32(eps))
want("file_type", r.get("general.file_type"), {"f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17}[qtype])
tokens = r.get("tokenizer.ggml.tokens")
want("tokens", len(tokens), vocab)
want("token_types", len(r.get("tokenizer.ggml.token_type")), vocab)
want("token_embd shape", r.tensors["token_embd.weight"][1], (vocab, embd))
want("output.weight (tied)", "output.weight" in r.tensors, False)
for name, (t, s, _) in r.tensors.items():
    if len(s) == 1 and t != gguf.GGML_F32:
        bad.append(f"{name}: 1-D tensor of type {gguf.GGML_TYPES[t][0]}")

def types(**exp):
    for name, tname in exp.items():
        name = name.replace("__", ".") + ".weight"
        want(name, gguf.GGML_TYPES[r.tensors[name][0]][0], tname)

# 2 layers: llama.cpp's use_more_bits(i, 2) is false for layer 0, true for layer 1
if shape.startswith("qwen2.5"):
    want("tokenizer pre", r.get("tokenizer.ggml.pre"), "qwen2")
    want("eos", r.get("tokenizer.ggml.eos_token_id"), 151645)
    want("token 151657", tokens[151657], "<tool_call>")
    want("q bias", r.tensors["blk.1.attn_q.bias"][1], (embd,))
    want("k bias", r.tensors["blk.1.attn_k.bias"][1], (nkv * embd // nh,))
if (shape, qtype) == ("qwen2.5-0.5b", "q4_k_m"):
    # 896-wide rows: Q4_K -> Q5_0, Q6_K -> Q8_0; ffn_down rows are 4864 = 19 * 256
    types(token_embd="Q8_0", blk__0__attn_q="Q5_0", blk__0__attn_v="Q5_0", blk__1__attn_v="Q8_0",
          blk__0__ffn_gate="Q5_0", blk__0__ffn_down="Q4_K", blk__1__ffn_down="Q6_K")
if (shape, qtype) == ("qwen2.5-0.5b", "q8_0"):
    types(token_embd="Q8_0", blk__0__attn_q="Q8_0", blk__1__ffn_down="Q8_0")
if (shape, qtype) == ("qwen2.5-1.5b", "q5_k_m"):
    types(token_embd="Q6_K", blk__0__attn_q="Q5_K", blk__0__attn_v="Q5_K", blk__1__attn_v="Q6_K",
          blk__0__ffn_down="Q5_K", blk__1__ffn_down="Q6_K", blk__1__ffn_up="Q5_K")
if (shape, qtype) == ("qwen2.5-1.5b", "q4_0"):
    types(token_embd="Q6_K", blk__0__attn_q="Q4_0", blk__1__attn_v="Q4_0", blk__1__ffn_down="Q4_0")
if shape == "llama-3.2-1b":
    want("key_length", r.get("llama.attention.key_length"), 64)
    want("rope dims", r.get("llama.rope.dimension_count"), 64)
    want("vocab_size", r.get("llama.vocab_size"), vocab)
    want("tokenizer pre", r.get("tokenizer.ggml.pre"), "llama-bpe")
    t, s, off = r.tensors["rope_freqs.weight"]
    want("rope_freqs", (gguf.GGML_TYPES[t][0], s), ("F32", (32,)))
    rf = np.frombuffer(r.tensor_bytes("rope_freqs.weight"), "<f4")
    # llama3 scaling (factor 32, low 1, high 4, original context 8192): high
    # frequencies unscaled, low ones divided by 32, smooth in between
    want("rope_freqs[0]", float(rf[0]), 1.0)
    want("rope_freqs[31]", float(rf[31]), 32.0)
    ramp = [x for x in rf if 1 < x < 32]
    if not (np.all(np.diff(rf) >= 0) and list(rf).count(1.0) == 15 and len(ramp) == 3):
        bad.append(f"rope_freqs: not 15 x 1, a ramp of 3, then 32: {rf}")
if (shape, qtype) == ("llama-3.2-1b", "q4_k_m"):
    types(token_embd="Q6_K", blk__0__attn_q="Q4_K", blk__0__attn_v="Q4_K", blk__1__attn_v="Q6_K",
          blk__0__ffn_down="Q4_K", blk__1__ffn_down="Q6_K", blk__0__attn_output="Q4_K")
if (shape, qtype) == ("llama-3.2-1b", "q5_k_m"):
    types(token_embd="Q6_K", blk__0__attn_k="Q5_K", blk__1__ffn_down="Q6_K")
if shape == "smollm2-135m":
    want("tokenizer pre", r.get("tokenizer.ggml.pre"), "smollm")
    want("special tokens", tokens[:3], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    want("bos/eos", (r.get("tokenizer.ggml.bos_token_id"), r.get("tokenizer.ggml.eos_token_id")), (1, 2))
    merges = r.get("tokenizer.ggml.merges")
    have = set(tokens)
    if not merges or any(m.replace(" ", "", 1) not in have for m in merges[:2000]):
        bad.append("merges do not produce vocabulary tokens")
if (shape, qtype) == ("smollm2-135m", "f16"):
    types(token_embd="F16", blk__0__attn_q="F16", blk__1__ffn_down="F16")
if (shape, qtype) == ("smollm2-135m", "q5_k_m"):
    # 576-wide rows: Q5_K -> Q5_1, Q6_K -> Q8_0; ffn_down rows are 1536 = 6 * 256
    types(token_embd="Q8_0", blk__0__attn_q="Q5_1", blk__0__attn_v="Q5_1", blk__1__attn_v="Q8_0",
          blk__0__ffn_down="Q5_K", blk__1__ffn_down="Q6_K")
if shape == "qwen3-0.6b":
    want("key_length", r.get("qwen3.attention.key_length"), 128)
    want("value_length", r.get("qwen3.attention.value_length"), 128)
    want("attn_q shape", r.tensors["blk.0.attn_q.weight"][1], (2048, 1024))
    want("attn_output shape", r.tensors["blk.0.attn_output.weight"][1], (1024, 2048))
    want("q_norm", r.tensors["blk.1.attn_q_norm.weight"][:2], (gguf.GGML_F32, (128,)))
    want("k_norm", r.tensors["blk.1.attn_k_norm.weight"][:2], (gguf.GGML_F32, (128,)))
    want("no qkv bias", "blk.0.attn_q.bias" in r.tensors, False)
    want("token 151667", tokens[151667], "<think>")
if (shape, qtype) == ("qwen3-0.6b", "q4_k_m"):
    types(token_embd="Q6_K", blk__0__attn_q="Q4_K", blk__1__attn_v="Q6_K", blk__0__ffn_down="Q4_K")
if (shape, qtype) == ("qwen3-0.6b", "q8_0"):
    types(token_embd="Q8_0", blk__0__attn_q="Q8_0", blk__1__ffn_down="Q8_0")
for b in bad:
    print(f"  {shape} {qtype}: {b}")
sys.exit(1 if bad else 0)
PY
    if [ -x "$OMNI" ] && [ "${3:-}" = bench ]; then
        "$OMNI" bench -m "$f" -p 8 -n 4 --reps 1 --threads 1 --json >"$f.bench" 2>&1 \
            || { fail "$1 $2: bench exited $?"; tail -n 5 "$f.bench"; }
        grep -q '"tg_tok_s": [0-9]' "$f.bench" || fail "$1 $2: no bench result"
    fi
    rm -f "$f" "$f.err" "$f.bench"
    [ $fails -eq $fails0 ] || echo "$1 $2" >> "$TMP/rm_failed"
}
rm -f "$TMP/rm_failed"
for pair in "qwen2.5-0.5b q4_k_m bench:qwen2.5-0.5b q8_0" "qwen2.5-1.5b q5_k_m:qwen2.5-1.5b q4_0 bench" \
            "llama-3.2-1b q4_k_m:llama-3.2-1b q5_k_m bench" "smollm2-135m f16 bench:smollm2-135m q5_k_m bench" \
            "qwen3-0.6b q4_k_m bench:qwen3-0.6b q8_0"; do
    check ${pair%%:*} > "$TMP/rm_log1" 2>&1 &
    check ${pair##*:} > "$TMP/rm_log2" 2>&1
    wait
    cat "$TMP/rm_log1" "$TMP/rm_log2"
done
# --- whisper.cpp ggml files ---
for s in whisper-tiny.en whisper-base.en whisper-tiny; do
    echo "$list" | grep -q "^$s " || fail "--list lacks $s"
done
bad "whisper shapes take" --shape whisper-tiny.en --type q4_k_m -o "$TMP/x.bin"
bad "smollm2-135m takes f16" --shape smollm2-135m --type q5_1 -o "$TMP/x.gguf"
bad "--layers must be 1..6" --shape whisper-base.en --type f16 --layers 7 -o "$TMP/x.bin"
for st in whisper-tiny.en:q8_0 whisper-tiny:q5_1 whisper-base.en:f16; do
    shape=${st%%:*}; type=${st##*:}; f="$TMP/rm_$shape.bin"
    gen --shape "$shape" --type "$type" --layers 1 -o "$f"
    "$PYTHON" - "$f" "$shape" "$type" <<'PY' || fail "$shape $type: ggml layout checks"
import struct, sys
sys.path.insert(0, "tools")
import numpy as np
import hf_whisper_to_ggml as w

path, shape, qtype = sys.argv[1:]
b = open(path, "rb").read()
bad = []
d, heads, vocab = {"whisper-tiny.en": (384, 6, 51864), "whisper-tiny": (384, 6, 51865),
                   "whisper-base.en": (512, 8, 51864)}[shape]
ftype = {"f16": 1, "q8_0": 2007, "q5_1": 2009}[qtype]
magic, *hp = struct.unpack_from("<I11i", b, 0)
if magic != 0x67676D6C:
    bad.append(f"magic {magic:#x}")
if hp != [vocab, 1500, d, heads, 1, 448, d, heads, 1, 80, ftype]:
    bad.append(f"hparams {hp}")
off = 48
n_mel, n_fft = struct.unpack_from("<ii", b, off)
filt = np.frombuffer(b, "<f4", n_mel * n_fft, off + 8).reshape(n_mel, n_fft)
if (n_mel, n_fft) != (80, 201) or not np.array_equal(filt, w.mel_filters(80)):
    bad.append("mel filters are not the slaney filters")
off += 8 + 4 * n_mel * n_fft
n_tok, = struct.unpack_from("<i", b, off)
off += 4
pieces = []
for _ in range(n_tok):
    n, = struct.unpack_from("<I", b, off)
    pieces.append(b[off + 4:off + 4 + n])
    off += 4 + n
if n_tok != 50257 or pieces[0] != b"!" or pieces[50256] != b"<|endoftext|>" or pieces[220] != b" ":
    bad.append(f"vocab: {n_tok} pieces, {pieces[:1]}, {pieces[220:221]}, {pieces[-1:]}")
types = {}
while off < len(b):
    nd, nl, t = struct.unpack_from("<iii", b, off)
    ne = struct.unpack_from(f"<{nd}i", b, off + 12)
    name = b[off + 12 + 4 * nd:off + 12 + 4 * nd + nl].decode()
    types[name] = (t, ne)
    from gguf import tensor_nbytes
    off += 12 + 4 * nd + nl + tensor_nbytes(t, tuple(reversed(ne)))
q = {"f16": 1, "q8_0": 8, "q5_1": 7}[qtype]
want = {"decoder.token_embedding.weight": (q, (d, vocab)), "encoder.conv1.weight": (1, (3, 80, d)),
        "encoder.conv1.bias": (0, (1, d)), "encoder.positional_embedding": (0, (d, 1500)),
        "decoder.blocks.0.mlp.0.weight": (q, (d, 4 * d)), "decoder.blocks.0.attn.query.bias": (0, (d,))}
for name, exp in want.items():
    if types.get(name) != exp:
        bad.append(f"{name}: {types.get(name)}, want {exp}")
if len(types) != len(w.tensor_names(1, 1)) or off != len(b):
    bad.append(f"{len(types)} tensors, end at {off} of {len(b)}")
for x in bad:
    print(f"  {shape} {qtype}: {x}")
sys.exit(1 if bad else 0)
PY
    if [ -x "$OMNI" ] && [ "$shape" != whisper-base.en ] && [ -f ../shared/audio/turn-on-the-kitchen-lights.wav ]; then
        "$OMNI" bench-stt -m "$f" --file ../shared/audio/turn-on-the-kitchen-lights.wav -t 1 --reps 1 --tokens 2 \
            --max-tokens 2 --json >"$f.bench" 2>&1 || { fail "$shape: bench-stt exited $?"; tail -n 5 "$f.bench"; }
        grep -q '"encoder_ms":[0-9].*"decoder_ms_per_token":[0-9].*"rtf":[0-9]' "$f.bench" \
            || fail "$shape $type: no bench-stt result: $(tail -n 2 "$f.bench")"
        if [ "$shape" = whisper-tiny.en ]; then # batched against serial transcriptions
            "$OMNI" bench-stt -m "$f" --file ../shared/audio/turn-on-the-kitchen-lights.wav -t 1 --reps 1 \
                --max-tokens 2 --concurrency 2 --json >"$f.bench" 2>&1 || fail "$shape: bench-stt --concurrency"
            grep -q '"concurrency":2,"serial_s":[0-9].*"speedup":[0-9].*"decoder_batch_max":[12],"identical":[0-2]' \
                "$f.bench" || fail "$shape $type: no bench-stt --concurrency result: $(tail -n 2 "$f.bench")"
        fi
    fi
    rm -f "$f" "$f.bench"
done

[ -f "$TMP/rm_failed" ] && fail "checks failed for: $(tr '\n' ',' < "$TMP/rm_failed")"
[ -x "$OMNI" ] || echo "note: no $OMNI, forward passes not run"
[ $fails -eq 0 ]
