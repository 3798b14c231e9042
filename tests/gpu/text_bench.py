#!/usr/bin/env python3
"""Text embeddings at speed, on the GPU host, beside sentence-transformers in the same call (issue 40).

The corpus, tokenizer and models are the anchor's (../shared/bench/text_anchor.py, kept here as
tests/gpu/text_anchor.py): a synthetic corpus of web-like passage lengths (log-normal around 55 words,
3 to 400), a WordPiece tokenizer trained on it, random-weight BERT-base and MiniLM-L6.  For each model:

  1. sentence-transformers `encode`, bf16, batch 256 (and 32 with --st-batches 32,256): its own
     length sorting and per-batch padding, mean pooling, L2; timed over the whole corpus;
  2. the model exported the usual way (torch.onnx.export, TorchScript exporter, dynamic batch and
     length), and `sluice run` over the corpus as JSONL with each variant of options (bf16, JSONL in,
     normalized embeddings stored in outputs.h5): the whole command timed (set-up included) and the
     report's pipeline time;
  3. the errors on the first --check passages against sentence-transformers in fp32: max over passages
     of 1 - cosine for Sluice bf16 and for sentence-transformers' own bf16 encode, and their ratio.

    python3 tests/gpu/text_bench.py OUTDIR --sluice ".devrt/run sluice" [--passages N] [--models bert_base,minilm_l6]
        [--variant NAME=OPTIONS ...] [--deadline S]

One JSON line per measurement on stdout.  Tokens are counted as the tokenizer gives them (special
tokens included), truncated at 512.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np


def emit(**k):
    print(json.dumps(k), flush=True)


def make_corpus(n):
    # The anchor's generator, draw for draw, so both scripts see the same passages.
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10))) for _ in range(40000)]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    lens = np.clip(rng.lognormal(np.log(55), 0.6, n).astype(int), 3, 400)
    idx = rng.choice(len(words), int(lens.sum()), p=p)
    cuts = np.concatenate([[0], np.cumsum(lens)])
    return [" ".join(words[j] for j in idx[cuts[i]:cuts[i + 1]]) + "." for i in range(n)]


CONFIGS = {
    "bert_base": {},
    "minilm_l6": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sluice", default="build/sluice")
    ap.add_argument("--passages", type=int, default=1000000)
    ap.add_argument("--models", default="bert_base,minilm_l6")
    ap.add_argument("--st-batches", default="256")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=OPTIONS for sluice run (default: b256=--batch-size 256)")
    ap.add_argument("--check", type=int, default=2000)
    ap.add_argument("--work", default="/tmp/text_bench")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds: later steps are skipped")
    a = ap.parse_args()
    t_start = time.time()
    left = lambda: a.deadline - (time.time() - t_start)
    variants = [v.split("=", 1) for v in (a.variant or ["b256=--batch-size 256"])]
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    import torch
    from tokenizers import BertWordPieceTokenizer, Tokenizer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    t = time.perf_counter()
    corpus = make_corpus(a.passages)
    corpus_path = os.path.join(a.work, "corpus.jsonl")
    with open(corpus_path, "w") as f:
        for i, s in enumerate(corpus):
            f.write(json.dumps({"id": f"p{i:07d}", "text": s}) + "\n")
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus[:20000], vocab_size=30522)
    # A trained BertWordPieceTokenizer saves no post-processor (no [CLS] ... [SEP]), which the anchor
    # as given measured; a BERT tokenizer has one.
    from tokenizers.processors import BertProcessing
    tok.post_processor = BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tdir = os.path.join(a.work, "tok")
    os.makedirs(tdir, exist_ok=True)
    tok.save(os.path.join(tdir, "tokenizer.json"))
    ht = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tdir, "tokenizer.json"), unk_token="[UNK]", pad_token="[PAD]",
                                 cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)
    # transformers 5 rebuilds the post-processor from bos/eos settings and drops [CLS] ... [SEP]; the
    # trained one goes back, as BertTokenizerFast would have it (the anchor as given lost them).
    ht._tokenizer.post_processor = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json")).post_processor
    assert len(ht("")["input_ids"]) == 2
    setup_s = time.perf_counter() - t
    t = time.perf_counter()
    enc = ht(corpus, truncation=True, max_length=512)["input_ids"]
    tt = time.perf_counter() - t
    ntok = np.array([len(e) for e in enc])
    total = int(ntok.sum())
    emit(stage="corpus", passages=a.passages, tokens=total, mean_tokens=round(float(ntok.mean()), 1), p50=int(np.median(ntok)),
         p99=int(np.percentile(ntok, 99)), max=int(ntok.max()), hf_tokenize_s=round(tt, 2),
         hf_tokens_per_s=round(total / tt), setup_s=round(setup_s, 1))
    del enc

    from sentence_transformers import SentenceTransformer
    for name in a.models.split(","):
        if left() < 60:
            emit(model=name, skipped="deadline")
            continue
        torch.manual_seed(0)
        m = BertModel(BertConfig(**CONFIGS[name]), add_pooling_layer=False).eval()
        md = os.path.join(a.work, name)
        m.save_pretrained(md)
        ht.save_pretrained(md)
        check = corpus[:a.check]
        st32 = SentenceTransformer(md, device="cuda")
        ref = st32.encode(check, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
        del st32
        st_err = None
        for bs in [int(x) for x in a.st_batches.split(",")]:
            st = SentenceTransformer(md, device="cuda", model_kwargs={"torch_dtype": torch.bfloat16})
            st.encode(corpus[:2000], batch_size=bs)
            torch.cuda.synchronize()
            t = time.perf_counter()
            e = st.encode(corpus, batch_size=bs, normalize_embeddings=True, convert_to_tensor=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t
            e = e[:a.check].float().cpu().numpy().astype(np.float64)
            st_err = float((1 - (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)).max())
            emit(model=name, engine="sentence-transformers", mode=f"encode bf16 batch {bs}", seconds=round(dt, 2),
                 passages_per_s=round(a.passages / dt), tokens_per_s=round(total / dt), max_1_minus_cos=st_err)
            del st, e
            torch.cuda.empty_cache()
        # The export users make: the encoder alone on input_ids, attention_mask, token_type_ids.
        onnx_path = os.path.join(md, "onnx", "model.onnx")
        os.makedirs(os.path.dirname(onnx_path), exist_ok=True)

        class Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

        b = ht(corpus[:2], padding=True, return_tensors="pt", return_token_type_ids=True)
        names = ["input_ids", "attention_mask", "token_type_ids"]
        t = time.perf_counter()
        with torch.no_grad():
            torch.onnx.export(Wrap(m), tuple(b[k] for k in names), onnx_path, dynamo=False, opset_version=17,
                              input_names=names, output_names=["last_hidden_state"],
                              dynamic_axes={**{k: {0: "batch", 1: "sequence"} for k in names},
                                            "last_hidden_state": {0: "batch", 1: "sequence"}})
        emit(model=name, stage="export", seconds=round(time.perf_counter() - t, 1))
        del m
        torch.cuda.empty_cache()
        for vname, opts in variants:
            if left() < 30:
                emit(model=name, variant=vname, skipped="deadline")
                continue
            out = os.path.join(a.work, f"run_{name}_{vname}")   # outputs.h5 stays here; logs and reports go to OUTDIR
            cmd = shlex.split(a.sluice) + ["run", "--model", onnx_path, "--input", corpus_path, "--key-field", "id",
                                            "--outputs", "embedding", "--output", out, "--overwrite", "--precision", "bf16",
                                            "--max-length", "512", "--pooling", "mean"] + shlex.split(opts)
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, left() - 10))
            wall = time.perf_counter() - t
            with open(os.path.join(a.out, f"log_{name}_{vname}.txt"), "w") as f:
                f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
            if p.returncode != 0:
                emit(model=name, engine="sluice", variant=vname, failed=p.returncode, tail=(p.stdout + p.stderr)[-1500:])
                continue
            rep = json.load(open(os.path.join(out, "report.json")))
            r0 = rep["ranks"][0]
            import h5py
            with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
                e = f["outputs/embedding"][:a.check].astype(np.float64)
            err = float((1 - (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)).max())
            emit(model=name, engine="sluice", variant=vname, options=opts, wall_s=round(wall, 2),
                 makespan_s=rep["job"]["makespan_s"], setup_s=r0.get("setup_s"),
                 tokens_per_s_wall=round(total / wall), tokens_per_s_pipeline=round(total / rep["job"]["makespan_s"]),
                 passages_per_s_wall=round(a.passages / wall), max_1_minus_cos=err,
                 error_ratio_to_torch_bf16=round(err / st_err, 3) if st_err else None,
                 busy=r0.get("busy"), stall=r0.get("stall"), setup=r0.get("setup"), limit=r0.get("limit"))
            with open(os.path.join(a.out, f"report_{name}_{vname}.json"), "w") as f:
                json.dump(rep, f)
    emit(stage="done", seconds=round(time.time() - t_start, 1))


if __name__ == "__main__":
    sys.exit(main())
