"""Input crafted to break Sluice: models, job files and a file size limit that used to
kill the process with a signal now end with one clear error line and the documented status.  The
models are fuzz/corpus/onnx/crafted-*.onnx (fuzz/make_seeds.py); the in-process check of every one
of them is tests/unit/test_model_crafted.cpp, this one runs the binary on them."""
import json
import os
import resource
import subprocess

import pytest

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, error_lines, sluice

CRAFTED = os.path.join(ROOT, "fuzz", "corpus", "onnx")
with open(os.path.join(CRAFTED, "crafted.json")) as f:
    EXPECTED = json.load(f)

ISSUE_CASES = ["div_int64_min_by_minus_one", "mod_int64_min_by_minus_one", "div_by_zero", "add_without_inputs",
               "constantofshape_overflow_gather", "where_one_input", "slice_extreme_steps", "conv_bias_too_short"]


def assert_one_error(p, status, words):
    assert p.returncode == status, f"exit {p.returncode}\n{p.stderr}"
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and words in errs[0], p.stderr
    assert "Signal" not in p.stderr and "core dumped" not in p.stderr, p.stderr


@pytest.mark.parametrize("case", ISSUE_CASES)
def test_crafted_model_is_exit_3_with_one_line(tmp_path, case):
    name = f"crafted-{case}.onnx"
    p = sluice("run", "--model", os.path.join(CRAFTED, name), "--sample-shape", "3,4,4", "--samples", "4",
               "--batch-size", "2", "--device", "cpu", "--output", tmp_path / "out", "--quiet")
    assert_one_error(p, 3, EXPECTED[name])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text,words", [
    ('name = "' + "x" * 20000 + '"\nbatch-size = "16"\n', "line 2, column 14: batch-size takes an integer"),
    ("mean = " + "[" * 20000 + "\n", "line 1, column 9: arrays of arrays are not job values"),
    ("[" * 20000 + "\n", "line 1, column 1: tables"),
    ("sample-shape = [3, 64, 64.5]\n", "line 1, column 24: sample-shape takes an integer or [a list of them], not 64.5"),
])
def test_crafted_job_file_is_exit_2_with_one_line(tmp_path, text, words):
    job = tmp_path / "job.toml"
    job.write_text(text)
    p = sluice("run", "--config", job, "--output", tmp_path / "out")
    assert_one_error(p, 2, words)


def test_file_size_limit_is_a_clear_exit_1(tmp_path):
    # 20 MB: above what MPI's own start-up files need, below the 33 MB of logits written here.
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 << 20, 20 << 20))

    cmd = [BIN, "run", "--config", QUICKSTART, "--samples", "256", "--outputs", "logits", "--device", "cpu",
           "--output", str(tmp_path / "out"), "--quiet"]
    p = subprocess.run(cmd, cwd=ROOT, env=MPI_ENV, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert p.returncode == 1, f"exit {p.returncode} (-25 is SIGXFSZ)\n{p.stderr}"
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "file size limit reached (ulimit -f)" in errs[0], p.stderr


LIBRARY_CRASHES = os.path.join(ROOT, "fuzz", "library-crashes", "hdf5")


@pytest.mark.parametrize("name", sorted(os.listdir(LIBRARY_CRASHES)) if os.path.isdir(LIBRARY_CRASHES) else [])
def test_hdf5_file_that_crashes_libhdf5_is_exit_3_with_one_line(tmp_path, name):
    # Files the fuzzer found to crash libhdf5 itself: the crash guard turns the signal into a message.
    p = sluice("run", "--input", os.path.join(LIBRARY_CRASHES, name), "--input-dataset", "/images", "--device", "cpu",
               "--output", tmp_path / "out", "--quiet")
    # Exit 3 either way: the guard's line where the release build crashes too, else an input error
    # (a fault ASan sees may pass unnoticed without it; the file still does not fit the model).
    assert p.returncode == 3, f"exit {p.returncode} (negative: a signal)\n{p.stderr}"
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and ("libhdf5 crashed reading it" in errs[0] or "input" in errs[0]), p.stderr


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2])
def test_huge_padded_tensors_before_an_empty_output_are_refused_before_any_allocation(tmp_path, n, ranks):
    """Found by the onnx fuzz target: Pad with pads of 10^8 and more, then a Reshape to [N, 0].  The
    CPU engine used to allocate and zero 17 GB of intermediates for it before the rank file refused
    the empty output; now the empty output is refused when the outputs are planned.  Under a 4 GB
    address-space limit a regression fails with exit 1 instead of paging the machine."""
    def limit():
        # Not under AddressSanitizer (data_tools/asan.sh sets ASAN_OPTIONS): its shadow memory alone
        # reserves terabytes of address space.
        if "ASAN_OPTIONS" not in os.environ:
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    model = os.path.join(os.path.dirname(__file__), "data", f"crafted-huge-pad-empty-output-{n}.onnx")
    cmd = [BIN, "run", "--model", model, "--sample-shape", "3,42,4", "--samples", "8", "--batch-size", "2",
           "--device", "cpu", "--output", str(tmp_path / "out"), "--quiet"]
    if ranks > 1:  # rank 0 finds it in an agreed step: one error line, not one per rank
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd]
    p = subprocess.run(cmd, cwd=ROOT, env=MPI_ENV, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert_one_error(p, 3, "no values per sample")
