#!/usr/bin/python3
"""make_embed_golden.py - tiny Hugging Face models behind the embedding golden tests.

    python3 tools/make_embed_golden.py --out tests/fixtures/golden_embed

Needs torch, transformers and tokenizers (run it on a machine that has them;
the tests only need the committed output). Cases, each in OUT/<case>/:

  bert       BertModel with a WordPiece tokenizer.json (lowercase, accents
             stripped) and sentence-transformers modules.json +
             1_Pooling/config.json (mean pooling). reference.json: texts (one
             over 100 tokens), their ids and type ids from the HF tokenizer,
             and per text the L2-normalized CLS and masked-mean vectors of the
             last hidden state (run as one padded batch).
  bert_rank  BertForSequenceClassification (num_labels 1, the pooler and the
             classifier), same tokenizer; reference.json: (query, document)
             pairs, their ids/type ids and the raw logit of each pair.
  qwen3      Qwen3ForCausalLM (tied embeddings) used as an embedder, with a
             sentence-transformers last-token pooling config. reference.json:
             prompts (each ending in <|endoftext|>, as Qwen3-Embedding
             tokenizes), ids, the final-norm hidden state at the last position
             and its mean over positions (both raw, not normalized), and a
             Qwen3-Reranker style yes/no case: the prompt, its ids, and the
             logits of "yes" and "no" at the last position.

Weights are drawn larger than the HF initialiser would (norm gains and biases
away from 1 and 0) so that every term of the forward pass moves the outputs;
the reference runs in float32 with eager attention on the stored values.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, decoders
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402  (byte-level BPE builder for the Qwen vocabulary)

WORDS = """the quick brown fox jumps over lazy dog hello world a is of and to in it
that for on with as was at by be this are or from an but not what all were when we
there can more if no out so said up its about into than them only other new some
could time these two may then do first any my now such like our over man me even
most made after also did many before must through back years where much your way
well down should because each just those people how too little state good very make
search query document embedding vector model rank score text retrieval passage café""".split()

TEXTS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait, SEARCH queries & embeddings: 42 vectors",
    " ".join(["the retrieval model ranks each passage by its score"] * 12) + " done.",
]
PAIRS = [
    ("what is a fox?", "The quick brown fox jumps over the lazy dog."),
    ("what is a fox?", "Embedding vectors rank documents."),
    ("search query", "A search query finds the document with the best score."),
]


def wordpiece_tokenizer():
    """A small uncased BERT vocabulary: specials, single characters and their
    ## forms, then whole words; BertNormalizer + BertPreTokenizer + [CLS]/[SEP]."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,!?&:;'-"))
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for c in chars:
        vocab.setdefault("##" + c, len(vocab))
    for w in WORDS:
        w = w.replace("é", "e")
        vocab.setdefault(w, len(vocab))
    for piece in ["##s", "##ing", "##ed", "##er", "##ly", "##es"]:
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]",
                                   pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    return tok, fast


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name.lower()):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def bert_config(n_vocab, **kw):
    return transformers.BertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64,
                                   max_position_embeddings=160, type_vocab_size=2,
                                   hidden_act="gelu", layer_norm_eps=1e-12,
                                   initializer_range=0.15, pad_token_id=0, **kw)


def save_dir(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__}


def check_reload(cls, d, fn, ref):
    again = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    got = fn(again)
    if not np.allclose(got, ref, atol=0, rtol=0):
        raise RuntimeError(f"{d}: reloaded model differs by {np.abs(got - ref).max()}")


