#!/usr/bin/env python3
"""make_corpus.py - (re)generate the seed corpora of the fuzz targets.

    /usr/bin/python3 tests/fuzz/make_corpus.py        # from the repository root

Writes tests/fuzz/corpus/<target>/<seed> for every target in tests/fuzz:
small, valid (or nearly valid) inputs in each target's input format (see
the header comment of tests/fuzz/fuzz_<target>.c), byte for byte the same
on every run. Models are built here at toy sizes with tools/gguf.py or by
hand from the loaders' layouts; images and sounds are written by hand. Seeds
that come from ../shared (the Silero VAD header) are skipped without it.
Inputs that once crashed a target go to tests/fuzz/crashes/ (handed over)
or, once fixed, into the corpus by hand - this script never deletes files.
"""
import json
import math
import os
import struct
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import numpy as np  # noqa: E402
from gguf import (GGUF_FLOAT32, GGUF_INT32, GGUF_STRING, GGUF_UINT8, GGUF_UINT16,  # noqa: E402
                  GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_BOOL, GGUF_INT8, GGUF_INT16,
                  GGML_F16, GGML_F32, GGML_Q8_0, GGUFWriter)

CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
SHARED = os.environ.get("OMNI_SHARED") or os.path.join(ROOT, "..", "shared")
written = 0


def put(target, name, data):
    global written
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    written += 1


def gguf_bytes(fill, alignment=32):
    """A GGUF file built by fill(writer), as bytes."""
    fd, tmp = tempfile.mkstemp(suffix=".gguf")
    os.close(fd)
    try:
        w = GGUFWriter(tmp, alignment)
        fill(w)
        w.write()
        with open(tmp, "rb") as f:
            return f.read()
    finally:
        os.remove(tmp)


