"""Text inputs (JSONL, CSV, TSV, plain text) seen from outside, through the zoo's tiny text encoder:
every rank opens and checks the corpus (the same records on every rank, an `input:` line counting
them), and runs it; a bad record is a bad row with its reason; a corpus that cannot be read (gzip'd, a
CSV header without the column, no records) is exit 3 naming what to do; the options --text-field,
--key-field and --max-record-bytes are checked.  The records themselves, keys, bad records and
sharded reads are tested in tests/unit/test_io_text.cpp; embeddings against sentence-transformers in
test_text_models.py."""
import gzip
import json

import pytest

import os

import h5py

from support.sluice_test import ROOT, sluice

ENCODER = os.path.join(ROOT, "tests", "data", "text_zoo", "bert_mean", "model.torchscript.onnx")
JOB = ["--model", ENCODER, "--outputs", "embedding", "--batch-size", 4, "--device", "cpu", "--cpu-threads", 1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    lines = [json.dumps({"id": f"doc-{i}", "text": f"passage {i} " + "word " * (i % 7)}) for i in range(50)]
    lines.insert(10, "not json")  # a bad record: a bad sample, not an error of the job
    lines.insert(20, "")          # a blank line: no record
    (d / "c.jsonl").write_text("\n".join(lines) + "\n")
    (d / "c.csv").write_text('id,text\n1,"one, with comma"\n2,"two\nlines"\n3,three\n')
    (d / "p.txt").write_text("first passage\nsecond passage\n\nthird\n")
    with gzip.open(d / "c.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    return d


def ran(p):
    assert p.returncode == 0, p.stderr
    assert "terminate called" not in p.stderr and "Segmentation" not in p.stderr, p.stderr


def status_of(outdir):
    with h5py.File(os.path.join(outdir, "outputs.h5"), "r") as f:
        return list(f["sample_status"][:]), [bytes(k).rstrip(b"\0").decode() for k in f["sample_key"][:]]


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_jsonl_is_opened_counted_and_run(corpus, tmp_path, np_):
    p = sluice("run", *JOB, "--input", corpus / "c.jsonl", "--key-field", "id", "--output", tmp_path / "o", np_=np_)
    ran(p)
    # Every rank opened the file and agreed on its fingerprint; rank 0 says what it holds.
    assert "jsonl" in p.stderr and "51 records" in p.stderr and "field 'text'" in p.stderr, p.stderr
    assert "keys from field 'id'" in p.stderr, p.stderr
    assert "other samples than rank 0" not in p.stderr
    status, keys = status_of(tmp_path / "o")
    # The line that is not JSON is a bad row (status 1) with its reason; the rest ran.
    assert status.count(1) == 1 and status[10] == 1 and status.count(0) == 50, status
    assert keys[0] == "doc-0" and keys[11] == "doc-10"


def test_dry_run_describes_csv_and_plain_text(corpus, tmp_path):
    p = sluice("run", *JOB, "--input", corpus / "c.csv", "--dry-run", "--output", tmp_path / "o")
    ran(p)
    assert "csv" in p.stderr and "3 records" in p.stderr and "column 'text' of 2" in p.stderr, p.stderr
    # .txt stays a list of image paths; --input-kind text reads it as passages.
    p = sluice("run", *JOB, "--input", corpus / "p.txt", "--input-kind", "text", "--dry-run", "--output", tmp_path / "o")
    ran(p)
    assert "3 records" in p.stderr and "one passage a line" in p.stderr, p.stderr
    p = sluice("run", *JOB, "--input", corpus / "p.txt", "--dry-run", "--output", tmp_path / "o")
    assert p.returncode == 3 and "cannot be read" in p.stderr, p.stderr  # its lines are no image files


def test_unreadable_corpora_are_exit_3_saying_what_to_do(corpus, tmp_path):
    p = sluice("run", *JOB, "--input", corpus / "c.jsonl.gz", "--output", tmp_path / "o", np_=2)
    assert p.returncode == 3, p.stderr
    assert "gzip-compressed" in p.stderr and "gunzip -k" in p.stderr, p.stderr
    p = sluice("run", *JOB, "--input", corpus / "c.csv", "--text-field", "body", "--output", tmp_path / "o")
    assert p.returncode == 3 and "no column 'body' (--text-field)" in p.stderr, p.stderr
    (tmp_path / "empty.jsonl").write_text("\n\n")
    p = sluice("run", *JOB, "--input", tmp_path / "empty.jsonl", "--output", tmp_path / "o")
    assert p.returncode == 3 and "no records" in p.stderr, p.stderr


def test_text_options_are_checked(corpus, tmp_path):
    p = sluice("run", *JOB, "--input", "synthetic", "--key-field", "id", "--output", tmp_path / "o")
    assert p.returncode == 2 and "--key-field names a field of a text input" in p.stderr, p.stderr
    p = sluice("run", *JOB, "--input", corpus / "c.jsonl", "--max-record-bytes", 0, "--output", tmp_path / "o")
    assert p.returncode == 2 and "max-record-bytes" in p.stderr, p.stderr
    p = sluice("run", *JOB, "--input", corpus / "p.txt", "--input-kind", "text", "--key-field", "id",
               "--output", tmp_path / "o")
    assert p.returncode == 2 and "has no fields" in p.stderr, p.stderr
    # A small --max-record-bytes makes long records bad samples, counted at open.
    p = sluice("run", *JOB, "--input", corpus / "c.jsonl", "--max-record-bytes", 40, "--output", tmp_path / "o")
    ran(p)
    assert "over --max-record-bytes 40" in p.stderr, p.stderr
    status, _ = status_of(tmp_path / "o")
    assert status.count(1) > 1, status