def case_bert(out, seed):
    d = os.path.join(out, "bert")
    save_dir(d)
    tok, fast = wordpiece_tokenizer()
    torch.manual_seed(seed)
    cfg = bert_config(tok.get_vocab_size(), architectures=["BertModel"])
    cfg._attn_implementation = "eager"
    model = transformers.BertModel(cfg, add_pooling_layer=False).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    enc = fast(TEXTS, padding=True, return_tensors="pt")

    def run(m):
        with torch.no_grad():
            h = m(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        cls = torch.nn.functional.normalize(h[:, 0], dim=-1)
        mean = torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1)
        return np.concatenate([cls.numpy(), mean.numpy()], axis=1)

    ref = run(model)
    model.save_pretrained(d)
    fast.save_pretrained(d)
    check_reload(transformers.BertModel, d, run, ref)
    write_json(os.path.join(d, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    os.makedirs(os.path.join(d, "1_Pooling"))
    write_json(os.path.join(d, "1_Pooling", "config.json"), {
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_lasttoken": False})
    H = cfg.hidden_size
    cases = []
    for i, t in enumerate(TEXTS):
        n = int(enc["attention_mask"][i].sum())
        cases.append({"text": t, "ids": enc["input_ids"][i][:n].tolist(),
                      "cls": ref[i, :H].tolist(), "mean": ref[i, H:].tolist()})
    write_json(os.path.join(d, "reference.json"), {"cases": cases, "hidden": H, "seed": seed,
                                                   **versions()})
    print(f"bert: lengths {[len(c['ids']) for c in cases]}", file=sys.stderr)


def case_bert_rank(out, seed):
    d = os.path.join(out, "bert_rank")
    save_dir(d)
    tok, fast = wordpiece_tokenizer()
    torch.manual_seed(seed)
    cfg = bert_config(tok.get_vocab_size(), num_labels=1,
                      architectures=["BertForSequenceClassification"])
    cfg._attn_implementation = "eager"
    model = transformers.BertForSequenceClassification(cfg).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    enc = fast([q for q, _ in PAIRS], [p for _, p in PAIRS], padding=True, return_tensors="pt",
               return_token_type_ids=True)

    def run(m):
        with torch.no_grad():
            return m(**enc).logits.float().numpy()

    ref = run(model)
    model.save_pretrained(d)
    fast.save_pretrained(d)
    check_reload(transformers.BertForSequenceClassification, d, run, ref)
    cases = []
    for i, (q, p) in enumerate(PAIRS):
        n = int(enc["attention_mask"][i].sum())
        cases.append({"query": q, "document": p, "ids": enc["input_ids"][i][:n].tolist(),
                      "type_ids": enc["token_type_ids"][i][:n].tolist(),
                      "score": float(ref[i, 0])})
    write_json(os.path.join(d, "reference.json"), {"cases": cases, "seed": seed, **versions()})
    print(f"bert_rank: scores {[c['score'] for c in cases]}", file=sys.stderr)


QWEN_PROMPTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.",
                "Instruct: Given a query, find the passage\nQuery: lazy dog"]
RERANK_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on "
                 "the Query and the Instruct provided. Note that the answer can only be \"yes\" or "
                 "\"no\".<|im_end|>\n<|im_start|>user\n")
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
RERANK_DOCS = ["The quick brown fox jumps over the lazy dog.", "Hello world, over and over."]


def case_qwen3(out, seed):
    d = os.path.join(out, "qwen3")
    save_dir(d)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = make_golden.bytelevel_tokenizer(60, make_golden.QWEN2_RE, specials)
    for w in ("yes", "no"):
        if tok.token_to_id(w) is None:
            tok.add_tokens([w])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    n = (tok.get_vocab_size() + 31) // 32 * 32
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=n, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                   tie_word_embeddings=True, head_dim=16,
                                   eos_token_id=tok.token_to_id("<|im_end|>"),
                                   **dict(make_golden.BASE, max_position_embeddings=512))
    cfg._attn_implementation = "eager"
    model = transformers.Qwen3ForCausalLM(cfg).float().eval()
    randomize(model, torch.Generator().manual_seed(seed + 1))
    eot = tok.token_to_id("<|endoftext|>")
    prompts = [tok.encode(p).ids + [eot] for p in QWEN_PROMPTS]
    yes, no = tok.token_to_id("yes"), tok.token_to_id("no")
    rr = [RERANK_PREFIX + "<Instruct>: Given a web search query, retrieve relevant passages that "
          "answer the query\n<Query>: what is a fox?\n<Document>: " + doc + RERANK_SUFFIX
          for doc in RERANK_DOCS]
    rr_ids = [tok.encode(p).ids for p in rr]

    def run(m):
        rows = []
        with torch.no_grad():
            for ids in prompts:
                h = m.model(torch.tensor([ids])).last_hidden_state[0].float()
                rows.append(np.concatenate([h[-1].numpy(), h.mean(0).numpy()]))
            for ids in rr_ids:
                lg = m(torch.tensor([ids])).logits[0, -1].float().numpy()
                rows.append(np.concatenate([lg[[yes, no]], np.zeros(2 * cfg.hidden_size - 2)]))
        return np.stack(rows)

    ref = run(model)
    model.save_pretrained(d)
    fast.save_pretrained(d)
    check_reload(transformers.Qwen3ForCausalLM, d, run, ref)
    tc_path = os.path.join(d, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    tc["add_bos_token"] = False
    write_json(tc_path, tc)
    write_json(os.path.join(d, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    os.makedirs(os.path.join(d, "1_Pooling"))
    write_json(os.path.join(d, "1_Pooling", "config.json"), {
        "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_lasttoken": True})
    H = cfg.hidden_size
    emb = [{"text": p, "ids": ids, "last": ref[i, :H].tolist(), "mean": ref[i, H:].tolist()}
           for i, (p, ids) in enumerate(zip(QWEN_PROMPTS, prompts))]
    rank = [{"prompt": p, "ids": ids, "yes_id": yes, "no_id": no,
             "logit_yes": float(ref[len(prompts) + i, 0]), "logit_no": float(ref[len(prompts) + i, 1])}
            for i, (p, ids) in enumerate(zip(rr, rr_ids))]
    write_json(os.path.join(d, "reference.json"), {"embed": emb, "rerank": rank, "hidden": H,
                                                   "seed": seed, **versions()})
    with open(os.path.join(d, "README"), "w") as f:
        f.write("Tiny random Qwen3ForCausalLM (tied embeddings) as an embedder and a yes/no reranker, "
                "made by tools/make_embed_golden.py.\nreference.json: embed[] = prompt, ids (ending in "
                "<|endoftext|>), last = final-norm hidden state at the last position, mean = its mean "
                "over positions (raw, not normalized); rerank[] = Qwen3-Reranker prompt, ids, logits "
                "of the 'yes' and 'no' tokens at the last position.\n")
    print(f"qwen3: lengths {[len(p) for p in prompts]}, rerank {[len(p) for p in rr_ids]}",
          file=sys.stderr)


CASES = {"bert": case_bert, "bert_rank": case_bert_rank, "qwen3": case_qwen3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    args = ap.parse_args()
    print(" ".join(f"{k} {v}" for k, v in versions().items()), file=sys.stderr)
    torch.set_num_threads(1)
    failed = []
    for i, name in enumerate(args.case or CASES):
        try:
            CASES[name](args.out, 4321 + 10 * i)
        except Exception as e:
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {e}")
    if failed:
        sys.exit("make_embed_golden: failed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
