#!/usr/bin/env python3
"""Tokens/s of a text encoder with and without --max-tokens-per-batch on the CPU engine, on a corpus
of web-like passage lengths (docs/text.md, "Batches by length"):

    python3 data_tools/text_bucket_bench.py --sluice build/sluice [--passages 2048] [--batch 256]
        [--tokens 4096] [--threads 2] [--out DIR]
    python3 data_tools/text_bucket_bench.py --simulate [--batch 1024] [--tokens 16384]

--simulate runs nothing: it cuts 16 windows of web-like token counts (a log-normal around 45, plus
two special tokens, at most 512) as text/text_input.cpp does and as the first fit would, with the
buckets by 16/32/64 and by 16/32, and prints the share of the computed tokens that are real
(docs/text.md quotes it).

The model is a random-weight BERT-style encoder written here with onnx.helper (hidden 128, 2 layers,
4 heads, 512 positions; inputs input_ids, attention_mask, position_ids; the additive mask
(1 - mask) * -10000 as transformers writes it), the tokenizer the one of
tests/data/text_zoo/bert_mean.  Passages are random vocabulary words, their counts drawn from a
log-normal around 45 (mean about 60 tokens, the tail cut at 510), the shape of web text.  Each
configuration runs once, `--sink null` (the report's figures: tokens in the passages per second,
and the share of computed tokens that are real).  Prints one line per run and a JSON summary.
The environment reaches sluice (SLUICE_FUSE_ATTENTION=0 compares without the attention fusion).

2026-12-04, the 2-core development VM (shared), 1024 passages (mean 59 tokens), --batch-size 256,
2 threads, 16 buckets: off 2,127 tokens/s (11.5 % of the computed tokens real),
--max-tokens-per-batch 4096 20,465 tokens/s (82.4 % real): 9.6x (the attention's cost grows with the
square of the padded length).  Without the attention fusion (SLUICE_FUSE_ATTENTION=0): 1,238 and
14,489 tokens/s, 11.7x.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "tests", "data", "text_zoo", "bert_mean", "tokenizer.json")


def encoder(path, vocab, d=128, layers=2, heads=4, positions=512, seed=0):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape, scale=0.05):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def ln(x, name):
        g = const(name + ".g", np.ones(d), np.float32)
        b = const(name + ".b", np.zeros(d), np.float32)
        return node("LayerNormalization", [x, g, b], name + ".y", axis=-1, epsilon=1e-12)

    def linear(x, name, n_in, n_out):
        y = node("MatMul", [x, w(name + ".w", n_in, n_out)], name + ".mm")
        return node("Add", [y, const(name + ".bias", np.zeros(n_out), np.float32)], name + ".y")

    dh = d // heads
    e = node("Gather", [w("word", vocab, d), "input_ids"], "emb")
    p = node("Gather", [w("pos", positions, d), "position_ids"], "pemb")
    x = ln(node("Add", [e, p], "emb_sum"), "emb_ln")
    m = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inv = node("Sub", [const("one", 1.0, np.float32), m], "mask_inv")
    add = node("Mul", [inv, const("neg", -10000.0, np.float32)], "mask_add")
    mask = node("Unsqueeze", [add, const("mask_axes", [1, 2])], "mask4")
    split = const("split_shape", [0, 0, heads, dh])
    merge = const("merge_shape", [0, 0, d])
    for i in range(layers):
        n = f"l{i}"
        q = node("Transpose", [node("Reshape", [linear(x, n + ".q", d, d), split], n + ".q4")], n + ".qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, n + ".k", d, d), split], n + ".k4")], n + ".kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, n + ".v", d, d), split], n + ".v4")], n + ".vt", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], n + ".qk"), const(n + ".scale", 1 / np.sqrt(dh), np.float32)], n + ".s")
        a = node("Softmax", [node("Add", [s, mask], n + ".sm")], n + ".p", axis=-1)
        c = node("Transpose", [node("MatMul", [a, v], n + ".ctx")], n + ".ctxt", perm=[0, 2, 1, 3])
        o = linear(node("Reshape", [c, merge], n + ".ctx3"), n + ".o", d, d)
        x = ln(node("Add", [x, o], n + ".res1"), n + ".ln1")
        h = linear(x, n + ".f1", d, 4 * d)
        erf = node("Erf", [node("Div", [h, const(n + ".sqrt2", np.sqrt(2), np.float32)], n + ".hs")], n + ".erf")
        g = node("Mul", [node("Mul", [h, node("Add", [erf, const(n + ".one", 1.0, np.float32)], n + ".erf1")], n + ".hg"),
                         const(n + ".half", 0.5, np.float32)], n + ".gelu")
        x = ln(node("Add", [x, linear(g, n + ".f2", 4 * d, d)], n + ".res2"), n + ".ln2")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ins = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "length"])
           for name in ("input_ids", "attention_mask", "position_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "length", d])
    model = helper.make_model(helper.make_graph(nodes, "bench_encoder", ins, [out], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def corpus(path, n, seed=1):
    vocab = json.load(open(TOKENIZER))["model"]["vocab"]
    words = [t for t in vocab if t.isalpha() and t.isascii() and len(t) > 2]
    rng = np.random.default_rng(seed)
    counts = np.clip(np.round(rng.lognormal(np.log(45), 0.75, n)).astype(int), 1, 510)
    with open(path, "w") as f:
        for i, c in enumerate(counts):
            f.write(json.dumps({"id": f"p{i:06d}", "text": " ".join(rng.choice(words, c))}) + "\n")
    return len(vocab)


def run(sluice, model, data, out, batch, threads, tokens):
    cmd = [*sluice.split(), "run", "--model", model, "--input", data, "--tokenizer", TOKENIZER, "--outputs",
           "embedding", "--pooling", "mean", "--max-length", "512", "--device", "cpu", "--cpu-threads", str(threads),
           "--batch-size", str(batch), "--sink", "null", "--output", out, "--quiet"]
    if tokens:
        cmd += ["--max-tokens-per-batch", str(tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{p.stderr}")
    r = json.load(open(os.path.join(out, "report.json")))
    t = r["tokens"]
    return {"max_tokens_per_batch": tokens, "tokens_per_s": t["real_per_s"], "real": t["real"],
            "computed": t["computed"], "wall_s": max(x["wall_s"] for x in r["ranks"]),
            "setup_s": max(x["setup_s"] for x in r["ranks"]), "buckets": t.get("buckets", [])}


def simulate(batch, tokens, windows=16, L=512, seed=0):
    rng = np.random.default_rng(seed)
    lens = np.clip(np.round(rng.lognormal(np.log(45), 0.75, batch * windows)).astype(int) + 2, 3, L)

    def buckets(steps):
        out, n = [], steps[0][1]
        while n < L:
            out.append(n)
            n += next(s for upto, s in steps if n < upto)
        return out + [L]

    def cost(window, lengths, caps, first_fit):
        ls = sorted(window)
        bk = [next(i for i, x in enumerate(lengths) if x >= v) for v in ls]
        n = len(ls)
        if first_fit:  # take rows while they fit
            total, i = 0, 0
            while i < n:
                j = i
                while j + 1 < n and j + 2 - i <= caps[bk[j + 1]]:
                    j += 1
                total += (j - i + 1) * lengths[bk[j]]
                i = j + 1
            return total
        best, frm = [0] + [None] * n, [0] * (n + 1)  # the cheapest cut, each piece + one row of L
        for j in range(1, n + 1):
            b = bk[j - 1]
            i = min(range(max(0, j - caps[b]), j), key=lambda i: best[i] - i * lengths[b])
            best[j], frm[j] = best[i] + (j - i) * lengths[b] + L, i
        total, j = 0, n
        while j > 0:
            total += (j - frm[j]) * lengths[bk[j - 1]]
            j = frm[j]
        return total

    real = int(lens.sum())
    print(f"{len(lens)} passages, mean {lens.mean():.1f} tokens, --batch-size {batch}, --max-tokens-per-batch {tokens}:")
    print(f"  every passage padded to {L}: {100 * real / (len(lens) * L):.1f} % of the computed tokens real")
    for name, steps in (("16/32/64", [(128, 16), (256, 32), (L, 64)]), ("16/32", [(128, 16), (L, 32)]),
                        ("32", [(L, 32)])):
        lengths = buckets(steps)
        caps = [min(batch, max(1, tokens // n)) for n in lengths]
        for first_fit in (False, True):
            computed = sum(cost(lens[k:k + batch], lengths, caps, first_fit) for k in range(0, len(lens), batch))
            print(f"  buckets by {name:8} ({len(lengths):2}), {'first fit' if first_fit else 'cheapest cut'}: "
                  f"{100 * real / computed:.1f} %")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--passages", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--simulate", action="store_true", help="cut web-like lengths on paper, run nothing")
    a = ap.parse_args()
    if a.simulate:
        simulate(a.batch, a.tokens)
        return
    work = a.out or tempfile.mkdtemp(prefix="text-bucket-bench-")
    os.makedirs(work, exist_ok=True)
    data, model = os.path.join(work, "corpus.jsonl"), os.path.join(work, "encoder.onnx")
    encoder(model, corpus(data, a.passages))
    results = []
    for tokens in (0, a.tokens):
        r = run(a.sluice, model, data, os.path.join(work, f"run-{tokens}"), a.batch, a.threads, tokens)
        results.append(r)
        print(f"max-tokens-per-batch {tokens or 'off':>5}: {r['tokens_per_s']:10.0f} tokens/s, "
              f"{100 * r['real'] / r['computed']:5.1f} % of the computed tokens real, wall {r['wall_s']:.2f} s, "
              f"set-up {r['setup_s']:.2f} s")
    print(f"speed-up {results[1]['tokens_per_s'] / results[0]['tokens_per_s']:.2f}x")
    print(json.dumps({"passages": a.passages, "batch": a.batch, "threads": a.threads, "runs": results}))


if __name__ == "__main__":
    main()
