"""Batches by length (--max-tokens-per-batch, docs/text.md): each batch's passages sorted by token
count and run as pieces padded only to their length bucket, on the tiny encoders of
tests/data/text_zoo (whose passages run from 2 to 64 tokens: every bucket of 16, 32, 48 and 64 is
met).  The outputs must be those of sentence-transformers at the tolerance of test_text_models.py,
in input order with their keys; ranks and resumes give the same bytes; the report names the buckets.

At --batch-size 8 and 128 tokens a piece, the caps are 8, 4, 2 and 2 rows: most batches hold two
or more pieces of one bucket, so the copies between a bucket's passes (pipeline.h) are exercised
too.

SLUICE_BUCKETS_DEVICE=cuda runs the same checks on the GPU (fp32; CI runs them on the CPU): the
pieces' copies there are asynchronous, on three streams, which the CPU's host device cannot show."""
import os

import numpy as np
import pytest

from support.text_outputs import assert_matches_reference, cosines, embeddings
from support.sluice_test import ROOT, report, sluice

ZOO = os.path.join(ROOT, "tests", "data", "text_zoo")
DEVICE = os.environ.get("SLUICE_BUCKETS_DEVICE", "cpu")
MODELS = ["bert_mean", "bert_cls", "bert_max", "bert_last", "xlmr_mean", "roberta_mean"]


def args_for(name, out, tokens=128, batch=8):
    d = os.path.join(ZOO, name)
    return ["--model", os.path.join(d, "model.torchscript.onnx"), "--input", os.path.join(d, "passages.jsonl"),
            "--key-field", "id", "--outputs", "embedding", "--output", out, "--device", DEVICE, "--batch-size", batch,
            "--cpu-threads", 1, "--max-tokens-per-batch", tokens]


def run(name, out, *extra, np_=None, tokens=128, batch=8):
    p = sluice("run", *args_for(name, out, tokens, batch), *extra, np_=np_, timeout=240)
    assert p.returncode == 0, p.stderr
    return p


@pytest.mark.parametrize("name", MODELS)
def test_bucketed_embeddings_match_sentence_transformers(name, tmp_path):
    p = run(name, tmp_path / "o")
    assert_matches_reference(tmp_path / "o", os.path.join(ZOO, name))   # in input order, each row with its key
    # The report names the buckets, and the pieces hold every passage once.
    assert "buckets (--max-tokens-per-batch 128" in p.stdout, p.stdout
    assert "16x8" in p.stdout and "64x2" in p.stdout, p.stdout
    r = report(tmp_path / "o")
    tokens = r["tokens"]
    buckets = tokens["buckets"]
    assert [b["length"] for b in buckets] == [16, 32, 48, 64]
    assert [b["cap"] for b in buckets] == [8, 4, 2, 2]
    assert sum(b["rows"] for b in buckets) == sum(1 for _ in open(os.path.join(ZOO, name, "passages.jsonl")))
    assert all(b["pieces"] >= 1 for b in buckets), buckets
    assert all(b["rows"] <= b["pieces"] * b["cap"] for b in buckets), buckets
    assert tokens["computed"] == sum(b["rows"] * b["length"] for b in buckets)
    assert r["ranks"][0]["setup"]["engines"] == 4


def test_cutting_pads_less_and_changes_nothing_but_the_last_bits(tmp_path):
    """Against the same job unbucketed: far fewer tokens computed, the same vectors to float32 noise."""
    d = os.path.join(ZOO, "bert_mean")
    base = ["--model", os.path.join(d, "model.torchscript.onnx"), "--input", os.path.join(d, "passages.jsonl"),
            "--key-field", "id", "--outputs", "embedding", "--device", DEVICE, "--batch-size", 8, "--cpu-threads", 1]
    p = sluice("run", *base, "--output", tmp_path / "plain")
    assert p.returncode == 0, p.stderr
    assert "buckets" not in p.stdout and "tokens:" in p.stdout, p.stdout
    run("bert_mean", tmp_path / "cut")
    _, plain, _ = embeddings(tmp_path / "plain")
    _, cut, _ = embeddings(tmp_path / "cut")
    assert cosines(plain, cut).min() >= 0.999999
    t_plain, t_cut = report(tmp_path / "plain")["tokens"], report(tmp_path / "cut")["tokens"]
    assert t_plain["real"] == t_cut["real"]
    assert t_plain["computed"] == 40 * 64
    assert t_cut["computed"] < 0.75 * t_plain["computed"], (t_cut, t_plain)


