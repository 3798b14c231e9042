#!/usr/bin/env python3
"""Builds the text-encoder zoo of tests/data/text_zoo on a host with torch, transformers,
sentence-transformers, tokenizers and onnxruntime (nothing downloaded: tokenizers are trained here on
a small corpus, encoders are tiny configurations with random weights).

    PYTHONUNBUFFERED=1 python3 data_tools/export_text_zoo.py OUTDIR [--only NAME,...] [--full]

For each encoder it writes a sentence-transformers model folder (config.json, model.safetensors,
tokenizer.json, modules.json, 1_Pooling/config.json, sentence_bert_config.json), exports the
transformer to ONNX the way users do (`torch.onnx.export` of the model on input_ids and
attention_mask, and token_type_ids where the model takes them, batch and sequence axes dynamic; with
the dynamo exporter and with the TorchScript one), and computes the references on a hostile corpus
(passages.jsonl): sentence-transformers' `encode` in float64 and float32 on the CPU, and on a GPU
float32 and bfloat16 (each normalised), plus onnxruntime's last_hidden_state for each export.

--full makes BERT-base, MiniLM-L6, XLM-R base and RoBERTa base sized encoders instead (hundreds of
MB each: for the GPU host, never committed).
"""
import argparse
import json
import os
import shutil
import sys
import time
import traceback

MAX_LEN = 64  # max_seq_length of the tiny encoders (the corpus has passages longer than that)


def corpus():
    """Passages a tokenizer and an encoder must survive (and a few ordinary ones)."""
    p = [
        "The quick brown fox jumps over the lazy dog.",
        "query: how many people live in Berlin?",
        "Sluice stores every output; a resumed run gives the same bytes.",
        "",
        "   ",
        "naïve café résumé — déjà vu",
        "Cafe\u0301 with a combining accent, and A\u030a",
        "北京是中华人民共和国的首都。東京都は日本の首都です。",
        "서울은 대한민국의 수도이다.",
        "مرحبا بالعالم، هذه جملة من اليمين إلى اليسار",
        "שלום עולם",
        "emoji 👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs",
        "tab\tand\x07bell\x1b and \x00NUL inside",
        "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ and ﬁ ligature",
        "x" * 3000,
        " ".join(["word"] * 200),
        "UPPER lower MiXeD 12345 3.14159 1,000,000",
        "e-mail: someone@example.com, url: https://example.com/a?b=c&d=e",
        "Ελληνικά κείμενα με τόνους",
        "Привет, мир! Это тест.",
        "हिन्दी में एक वाक्य",
        "ภาษาไทยไม่มีช่องว่าง",
        "\u200b\u200c\u200d zero widths \ufeff",
        "a",
        "punctuation!!! ??? ... ;;; (((brackets)))",
    ]
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
    import random
    rnd = random.Random(7)
    for i in range(15):
        p.append(" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 70))))
    return p


def training_text():
    base = corpus()
    import random
    rnd = random.Random(3)
    extra = []
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "qua", "ber", "lin", "ton", "ing", "ed", "er"]
    for _ in range(3000):
        extra.append(" ".join("".join(rnd.choice(syll) for _ in range(rnd.randint(1, 4))) for _ in range(rnd.randint(4, 20))))
    return base * 3 + extra


def wordpiece(d, lowercase=True):
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(lowercase=lowercase)
    tok.train_from_iterator(training_text(), vocab_size=1200, min_frequency=1)
    from tokenizers.processors import BertProcessing  # set at construction only when a vocabulary is given
    tok.post_processor = BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.save(os.path.join(d, "tokenizer.json"))
    from transformers import PreTrainedTokenizerFast
    ht = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), unk_token="[UNK]", pad_token="[PAD]",
                                 cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=512,
                                 model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    return ht


def unigram(d):
    from tokenizers import SentencePieceUnigramTokenizer
    from tokenizers.processors import TemplateProcessing
    tok = SentencePieceUnigramTokenizer()
    tok.train_from_iterator(training_text(), vocab_size=1500, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                            unk_token="<unk>")
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                            special_tokens=[("<s>", s), ("</s>", e)])
    tok.save(os.path.join(d, "tokenizer.json"))
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>", cls_token="<s>", sep_token="</s>",
                                   mask_token="<mask>", model_max_length=512)