def rnd(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.1


# ---- vocabularies --------------------------------------------------------------

def byte_chars():
    """GPT-2's byte -> character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocab_bpe(w, pre="qwen2"):
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a", "e r"]
    tokens = byte_chars() + ["\u0120t", "he", "\u0120the", "in", "\u0120a", "er"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    types = [1] * len(tokens) + [3] * len(specials)
    tokens += specials
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.pre", pre)
    w.add("tokenizer.ggml.tokens", tokens)
    w.add("tokenizer.ggml.token_type", types, elem_type=GGUF_INT32)
    w.add("tokenizer.ggml.merges", merges)
    w.add("tokenizer.ggml.bos_token_id", len(tokens) - len(specials))
    w.add("tokenizer.ggml.eos_token_id", len(tokens) - len(specials) + 2)


def vocab_spm(w):
    pieces = [("\u2581", -5.0), ("a", -5.0), ("b", -5.0), ("\u2581a", -1.0), ("ab", -2.0),
              ("bc", -0.5), ("\u2581the", -1.5)]
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + [p for p, _ in pieces]
    scores = [0.0] * 259 + [s for _, s in pieces]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    w.add("tokenizer.ggml.model", "llama")
    w.add("tokenizer.ggml.tokens", tokens)
    w.add("tokenizer.ggml.scores", scores, elem_type=GGUF_FLOAT32)
    w.add("tokenizer.ggml.token_type", types, elem_type=GGUF_INT32)
    w.add("tokenizer.ggml.bos_token_id", 1)
    w.add("tokenizer.ggml.eos_token_id", 2)
    w.add("tokenizer.ggml.unknown_token_id", 0)
    w.add("tokenizer.ggml.add_bos_token", True)


def vocab_wpm(w):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "the", "a",
              "##b", ",", "!"]
    types = [3, 2, 3, 3, 3] + [1] * (len(tokens) - 5)
    w.add("tokenizer.ggml.model", "bert")
    w.add("tokenizer.ggml.tokens", tokens)
    w.add("tokenizer.ggml.token_type", types, elem_type=GGUF_INT32)
    w.add("tokenizer.ggml.unknown_token_id", 1)
    w.add("tokenizer.ggml.seperator_token_id", 3)
    w.add("tokenizer.ggml.padding_token_id", 0)
    w.add("tokenizer.ggml.cls_token_id", 2)
    w.add("tokenizer.ggml.mask_token_id", 4)


# ---- GGUF reader and tokenizer construction -------------------------------------

def corpus_gguf():
    def every_type(w):
        w.add("general.architecture", "llama")
        w.add("t.u8", 200, GGUF_UINT8)
        w.add("t.i8", -5, GGUF_INT8)
        w.add("t.u16", 60000, GGUF_UINT16)
        w.add("t.i16", -300, GGUF_INT16)
        w.add("t.u32", 4000000000)
        w.add("t.i32", -70000, GGUF_INT32)
        w.add("t.f32", 0.5)
        w.add("t.bool", True, GGUF_BOOL)
        w.add("t.u64", 2**40, GGUF_UINT64)
        w.add("t.i64", -2**40, GGUF_INT64)
        w.add("t.f64", 1e-300, GGUF_FLOAT64)
        w.add("t.str", "h\u00e9llo")
        w.add("t.arr_str", ["a", "", "\u2581b"])
        w.add("t.arr_i32", [1, -2, 3], elem_type=GGUF_INT32)
        w.add("t.arr_f32", [0.25, 2.0], elem_type=GGUF_FLOAT32)
        w.add_tensor("a.weight", rnd((2, 4), 1))
        w.add_tensor("b.weight", rnd((3,), 2).astype(np.float16), GGML_F16)
        q = struct.pack("<e", 0.01) + bytes(range(32))
        w.add_tensor_raw("c.weight", GGML_Q8_0, (1, 32), q)
    put("fuzz_gguf", "every-type.gguf", gguf_bytes(every_type))
    put("fuzz_gguf", "aligned-64.gguf",
        gguf_bytes(lambda w: (w.add("general.name", "x"), w.add_tensor("t", rnd((8,), 3))), 64))
    put("fuzz_gguf", "empty-v3.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    put("fuzz_gguf", "empty-v2.gguf", b"GGUF" + struct.pack("<IQQ", 2, 0, 0))
    put("fuzz_gguf", "vocab-spm.gguf", gguf_bytes(vocab_spm))

    put("fuzz_vocab", "bpe-qwen2.gguf", gguf_bytes(vocab_bpe))
    put("fuzz_vocab", "bpe-llama3.gguf", gguf_bytes(lambda w: vocab_bpe(w, "llama-bpe")))
    put("fuzz_vocab", "spm.gguf", gguf_bytes(vocab_spm))
    put("fuzz_vocab", "wpm.gguf", gguf_bytes(vocab_wpm))


# ---- whisper.cpp ggml ------------------------------------------------------------

def whisper_file(ftype=0, n_vocab=8, d=1, n_mels=1, n_text_ctx=4, pieces=None):
    """A complete toy whisper.cpp model: every tensor audio/whisper.c expects."""
    mat_type = 1 if ftype else 0

    def tensor(name, ne, kind):
        ttype = 0 if kind == "f32" else mat_type
        n = int(np.prod(ne))
        vals = rnd((n,), len(name))
        data = vals.astype("<f2" if ttype == 1 else "<f4").tobytes()
        nb = name.encode()
        return struct.pack("<iii", len(ne), len(nb), ttype) + struct.pack("<%di" % len(ne), *ne) + nb + data

    hp = [n_vocab, 1500, d, 1, 1, n_text_ctx, d, 1, 1, n_mels, ftype]
    out = [struct.pack("<I", 0x67676D6C), struct.pack("<11i", *hp)]
    out.append(struct.pack("<ii", n_mels, 201) + rnd((n_mels * 201,), 7).tobytes())
    pieces = pieces if pieces is not None else [b"a", b"b", b" the", b"\xc3\xa9", b"!"]
    out.append(struct.pack("<i", len(pieces)))
    for p in pieces:
        out.append(struct.pack("<I", len(p)) + p)
    t = [tensor("encoder.conv1.weight", (3, n_mels, d), "mat"),
         tensor("encoder.conv1.bias", (1, d), "f32"),
         tensor("encoder.conv2.weight", (3, d, d), "mat"),
         tensor("encoder.conv2.bias", (1, d), "f32"),
         tensor("encoder.positional_embedding", (d, 1500), "f32"),
         tensor("encoder.ln_post.weight", (d,), "f32"),
         tensor("encoder.ln_post.bias", (d,), "f32")]

    def block(side, i):
        p = "%s.blocks.%d." % (side, i)
        return [tensor(p + "attn_ln.weight", (d,), "f32"), tensor(p + "attn_ln.bias", (d,), "f32"),
                tensor(p + "attn.query.weight", (d, d), "mat"), tensor(p + "attn.query.bias", (d,), "f32"),
                tensor(p + "attn.key.weight", (d, d), "mat"),
                tensor(p + "attn.value.weight", (d, d), "mat"), tensor(p + "attn.value.bias", (d,), "f32"),
                tensor(p + "attn.out.weight", (d, d), "mat"), tensor(p + "attn.out.bias", (d,), "f32"),
                tensor(p + "mlp_ln.weight", (d,), "f32"), tensor(p + "mlp_ln.bias", (d,), "f32"),
                tensor(p + "mlp.0.weight", (d, 4 * d), "mat"), tensor(p + "mlp.0.bias", (4 * d,), "f32"),
                tensor(p + "mlp.2.weight", (4 * d, d), "mat"), tensor(p + "mlp.2.bias", (d,), "f32")]
    t += block("encoder", 0)
    t += [tensor("decoder.token_embedding.weight", (d, n_vocab), "mat"),
          tensor("decoder.positional_embedding", (d, n_text_ctx), "f32"),
          tensor("decoder.ln.weight", (d,), "f32"), tensor("decoder.ln.bias", (d,), "f32")]
    t += block("decoder", 0)
    p = "decoder.blocks.0."
    t += [tensor(p + "cross_attn_ln.weight", (d,), "f32"), tensor(p + "cross_attn_ln.bias", (d,), "f32"),
          tensor(p + "cross_attn.query.weight", (d, d), "mat"),
          tensor(p + "cross_attn.query.bias", (d,), "f32"),
          tensor(p + "cross_attn.key.weight", (d, d), "mat"),
          tensor(p + "cross_attn.value.weight", (d, d), "mat"),
          tensor(p + "cross_attn.value.bias", (d,), "f32"),
          tensor(p + "cross_attn.out.weight", (d, d), "mat"),
          tensor(p + "cross_attn.out.bias", (d,), "f32")]
    return b"".join(out + t)


def corpus_whisper():
    put("fuzz_whisper", "toy-f32.bin", whisper_file())
    put("fuzz_whisper", "toy-f16.bin", whisper_file(ftype=1, n_vocab=12, n_mels=2))
    put("fuzz_whisper", "toy-no-pieces.bin", whisper_file(pieces=[]))
    put("fuzz_whisper", "header-only.bin", whisper_file()[:60])


# ---- Silero VAD ------------------------------------------------------------------

def corpus_vad():
    real = os.path.join(SHARED, "models", "silero-vad", "silero-v6.2.0-ggml.bin")
    if os.path.exists(real):
        with open(real, "rb") as f:
            head = f.read(6144)
        put("fuzz_vad", "silero-head-2k.bin", b"\x00" + head[:2048])
        put("fuzz_vad", "silero-head-6k.bin", b"\x00" + head)
    else:
        print("make_corpus: no %s: VAD model seeds skipped" % real, file=sys.stderr)
    # segment rules: 16 parameter bytes, then one probability per byte
    speech = bytes([10] * 20 + [230] * 40 + [20] * 10 + [240] * 5 + [5] * 30 + [200] * 60)
    params_default = bytes([128, 0xE2, 0x04, 0x4C, 0x04, 255, 0x1E, 0x04, 55]) + bytes(7)
    put("fuzz_vad", "segments-default.bin", b"\x01" + params_default + speech)
    params_tight = bytes([100, 0xE8, 0x03, 0xE8, 0x03, 8, 0xE8, 0x03, 50]) + bytes(7)
    put("fuzz_vad", "segments-split.bin", b"\x01" + params_tight + speech * 3)


# ---- mmproj --------------------------------------------------------------------

def mmproj(w, family, ftype=GGML_F32):
    D, F, P = 4, 8, 2
    llava = family == "mlp"
    size = 4 if llava else 8
    n_block = 2 if llava else 1
    w.add("general.architecture", "clip")
    w.add("clip.projector_type", family)
    w.add("clip.has_llava_projector", llava)
    w.add("clip.vision.embedding_length", D)
    w.add("clip.vision.feed_forward_length", F)
    w.add("clip.vision.block_count", n_block)
    w.add("clip.vision.attention.head_count", 2)
    w.add("clip.vision.image_size", size)
    w.add("clip.vision.patch_size", P)
    w.add("clip.vision.image_mean", [0.5, 0.5, 0.5], elem_type=GGUF_FLOAT32)
    w.add("clip.vision.image_std", [0.25, 0.25, 0.25], elem_type=GGUF_FLOAT32)
    w.add("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add("clip.use_gelu", True)
    if not llava:
        w.add("clip.vision.projector.scale_factor", 2)
    n_pos = (size // P) ** 2 + (1 if llava else 0)

    def t(name, shape, matrix=False):
        a = rnd(shape, len(name) + 11)
        if matrix and ftype == GGML_F16:
            w.add_tensor(name, a.astype(np.float16), GGML_F16)
        else:
            w.add_tensor(name, a)
    t("v.patch_embd.weight", (D, 3, P, P), True)
    t("v.patch_embd.bias", (D,))
    if llava:
        t("v.class_embd", (D,))
    t("v.position_embd.weight", (n_pos, D))
    t("v.pre_ln.weight", (D,))
    t("v.pre_ln.bias", (D,))
    if not llava:
        t("v.post_ln.weight", (D,))
        t("v.post_ln.bias", (D,))
    for i in range(n_block - 1 if llava else n_block):
        b = "v.blk.%d." % i
        for n in ("ln1", "ln2"):
            t(b + n + ".weight", (D,))
            t(b + n + ".bias", (D,))
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t(b + n + ".weight", (D, D), True)
            t(b + n + ".bias", (D,))
        t(b + "ffn_up.weight", (F, D), True)
        t(b + "ffn_up.bias", (F,))
        t(b + "ffn_down.weight", (D, F), True)
        t(b + "ffn_down.bias", (D,))
    if llava:
        t("mm.0.weight", (8, D), True)
        t("mm.0.bias", (8,))
        t("mm.2.weight", (6, 8), True)
        t("mm.2.bias", (6,))
    else:
        t("mm.model.fc.weight", (6, D * 4), True)


def corpus_mmproj():
    put("fuzz_mmproj", "toy-llava-f32.gguf", gguf_bytes(lambda w: mmproj(w, "mlp")))
    put("fuzz_mmproj", "toy-llava-f16.gguf", gguf_bytes(lambda w: mmproj(w, "mlp", GGML_F16)))
    put("fuzz_mmproj", "toy-idefics3-f32.gguf", gguf_bytes(lambda w: mmproj(w, "idefics3")))


# ---- text: tokenizer, template, grammar, schema ----------------------------------

def corpus_text():
    texts = ["Hello world", " the  quick\tbrown\n\nfox!!", "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600",
             "<|im_start|>user\nhi<|im_end|>", "<s>[INST] 123 4567 [/INST]", "def f(x):\n    return x**2",
             "don't I'll WE'RE", "\u00a0\u2028 \r\n"]
    for i, t in enumerate(texts):
        put("fuzz_tokenizer", "text-%d" % i, bytes([i % 10, i % 4]) + t.encode())

    for name in ("qwen3", "llama3.1", "mistral-v0.3", "gemma3"):
        with open(os.path.join(ROOT, "tests", "fixtures", "templates", name + ".jinja"), "rb") as f:
            put("fuzz_template", name + ".jinja", f.read())
    put("fuzz_template", "features.jinja",
        "{%- macro show(m, sep=', ') -%}{{ m.role|upper }}{{ sep }}{{ m.content|trim }}{%- endmacro -%}\n"
        "{%- set ns = namespace(n=0) -%}\n"
        "{%- for m in messages if m.role != 'tool' -%}{%- set ns.n = ns.n + 1 -%}\n"
        "{{ loop.index }}/{{ loop.length }} {{ show(m) }}{% if not loop.last %}\n{% endif %}"
        "{%- else -%}none{%- endfor -%}\n"
        "{{ tools|tojson(indent=2) if tools is defined else '' }}"
        "{{ (messages|map(attribute='role')|list|join(','))|replace('user','U') }}"
        "{{ ns.n ~ ' ' ~ ('%05d'|format(ns.n)) }}{{ raise_exception('bad') if ns.n > 99 }}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    put("fuzz_template", "messages.jinja",
        b"{% for m in messages %}{{ m['content'] }}{% if m.tool_calls %}"
        b"{{ m.tool_calls[0].function.arguments|tojson }}{% endif %}{% endfor %}\x00"
        b"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null,"
        b"\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}]"
        b"\x00[]")

    grammars = {
        "json.gbnf": (
            'root ::= value\n'
            'value ::= object | array | string | number | ("true" | "false" | "null") ws\n'
            'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
            'array ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
            'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws\n'
            'number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n'
            'ws ::= | " " | "\\n" [ \\t]{0,20}\n', '{"a": [1, 2.5e3, "x\\u00e9"], "b": null}'),
        "arith.gbnf": ('root ::= expr\nexpr ::= term (("+" | "-") term)*\n'
                       'term ::= factor (("*" | "/") factor)*\nfactor ::= [0-9]+ | "(" expr ")"\n',
                       "(1+2)*34-5"),
        "repeat.gbnf": ('# counts and classes\nroot ::= "x"{2,4} [a-c]+ .? item{3}\n'
                        'item ::= [^\\n,] ","\n', "xxxabz1,2,3,"),
        "utf8.gbnf": ('root ::= ("\u00e9" | [\u4e00-\u9fff] | "\\u00e8")* "!"\n', "\u00e9\u65e5!"),
        "choice.gbnf": ('root ::= answer\nanswer ::= "yes" | "no" | "maybe" (" " reason)?\n'
                        'reason ::= [a-z ]{1,30}\n', "maybe because"),
    }
    for name, (g, text) in grammars.items():
        put("fuzz_grammar", name, g.encode() + b"\x00" + text.encode())

    schemas = {
        "object.json": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                                         "age": {"type": "integer", "minimum": 0,
                                                                 "maximum": 150}},
                        "required": ["name"], "additionalProperties": False},
        "array.json": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
        "enum-const.json": {"anyOf": [{"enum": ["a", 1, None, True]}, {"const": {"k": [1]}}]},
        "refs.json": {"$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}},
            "$ref": "#/$defs/node"},
        "strings.json": {"type": "object", "properties": {
            "id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date-time"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"},
            "tags": {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}}}},
        "mixed.json": {"type": ["string", "null", "number"], "exclusiveMinimum": 0},
        "allof.json": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                                 {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
    }
    for name, s in schemas.items():
        put("fuzz_json_schema", name, json.dumps(s))


# ---- multipart ---------------------------------------------------------------------

def form(boundary, parts, crlf=True, preamble=b"", epilogue=b""):
    nl = b"\r\n" if crlf else b"\n"
    out = [preamble]
    for name, filename, ctype, data in parts:
        out.append(b"--" + boundary + nl)
        disp = b'Content-Disposition: form-data; name="' + name + b'"'
        if filename is not None:
            disp += b'; filename="' + filename + b'"'
        out.append(disp + nl)
        if ctype:
            out.append(b"Content-Type: " + ctype + nl)
        out.append(nl + data + nl)
    out.append(b"--" + boundary + b"--" + nl + epilogue)
    return b"".join(out)


def wav(samples, rate=16000, channels=1, bits=16, fmt=1):
    """A RIFF WAVE file of the given integer (or float, fmt 3) samples."""
    if fmt == 3:
        data = struct.pack("<%df" % len(samples), *samples)
    elif bits == 16:
        data = struct.pack("<%dh" % len(samples), *samples)
    else:
        data = bytes((s + 128) & 255 for s in samples)
    block = channels * bits // 8
    fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt_chunk) + 8 + len(data)) + b"WAVE" +
            b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + b"data" + struct.pack("<I", len(data)) + data)


def tone(n, period=20, amp=8000):
    return [int(amp * math.sin(2 * math.pi * i / period)) for i in range(n)]


def corpus_multipart():
    b = b"XyZ123"
    fields = [(b"model", None, None, b"whisper-1"), (b"file", b"a.wav", b"audio/wav", wav(tone(64))),
              (b"response_format", None, None, b"verbose_json")]
    put("fuzz_multipart", "form-crlf", b"\x00multipart/form-data; boundary=XyZ123\x00" + form(b, fields))
    put("fuzz_multipart", "form-lf-tight", b"\x03multipart/form-data; boundary=\"q b\"\x00" +
        form(b"q b", fields[:1] + [(b"x", None, None, b"0123456789abcdefghij")], crlf=False))
    put("fuzz_multipart", "form-preamble", b"\x40Multipart/Form-Data;charset=utf-8;boundary=--a\x00" +
        form(b"--a", [(b"", b"", None, b""), (b"n\xc3\xa9", None, b"text/plain", b"--a-not-end")],
             preamble=b"ignored\r\n", epilogue=b"trailer"))


# ---- images -----------------------------------------------------------------------

def png(width, height, color_type, bit_depth, rows, palette=None, trns=None):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth,
                                                              color_type, 0, 0, 0))
    if palette:
        out += chunk(b"PLTE", palette)
    if trns:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def jpeg(width, height, components):
    """Baseline JPEG whose blocks are all zero coefficients, with one-symbol
    Huffman tables (DC category 0 = "0", AC end-of-block = "0"): every block
    codes as two 0 bits."""
    def seg(marker, data):
        return b"\xff" + bytes([marker]) + struct.pack(">H", len(data) + 2) + data
    out = b"\xff\xd8"
    out += seg(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    out += seg(0xDB, b"\x00" + bytes([1] * 64))
    comps = b"".join(bytes([i + 1, 0x11, 0]) for i in range(components))
    out += seg(0xC0, struct.pack(">BHHB", 8, height, width, components) + comps)
    table = bytes([1] + [0] * 15) + b"\x00"
    out += seg(0xC4, b"\x00" + table + b"\x10" + table)
    out += seg(0xDA, bytes([components]) + b"".join(bytes([i + 1, 0]) for i in range(components)) + b"\x00\x3f\x00")
    blocks = ((width + 7) // 8) * ((height + 7) // 8) * components
    bits = "00" * blocks
    bits += "1" * (-len(bits) % 8)
    data = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
    return out + data.replace(b"\xff", b"\xff\x00") + b"\xff\xd9"


def jpeg_exif(orientation):
    """The gray JPEG with an APP1 Exif block carrying an orientation tag."""
    tiff = b"MM\x00\x2a\x00\x00\x00\x08" + struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + b"\x00\x00\x00\x00"
    app1 = b"\xff\xe1" + struct.pack(">H", len(tiff) + 8) + b"Exif\x00\x00" + tiff
    j = jpeg(16, 8, 1)
    return j[:2] + app1 + j[2:]


def bmp(width, height):
    row = bytes((x * 40) & 255 for x in range(width * 3))
    row += b"\x00" * (-len(row) % 4)
    pixels = row * height
    header = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    return header + info + pixels


def tiff_rgb():
    """1x2 uncompressed RGB TIFF, little-endian."""
    entries = [(256, 3, 1, 1), (257, 3, 1, 2), (258, 3, 3, 8 + 2 + 9 * 12 + 4), (259, 3, 1, 1),
               (262, 3, 1, 2), (273, 4, 1, 8 + 2 + 9 * 12 + 4 + 6), (277, 3, 1, 3), (278, 3, 1, 2),
               (279, 4, 1, 6)]
    ifd = struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        ifd += struct.pack("<HHI", tag, typ, count) + (struct.pack("<HH", value, 0) if typ == 3 and count == 1
                                                       else struct.pack("<I", value))
    ifd += b"\x00\x00\x00\x00"
    return b"II\x2a\x00" + struct.pack("<I", 8) + ifd + struct.pack("<HHH", 8, 8, 8) + bytes([255, 0, 0, 0, 0, 255])


GIF_1X1 = bytes.fromhex("47494638396101000100800000ffffff00000021f90401000000002c00000000"
                        "010001000002024401003b")


def corpus_images():
    rgb_rows = [bytes([255, 0, 0, 0, 255, 0, 0, 0, 255]), bytes([10, 20, 30, 40, 50, 60, 70, 80, 90])]
    put("fuzz_image", "rgb-3x2.png", b"\x00" + png(3, 2, 2, 8, rgb_rows))
    put("fuzz_image", "rgba-2x2.png", b"\x00" + png(2, 2, 6, 8, [bytes([255, 0, 0, 0, 0, 0, 255, 128])] * 2))
    put("fuzz_image", "palette-trns.png", b"\x01" + png(4, 1, 3, 2, [bytes([0b00011011])],
                                                         palette=bytes([0, 0, 0, 255, 255, 255, 9, 99, 199,
                                                                        1, 2, 3]), trns=b"\x00\x80"))
    put("fuzz_image", "gray16.png", b"\x00" + png(2, 1, 0, 16, [b"\x12\x34\xff\xff"]))
    put("fuzz_image", "gray-8x8.jpg", b"\x00" + jpeg(8, 8, 1))
    put("fuzz_image", "color-16x8.jpg", b"\x00" + jpeg(16, 8, 3))
    put("fuzz_image", "exif-rot90.jpg", b"\x00" + jpeg_exif(6))
    put("fuzz_image", "rgb-3x2.bmp", b"\x00" + bmp(3, 2))
    put("fuzz_image", "one.gif", b"\x00" + GIF_1X1)
    put("fuzz_image", "rgb-1x2.tif", b"\x00" + tiff_rgb())


# ---- audio ---------------------------------------------------------------------------

def mp3_silence(frames=3):
    """MPEG-1 Layer III, 128 kb/s, 44.1 kHz, mono frames of zero side info and
    main data: they decode to silence."""
    header = bytes([0xFF, 0xFB, 0x90, 0xC0])
    return (header + bytes(417 - 4)) * frames


def corpus_audio():
    put("fuzz_audio", "s16-16k.wav", b"\x00" + wav(tone(800)))
    put("fuzz_audio", "s16-44k-stereo.wav", b"\x00" + wav(tone(600, 37), rate=44100, channels=2))
    put("fuzz_audio", "u8-8k.wav", b"\x00" + wav([s // 256 for s in tone(300)], rate=8000, bits=8))
    put("fuzz_audio", "f32-24k.wav", b"\x00" + wav([s / 32768 for s in tone(400, 13)], rate=24000,
                                                   bits=32, fmt=3))
    put("fuzz_audio", "silence.mp3", b"\x00" + mp3_silence())
    pcm = struct.pack("<%dh" % 480, *tone(480, 24))
    rate24k = (24000 - 4000) // 2
    put("fuzz_audio", "raw-s16-24k", bytes([0x80, rate24k & 255, rate24k >> 8]) + pcm)
    put("fuzz_audio", "resampler-s16-24k", bytes([0x82, rate24k & 255, rate24k >> 8]) + pcm)
    f32 = struct.pack("<%df" % 200, *[math.sin(i / 5) for i in range(200)])
    rate48k = (48000 - 4000) // 2
    put("fuzz_audio", "resampler-f32-48k", bytes([0x83, rate48k & 255, rate48k >> 8]) + f32)


# ---- the API -------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer", "minimum": 1}},
                   "required": ["city"]}}}]


def api(target, name, flags, model, body, gen=b"", extra=None):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    if isinstance(gen, str):
        gen = gen.encode()
    data = bytes([flags, model]) + body + b"\x00" + gen
    if extra is not None:
        data += b"\x00" + extra
    put(target, name, data)


def corpus_api():
    # model byte: 0 no template (SPM vocab); 1.. tests/fixtures/templates/*.jinja in name order
    # (1 deepseek-r1-distill, 2 gemma3, 3 llama3.1, 4 llama3.2, 5 mistral-v0.3, 6 phi4-mini, 7 phi4,
    # 8 qwen2.5, 9 qwen3, 10 smollm2, 11 smollm3)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    api("fuzz_api_chat", "plain", 0, 8, {"model": "fuzz-model", "messages": msgs, "max_tokens": 16},
        "Hello! How can I help?")
    api("fuzz_api_chat", "stream-n2-logprobs", 0, 9,
        {"messages": msgs, "stream": True, "stream_options": {"include_usage": True}, "n": 2,
         "logprobs": True, "top_logprobs": 2, "temperature": 0.7, "seed": 3, "stop": ["\n\n"]},
        "<think>short</think>Hello \u00e9t\u00e9")
    api("fuzz_api_chat", "tools-auto", 0, 9,
        {"messages": msgs, "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": True},
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
    api("fuzz_api_chat", "tools-required-stream", 0, 8,
        {"messages": msgs, "tools": TOOLS, "tool_choice": {"type": "function",
                                                           "function": {"name": "get_weather"}},
         "stream": True},
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\",\"days\":2}}</tool_call>")
    history = msgs + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                           "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}]
    api("fuzz_api_chat", "tool-history", 0, 3, {"messages": history, "tools": TOOLS}, "Sunny.")
    api("fuzz_api_chat", "json-schema", 0, 11,
        {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "w", "strict": True, "schema": TOOLS[0]["function"]["parameters"]}}},
        "{\"city\": \"Oslo\"}")
    api("fuzz_api_chat", "reasoning-budget", 4, 9,
        {"messages": msgs, "reasoning_effort": "minimal", "chat_template_kwargs": {"enable_thinking": True},
         "max_completion_tokens": 64}, "<think>" + "hmm " * 40)
    api("fuzz_api_chat", "grammar-busy", 1, 0, {"messages": msgs, "grammar": "root ::= \"yes\" | \"no\""})
    api("fuzz_api_chat", "keyed-client-leaves", 8 | 16 | 3, 5,
        {"messages": msgs, "stream": True, "max_tokens": 32}, "[TOOL_CALLS][{\"name\":\"x\"}]")

    api("fuzz_api_completions", "prompt", 0, 8, {"prompt": "Once upon a time", "max_tokens": 8,
                                                 "echo": True, "logprobs": 2}, " there was")
    api("fuzz_api_completions", "token-prompt-stream", 0, 1,
        {"prompt": [[1, 2, 200, 5]], "stream": True, "logit_bias": {"5": -100}, "best_of": 1},
        "abc")
    api("fuzz_api_completions", "refused", 2, 3, {"prompt": "x" * 300, "grammar": "root ::= [a-z]+"})
    api("fuzz_api_completions", "tokenize", 128, 8, {"prompt": "<|im_start|>hi", "add_special_tokens": False})
    api("fuzz_api_completions", "tokenize-messages", 128, 10, {"messages": msgs})
    api("fuzz_api_completions", "detokenize", 128, 9, {"tokens": [72, 101, 108, 108, 111, 259]})

    amsgs = [{"role": "user", "content": "Weather?"}]
    atools = [{"name": "get_weather", "description": "w", "input_schema": TOOLS[0]["function"]["parameters"]}]
    api("fuzz_api_messages", "plain", 0, 9, {"model": "m", "max_tokens": 32, "system": "Be brief.",
                                             "messages": amsgs}, "Sunny and warm.")
    api("fuzz_api_messages", "tools-stream", 0, 9,
        {"max_tokens": 64, "stream": True, "tools": atools, "tool_choice": {"type": "auto"},
         "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": amsgs},
        "<think>need tool</think><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Lima\"}}</tool_call>")
    api("fuzz_api_messages", "tool-result-blocks", 4, 8,
        {"max_tokens": 16, "stop_sequences": ["END"], "messages": amsgs + [
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Lima"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "18C"}]}]}],
         "tools": atools, "tool_choice": {"type": "tool", "name": "get_weather"}},
        "{\"city\":\"Lima\"}")
    api("fuzz_api_messages", "count-tokens", 128, 3, {"system": [{"type": "text", "text": "s"}],
                                                      "messages": amsgs, "tools": atools})

    wav_small = wav(tone(160))
    for i, (flags, fields) in enumerate([
            (0, [(b"file", b"a.wav", b"audio/wav", wav_small), (b"model", None, None, b"whisper-1")]),
            (0, [(b"file", b"a.wav", None, wav_small), (b"response_format", None, None, b"verbose_json"),
                 (b"timestamp_granularities[]", None, None, b"word"), (b"language", None, None, b"de"),
                 (b"temperature", None, None, b"0.2"), (b"prompt", None, None, b"Names: Jo")]),
            (3, [(b"file", b"a.mp3", b"audio/mpeg", mp3_silence(1)), (b"stream", None, None, b"true")]),
            (1 | 128, [(b"file", b"b.wav", None, wav_small), (b"response_format", None, None, b"srt")])]):
        ctype = b"multipart/form-data; boundary=Bnd7"
        put("fuzz_api_transcription", "form-%d" % i, bytes([flags, 0]) + ctype + b"\x00" + form(b"Bnd7", fields))

    def rt(name, flags, events, reply=b"", model=0):
        """flags, model, the model's reply for every response, then the events."""
        data = bytes([flags, model]) + reply + b"\x00" + b"\x00".join(
            e if isinstance(e, bytes) else json.dumps(e).encode() for e in events)
        put("fuzz_api_realtime", name, data)
    import base64

    def audio(n):
        return base64.b64encode(struct.pack("<%dh" % n, *tone(n))).decode()
    # a commit needs 100 ms of audio at the session's rate
    rt("commit-no-vad", 0, [
        {"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16", "input_audio_sample_rate": 8000, "input_audio_transcription":
                {"model": "whisper-1", "language": "en", "prompt": "hi"},
            "turn_detection": None}},
        {"type": "input_audio_buffer.append", "audio": audio(900), "event_id": "e1"},
        {"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.clear"}])
    rt("server-vad-ga", 64, [
        {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000},
            "turn_detection": {"type": "server_vad", "threshold": 0.4, "silence_duration_ms": 300,
                               "prefix_padding_ms": 200}}}}},
        {"type": "input_audio_buffer.append", "audio": audio(1700)}, {"type": "input_audio_buffer.commit"}])
    rt("bad-events", 64, [b"\x01binary", b"not json", {"type": "response.create"},
                          {"type": "input_audio_buffer.append", "audio": "@@@"},
                          {"type": "transcription_session.update", "session": {"input_audio_format": "g711"}}])
    # conversations (no intent): the reply is what the model says to every response
    rtools = [{"type": "function", "name": "get_weather", "description": "w",
               "parameters": TOOLS[0]["function"]["parameters"]}]
    user = {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}}
    rt("conv-text", 128 | 64, [
        {"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief.",
                                               "output_modalities": ["text"], "tools": rtools}},
        user, {"type": "response.create"}, {"type": "conversation.item.retrieve", "item_id": "x"}],
        reply=b"It is sunny.", model=9)
    rt("conv-function-call", 128 | 64, [
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"],
                                               "tools": rtools, "tool_choice": "auto"}},
        user, {"type": "response.create", "response": {"max_output_tokens": 64}},
        {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_1",
                                                      "output": "{\"temp\": 21}"}},
        {"type": "response.create"}, {"type": "conversation.item.delete", "item_id": "item_1"}],
        reply=b"<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>",
        model=9)
    rt("conv-beta-audio-in", 128 | 64, [
        {"type": "session.update", "session": {"modalities": ["text"], "input_audio_format": "pcm16",
                                               "turn_detection": {"type": "server_vad"}}},
        {"type": "input_audio_buffer.append", "audio": audio(2500)}, {"type": "input_audio_buffer.commit"},
        {"type": "response.cancel"},
        {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0, "audio_end_ms": 10}],
        reply=b"Hello there, friend.", model=8)

    routes = [(b"GET /v1/models", b""), (b"GET /v1/models/fuzz-model", b""), (b"GET /health", b""),
              (b"GET /metrics", b""), (b"POST /v1/requests/chatcmpl-1/cancel", b""),
              (b"DELETE /v1/chat/completions", b"{}"), (b"GET /nowhere?x=1", b""),
              (b"POST /v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())]
    for i, (line, body) in enumerate(routes):
        put("fuzz_api_routes", "route-%d" % i, bytes([8 if i % 3 == 0 else 0, 8]) + line + b"\x00" + body + b"\x00ok")


# ---- WebSocket frames -------------------------------------------------------------

def corpus_responses():
    # byte 0 bit 7: then GET/DELETE /v1/responses/{id} with the id after the second NUL
    rtool = {"type": "function", "name": "get_weather", "strict": True,
             "parameters": TOOLS[0]["function"]["parameters"]}
    api("fuzz_api_responses", "plain", 0, 8,
        {"model": "m", "instructions": "Be brief.", "input": "Hi there", "max_output_tokens": 16},
        "Hello!", b"resp_000000000000000000000000")
    api("fuzz_api_responses", "items-stream", 128, 9,
        {"input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "A"}]},
                   {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                   {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
                   {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                    "arguments": "{\"city\":\"Oslo\"}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "21C"}],
         "tools": [rtool, {"type": "namespace", "name": "ns", "tools": [rtool]}],
         "stream": True, "reasoning": {"effort": "low", "summary": "auto"}},
        "<think>hmm</think>Sunny. <tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call>",
        b"x/input_items")
    api("fuzz_api_responses", "forced-json", 4, 8,
        {"input": "x", "tools": [rtool], "tool_choice": {"type": "function", "name": "get_weather"},
         "parallel_tool_calls": False, "text": {"format": {"type": "json_schema", "name": "w",
                                                           "schema": rtool["parameters"]}}},
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>")
    api("fuzz_api_responses", "builtin-tool", 0, 3,
        {"input": "x", "tools": [{"type": "web_search"}], "previous_response_id": "resp_nope"})


def ws_frame(opcode, payload, fin=True, mask=b"\x01\x02\x03\x04", masked=True):
    """One client frame: FIN, opcode, length (7 / 16 / 64 bit), mask, payload."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    mbit = 0x80 if masked else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack(">Q", n)
    if not masked:
        return head + payload
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def corpus_ws():
    put("fuzz_ws_socket", "text", b"\x00" + ws_frame(1, b'{"type":"input_audio_buffer.commit"}'))
    put("fuzz_ws_socket", "fragmented-ping-between", b"\x04" + ws_frame(1, b"hel", fin=False) +
        ws_frame(9, b"ping!") + ws_frame(0, b"lo ", fin=False) + ws_frame(0, b"world"))
    put("fuzz_ws_socket", "binary-16bit-offload", b"\x09" + ws_frame(2, bytes(range(256)) * 2) +
        ws_frame(1, b"after"))
    put("fuzz_ws_socket", "close-1000", b"\x10" + ws_frame(1, b"a") + ws_frame(1, b"b") +
        ws_frame(8, struct.pack(">H", 1000) + b"done") + ws_frame(1, b"ignored"))
    put("fuzz_ws_socket", "unmasked", b"\x00" + ws_frame(1, b"no mask", masked=False))
    put("fuzz_ws_socket", "len64-pong", b"\xfc" + ws_frame(10, b"") +
        ws_frame(1, b"x" * 70000)[:40])


def main():
    corpus_ws()
    corpus_gguf()
    corpus_whisper()
    corpus_vad()
    corpus_mmproj()
    corpus_text()
    corpus_multipart()
    corpus_images()
    corpus_audio()
    corpus_api()
    corpus_responses()
    print("make_corpus: %d seeds under %s" % (written, os.path.relpath(CORPUS, ROOT)))


if __name__ == "__main__":
    main()