def test_ranks_and_resume_are_bit_identical(tmp_path):
    """1 and 3 ranks give the same bytes; a run failed at a batch and resumed too (a batch's pieces
    follow from its passages alone)."""
    run("xlmr_mean", tmp_path / "one")
    _, one, _ = embeddings(tmp_path / "one")
    run("xlmr_mean", tmp_path / "three", np_=3)
    keys, three, _ = embeddings(tmp_path / "three")
    assert three.tobytes() == one.tobytes()
    p = sluice("run", *args_for("xlmr_mean", tmp_path / "r"), "--chunk-batches", 1, "--fail-at-batch", 2,
               "--fail-ranks", 1, np_=2, timeout=240)
    assert p.returncode != 0, p.stderr
    p = sluice("run", "--resume", "--output", tmp_path / "r", np_=2, timeout=240)
    assert p.returncode == 0, p.stderr
    _, resumed, _ = embeddings(tmp_path / "r")
    assert resumed.tobytes() == one.tobytes()
    # Another budget cuts the batches otherwise: it may not finish this folder.
    p = sluice("run", *args_for("xlmr_mean", tmp_path / "r", tokens=256), "--resume", timeout=240)
    assert p.returncode == 3 and "max-tokens-per-batch" in p.stderr, p.stderr


def test_a_larger_window_and_budget(tmp_path):
    """--batch-size 16 with 256 tokens a piece: caps 16, 8, 5, 4; still the references, in order."""
    p = run("bert_mean", tmp_path / "o", tokens=256, batch=16)
    assert "16x16" in p.stdout and "48x5" in p.stdout, p.stdout
    _, got, _ = embeddings(tmp_path / "o")
    ref = np.load(os.path.join(ZOO, "bert_mean", "ref.npz"))["st_cpu_fp64"]
    assert cosines(got, ref).min() >= 0.99999


def test_per_token_outputs_are_refused(tmp_path):
    """The model's token vectors [B, L, D] have another shape per bucket: one clear error."""
    d = os.path.join(ZOO, "bert_mean")
    p = sluice("run", "--model", os.path.join(d, "model.torchscript.onnx"), "--input", os.path.join(d, "passages.jsonl"),
               "--outputs", "logits", "--output", tmp_path / "o", "--device", "cpu", "--max-tokens-per-batch", 128,
               timeout=120)
    assert p.returncode == 2 and "its rows follow the length" in p.stderr, p.stderr


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_the_option_on_an_image_model_is_one_clear_error(tmp_path, np_):
    p = sluice("run", "--model", os.path.join(ROOT, "jobs", "models", "quickstart.onnx"), "--input", "synthetic",
               "--output", tmp_path / "o", "--device", "cpu", "--max-tokens-per-batch", 4096, np_=np_, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "--max-tokens-per-batch cuts batches of text by length" in p.stderr, p.stderr
    lines = [line for line in p.stderr.splitlines() if "--max-tokens-per-batch cuts" in line]
    assert len(lines) == 1, p.stderr
    assert "terminate called" not in p.stderr and "Segmentation" not in p.stderr
    assert not (tmp_path / "o" / "outputs.h5").exists()


def test_bad_records_keep_their_place(tmp_path):
    """A record that is no JSON is a bad row fed as the empty passage: cut by length it still lands at
    its own row, with its key and status, as the unbucketed run has it."""
    d = os.path.join(ZOO, "bert_mean")
    lines = open(os.path.join(d, "passages.jsonl")).read().splitlines()
    lines.insert(13, '{"id": "broken", "text": ')
    lines.insert(3, "not json at all")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    base = ["--model", os.path.join(d, "model.torchscript.onnx"), "--input", corpus, "--outputs", "embedding",
            "--device", DEVICE, "--batch-size", 8, "--cpu-threads", 1]
    p = sluice("run", *base, "--output", tmp_path / "plain")
    assert p.returncode == 0, p.stderr
    p = sluice("run", *base, "--output", tmp_path / "cut", "--max-tokens-per-batch", 128)
    assert p.returncode == 0, p.stderr
    k1, plain, s1 = embeddings(tmp_path / "plain")
    k2, cut, s2 = embeddings(tmp_path / "cut")
    assert k1 == k2 and list(s1) == list(s2)
    assert s2[3] == 1 and s2[14] == 1 and (s2 == 1).sum() == 2, s2
    assert cosines(plain, cut).min() >= 0.999999
