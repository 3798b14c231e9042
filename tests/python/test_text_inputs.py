"""Text inputs (JSONL, CSV, TSV, plain text) seen from outside, until text models run: every rank opens
and checks the corpus (the same records on every rank, an `input:` line counting them), then `sluice run`
(and --dry-run) refuses with one clear message and exit status 2, never a crash or a hang; a corpus that
cannot be read (gzip'd, a CSV header without the column, no records) is exit 3 naming what to do; the
options --text-field, --key-field and --max-record-bytes are checked.  The records themselves, keys,
bad records and sharded reads are tested in tests/unit/test_io_text.cpp."""
import gzip
import json

import pytest

from support.sluice_test import QUICKSTART, sluice

JOB = ["--config", QUICKSTART, "--batch-size", 4, "--device", "cpu"]


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


def refused_as_text(p):
    assert p.returncode == 2, p.stderr
    assert "text inputs need a text model" in p.stderr and "not yet supported" in p.stderr, p.stderr
    assert "terminate called" not in p.stderr and "Segmentation" not in p.stderr, p.stderr


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_jsonl_is_opened_counted_then_refused(corpus, tmp_path, np_):
    p = sluice("run", *JOB, "--input", corpus / "c.jsonl", "--key-field", "id", "--output", tmp_path / "o", np_=np_)
    refused_as_text(p)
    # Every rank opened the file and agreed on its fingerprint; rank 0 says what it holds.
    assert "jsonl" in p.stderr and "51 records" in p.stderr and "field 'text'" in p.stderr, p.stderr
    assert "keys from field 'id'" in p.stderr, p.stderr
    assert "other samples than rank 0" not in p.stderr
    assert not (tmp_path / "o").exists()  # refused before the output folder is made


def test_dry_run_describes_csv_and_plain_text(corpus, tmp_path):
    p = sluice("run", *JOB, "--input", corpus / "c.csv", "--dry-run", "--output", tmp_path / "o")
    refused_as_text(p)
    assert "csv" in p.stderr and "3 records" in p.stderr and "column 'text' of 2" in p.stderr, p.stderr
    # .txt stays a list of image paths; --input-kind text reads it as passages.
    p = sluice("run", *JOB, "--input", corpus / "p.txt", "--input-kind", "text", "--dry-run", "--output", tmp_path / "o")
    refused_as_text(p)
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
    refused_as_text(p)
    assert "over --max-record-bytes 40" in p.stderr, p.stderr