def bytelevel_bpe(d):
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(training_text(), vocab_size=1500, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                           trim_offsets=True, add_prefix_space=False)
    tok.save(os.path.join(d, "tokenizer.json"))
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>", cls_token="<s>", sep_token="</s>",
                                   mask_token="<mask>", model_max_length=512)


def tiny(**k):
    return dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=128, **k)


# name: (model class, tokenizer maker, config, pooling mode, normalize, token_type_ids)
TINY = {
    "bert_mean": ("BertModel", wordpiece, tiny(), "mean", True),
    "bert_cls": ("BertModel", wordpiece, tiny(), "cls", True),
    "bert_max": ("BertModel", wordpiece, tiny(), "max", False),
    "bert_last": ("BertModel", wordpiece, tiny(), "lasttoken", True),
    "xlmr_mean": ("XLMRobertaModel", unigram, tiny(pad_token_id=1, type_vocab_size=1), "mean", True),
    "roberta_mean": ("RobertaModel", bytelevel_bpe, tiny(pad_token_id=1, type_vocab_size=1), "mean", True),
}
FULL = {
    "bert_base": ("BertModel", wordpiece, {}, "cls", True),
    "minilm_l6": ("BertModel", wordpiece, dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536), "mean", True),
    "xlmr_base": ("XLMRobertaModel", unigram, dict(pad_token_id=1, type_vocab_size=1, max_position_embeddings=514), "mean", True),
    "roberta_base": ("RobertaModel", bytelevel_bpe, dict(pad_token_id=1, type_vocab_size=1, max_position_embeddings=514), "mean", True),
}


def build(name, spec, out, full, exporters=("torchscript", "dynamo")):
    import numpy as np
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer, models
    cls_name, make_tok, cfg, pooling, normalize = spec
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ht = make_tok(d)
    # transformers 5's PreTrainedTokenizerFast rebuilds the post-processor from bos/eos settings (a
    # BERT tokenizer then loses [CLS] ... [SEP]): put the trained one back, as the model's own
    # tokenizer class would have it.
    from tokenizers import Tokenizer
    ht._tokenizer.post_processor = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).post_processor
    assert len(ht("")["input_ids"]) == 2, ht("")
    cfg_cls = getattr(transformers, cls_name.replace("Model", "Config"))
    config = cfg_cls(vocab_size=len(ht), **cfg)
    torch.manual_seed(sum(map(ord, name)))
    model = getattr(transformers, cls_name)(config, add_pooling_layer=False).eval()
    with torch.no_grad():  # random weights that make outputs differ between passages
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    hf_dir = os.path.join(d, "hf")
    model.save_pretrained(hf_dir)
    ht.save_pretrained(hf_dir)
    max_len = 512 if full else MAX_LEN
    tr = models.Transformer(hf_dir, max_seq_length=max_len)
    pool = models.Pooling(tr.get_word_embedding_dimension(), pooling_mode=pooling)
    mods = [tr, pool] + ([models.Normalize()] if normalize else [])
    st = SentenceTransformer(modules=mods, device="cpu")
    st_dir = os.path.join(d, "st")
    st.save(st_dir)
    passages = corpus()
    with open(os.path.join(d, "passages.jsonl"), "w") as f:
        for i, t in enumerate(passages):
            f.write(json.dumps({"id": f"p{i:03d}", "text": t}, ensure_ascii=False) + "\n")
    refs = {}
    st64 = SentenceTransformer(st_dir, device="cpu")
    st64.to(torch.float64)
    refs["st_cpu_fp64"] = st64.encode(passages, batch_size=8, convert_to_numpy=True).astype(np.float64)
    st32 = SentenceTransformer(st_dir, device="cpu")
    refs["st_cpu_fp32"] = st32.encode(passages, batch_size=8, convert_to_numpy=True)
    if torch.cuda.is_available():
        stc = SentenceTransformer(st_dir, device="cuda")
        refs["st_cuda_fp32"] = stc.encode(passages, batch_size=8, convert_to_numpy=True)
        stb = SentenceTransformer(st_dir, device="cuda", model_kwargs={"torch_dtype": torch.bfloat16})
        refs["st_cuda_bf16"] = stb.encode(passages, batch_size=8, convert_to_tensor=True).float().cpu().numpy()
    enc = ht(passages, truncation=True, max_length=max_len)
    ids = enc["input_ids"]
    refs["lengths"] = np.array([len(x) for x in ids], np.int64)
    # The exports: the transformer alone, as users export an encoder for a runtime.
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if cls_name == "BertModel" else [])
    b = ht(passages[:2], padding=True, return_tensors="pt")
    args = tuple(b[k] for k in inputs)
    info = {"model": name, "class": cls_name, "pooling": pooling, "normalize": normalize, "inputs": inputs,
            "params": int(sum(p.numel() for p in model.parameters())), "tokenizer": type(ht.backend_tokenizer.model).__name__,
            "exports": {}}

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class Wrap3(Wrap):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    w = (Wrap3 if len(inputs) == 3 else Wrap)(model).eval()
    for exporter in exporters:
        path = os.path.join(d, f"model.{exporter}.onnx")
        try:
            with torch.no_grad():
                if exporter == "dynamo":
                    B, L = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_len)
                    torch.onnx.export(w, args, path, dynamo=True, input_names=inputs, output_names=["last_hidden_state"],
                                      dynamic_shapes={k: {0: B, 1: L} for k in inputs})
                else:
                    torch.onnx.export(w, args, path, dynamo=False, opset_version=17, input_names=inputs,
                                      output_names=["last_hidden_state"],
                                      dynamic_axes={**{k: {0: "batch", 1: "sequence"} for k in inputs},
                                                    "last_hidden_state": {0: "batch", 1: "sequence"}})
            import onnx
            m = onnx.load(path)
            for n in m.graph.node:  # the dynamo exporter's source stack traces: most of a tiny model's bytes
                del n.metadata_props[:]
                n.doc_string = ""
            onnx.save(m, path, save_as_external_data=False)
            for extra in os.listdir(d):
                if extra.endswith(".data"):
                    os.remove(os.path.join(d, extra))
            ops = {}
            for n in m.graph.node:
                ops[n.op_type] = ops.get(n.op_type, 0) + 1
            import onnxruntime as ort
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = ht(passages[:6], padding=True, truncation=True, max_length=max_len, return_tensors="np")
            o = sess.run(None, {k: feed[k].astype(np.int64) for k in inputs})[0]
            with torch.no_grad():
                t = w(*[torch.from_numpy(feed[k].astype(np.int64)) for k in inputs]).numpy()
            info["exports"][exporter] = {"status": "ok", "bytes": os.path.getsize(path), "opset": m.opset_import[0].version,
                                         "ops": ops, "ort_vs_torch": float(np.abs(o - t).max())}
        except Exception as e:  # noqa: BLE001  reported, not fatal
            info["exports"][exporter] = {"status": "failed", "error": f"{type(e).__name__}: {str(e)[:300]}",
                                         "trace": traceback.format_exc()[-1200:]}
    np.savez(os.path.join(d, "ref.npz"), **refs)
    # The folder a user points Sluice at: the ST folder with the ONNX files beside it.
    for f in os.listdir(st_dir):
        src = os.path.join(st_dir, f)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(d, f), dirs_exist_ok=True)
        elif f not in ("model.safetensors",) or full:
            shutil.copy(src, os.path.join(d, f))
    shutil.rmtree(st_dir)
    if not full:
        shutil.rmtree(hf_dir)
        for f in ("model.safetensors",):
            if os.path.exists(os.path.join(d, f)):
                os.remove(os.path.join(d, f))
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(info, f, indent=1)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--exporters", default="torchscript,dynamo")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    zoo = FULL if a.full else TINY
    for name, spec in zoo.items():
        if a.only and name not in a.only.split(","):
            continue
        t = time.time()
        try:
            info = build(name, spec, a.out, a.full, tuple(a.exporters.split(",")))
            ex = {k: (v["status"], v.get("error", ""), v.get("ort_vs_torch")) for k, v in info["exports"].items()}
            print(f"{name}: {time.time() - t:.1f}s {ex}", flush=True)
            for k, v in info["exports"].items():
                if v["status"] != "ok":
                    print(v.get("trace", ""), flush=True)
        except Exception:  # noqa: BLE001
            print(f"{name}: FAILED\n{traceback.format_exc()[-2000:]}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
