"""`sluice run --export`: the results written as files while the job runs, on 2 ranks.  Killed with
SIGKILL once rows are committed and files exported (observed in the ledgers and the export folder),
then resumed, the export folder holds exactly the files `sluice export` writes for the finished
run, byte for byte; files already there are not rewritten, a temporary a kill left is removed, and
the files of rows committed before the kill but not yet exported are written by the resume.  The
other formats, compressed rank files, and the error paths: one error line, a non-zero status."""
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, error_lines, fresh_dir, pids_of, rank_files, sluice

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from test_export_geometry import identity_model  # noqa: E402

Image = pytest.importorskip("PIL.Image")

MARKER = ".sluice-run-export.json"
BASE = ["--config", QUICKSTART, "--batch-size", 4, "--chunk-batches", 1, "--cpu-threads", 1, "--quiet"]
TIMEOUT = 120


def files_of(folder):
    """relative path -> bytes of every file under `folder`, the run's marker left out."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            rel = os.path.relpath(path, folder)
            if rel not in (MARKER, ".sluice-export.json"):
                with open(path, "rb") as f:
                    out[rel] = f.read()
    return out


def committed_samples(run):
    n = 0
    for path in rank_files(run):
        try:
            with h5py.File(path, "r", swmr=True, locking=False) as f:
                n += int(sum(r["count"] for r in f["ledger"][:] if r["count"] > 0))
        except (OSError, KeyError):
            pass
    return n


def exported(folder, ext):
    try:
        return [n for n in os.listdir(folder) if n.endswith(ext)]
    except FileNotFoundError:
        return []


def reference_export(run, what, tmp_path):
    ref = str(tmp_path / f"ref-{what}")
    p = sluice("export", run, "--what", what, "--out", ref, check=True, timeout=TIMEOUT)
    assert "written" in p.stdout, p.stdout
    return files_of(ref)


def test_masks_written_while_running_survive_kill_9_and_resume_as_sluice_export_writes_them(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    out = os.path.join(run, "export")
    job = [*BASE, "--samples", 160, "--outputs", "argmax", "--export", "masks", "--output", run]
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", *map(str, job), "--throttle-ms", "40",
           "--throttle-ranks", "0,1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The kill comes once a fifth of the samples are committed and some of their masks are on disk.
    deadline = time.time() + TIMEOUT
    while committed_samples(run) < 32 or len(exported(out, ".png")) < 4:
        assert proc.poll() is None, f"the job ended before the kill: {proc.communicate()}"
        assert time.time() < deadline, "no progress to kill at"
        time.sleep(0.02)
    for pid in pids_of("sluice", run):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=TIMEOUT)
    at_kill = sorted(exported(out, ".png"))
    assert 4 <= len(at_kill) < 160
    # Rows committed but not yet exported when the kill came: their files are missing (two removed
    # here, so the case is certain), and a temporary half-written file is left behind.
    for name in at_kill[:2]:
        os.remove(os.path.join(out, name))
    kept = {n: os.stat(os.path.join(out, n)).st_ino for n in at_kill[2:]}
    with open(os.path.join(out, ".0123456789abcdef.r1.sluice-partial"), "wb") as f:
        f.write(b"\x89PNG half")

    p = sluice("run", *job, "--resume", np_=2, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    got = files_of(out)
    assert not [n for n in got if n.endswith(".sluice-partial")], sorted(got)
    assert got == reference_export(run, "masks", tmp_path)  # the same names, the same bytes
    assert len(got) == 160
    # What was there stayed there (same inode: not rewritten); the removed ones were written again.
    assert {n: os.stat(os.path.join(out, n)).st_ino for n in kept} == kept
    assert all(os.path.exists(os.path.join(out, n)) for n in at_kill[:2])
    # A kill after the job completed but before its last files were written: a --resume of the
    # complete run writes them (and nothing else).
    os.remove(os.path.join(out, "5.png"))
    p = sluice("run", *job, "--resume", np_=2, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert files_of(out) == got


def test_npy_from_compressed_rank_files_equal_sluice_export(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    out = str(tmp_path / "arrays")
    sluice("run", *BASE, "--samples", 48, "--outputs", "logits", "--compression", 4, "--writer-threads", 2,
           "--export", "npy", "--export-threads", 3, "--export-dir", out, "--output", run, np_=2, check=True,
           timeout=TIMEOUT)
    got = files_of(out)
    assert len(got) == 48
    assert got == reference_export(run, "logits", tmp_path)
    with h5py.File(os.path.join(run, "outputs.h5")) as f:
        np.testing.assert_array_equal(np.load(os.path.join(out, "7.npy")), f["outputs/logits"][7])
    # The encoder threads compressed the chunks through the export's wrapper of the rank file.
    with open(os.path.join(run, "report.json")) as f:
        assert all(r["seconds"]["encode"] > 0 for r in json.load(f)["ranks"])


def classifier(path):
    """input [B,3,64,64] -> the mean of each channel: logits [B,3], a three-class classifier."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 64, 64])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    node = helper.make_node("ReduceMean", ["input", "axes"], ["logits"], keepdims=0)
    graph = helper.make_graph([node], "classifier", [x], [y], initializer=[axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("outputs,what", [("logits", "classes"), ("topk_probs", "classes")])
def test_classes_table_equals_sluice_export(tmp_path, outputs, what):
    model = classifier(str(tmp_path / "classifier.onnx"))
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", *BASE, "--model", model, "--samples", 40, "--outputs", outputs, "--top-k", 2, "--export", what,
           "--output", run, np_=2, check=True, timeout=TIMEOUT)
    got = files_of(os.path.join(run, "export"))
    assert list(got) == ["classes.csv"]  # the ranks' line files are gone once the table is in place
    assert got == reference_export(run, what, tmp_path)
    assert got["classes.csv"].count(b"\n") == 41


def test_classes_lines_survive_kill_9_and_resume_as_sluice_export_writes_the_table(tmp_path):
    model = classifier(str(tmp_path / "classifier.onnx"))
    run = fresh_dir(str(tmp_path / "run"))
    out = os.path.join(run, "export")
    job = [*BASE, "--model", model, "--samples", 160, "--outputs", "logits", "--export", "classes", "--output", run]
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", *map(str, job), "--throttle-ms", "40",
           "--throttle-ranks", "0,1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [os.path.join(out, f".classes.r{r}.sluice-lines") for r in (0, 1)]
    deadline = time.time() + TIMEOUT
    while committed_samples(run) < 32 or not all(os.path.exists(p) and os.path.getsize(p) > 0 for p in lines):
        assert proc.poll() is None, f"the job ended before the kill: {proc.communicate()}"
        assert time.time() < deadline, "no progress to kill at"
        time.sleep(0.02)
    for pid in pids_of("sluice", run):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=TIMEOUT)
    assert not os.path.exists(os.path.join(out, "classes.csv"))
    with open(lines[0], "r+b") as f:  # a record cut short, as a kill in the middle of a write leaves it
        f.truncate(os.path.getsize(lines[0]) - 3)
    p = sluice("run", *job, "--resume", np_=2, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    got = files_of(out)
    assert list(got) == ["classes.csv"]
    assert got == reference_export(run, "classes", tmp_path)
    assert got["classes.csv"].count(b"\n") == 161


def test_masks_of_image_files_in_subfolders_are_named_after_their_keys_and_bad_files_have_none(tmp_path):
    """An encoded source: each row's key (a relative path) travels from the reader to the export."""
    images = tmp_path / "photos"
    rng = np.random.default_rng(3)
    for rel in ("a/b/cat.jpg", "a/dog.png", "z.jpg", "a/b/c/owl.jpg", "m.png"):
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(images / rel, format="PNG")
    (images / "a" / "bad.jpg").write_bytes(b"not an image")
    model = identity_model(str(tmp_path / "identity.onnx"))
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--input", images, "--model", model, "--output", run, "--outputs", "logits", "--resize", "32x32",
           "--batch-size", 2, "--chunk-batches", 1, "--device", "cpu", "--quiet", "--export", "masks", np_=2,
           check=True, timeout=TIMEOUT)
    got = files_of(os.path.join(run, "export"))
    assert sorted(got) == ["a/b/c/owl.png", "a/b/cat.png", "a/dog.png", "m.png", "z.png"]
    assert got == reference_export(run, "masks", tmp_path)


def test_a_run_killed_while_setting_up_its_export_folder_resumes_and_exports_everything(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    job = [*BASE, "--samples", 16, "--outputs", "argmax", "--export", "masks", "--output", run]
    sluice("run", *job, np_=2, check=True, timeout=TIMEOUT)
    out = os.path.join(run, "export")
    for n in os.listdir(out):  # as a kill right after the folder was made leaves it: a temporary at most
        os.remove(os.path.join(out, n))
    open(os.path.join(out, f"{MARKER}.sluice-partial"), "w").close()
    os.remove(os.path.join(run, "outputs.h5"))  # and the job not complete yet
    p = sluice("run", *job, "--resume", np_=2, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    got = files_of(out)
    assert len(got) == 16 and got == reference_export(run, "masks", tmp_path)


def test_an_export_folder_that_cannot_be_created_is_one_error_on_every_rank(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a regular file where the folder should go: even root cannot create under it
    run = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", *BASE, "--samples", 16, "--outputs", "argmax", "--export", "masks", "--export-dir",
               blocker / "masks", "--output", run, np_=2, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "export folder" in errs[0], p.stderr
    assert blocker.read_text() == "x"


def test_a_new_run_refuses_an_export_folder_holding_other_files(tmp_path):
    out = tmp_path / "masks"
    out.mkdir()
    (out / "0.png").write_bytes(b"someone else's")
    run = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", *BASE, "--samples", 16, "--outputs", "argmax", "--export", "masks", "--export-dir", out,
               "--output", run, np_=2, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "not empty" in errs[0], p.stderr
    assert (out / "0.png").read_bytes() == b"someone else's"


def test_export_of_an_output_the_format_cannot_take_is_a_usage_error(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    p = sluice("run", *BASE, "--samples", 16, "--outputs", "argmax", "--export", "classes", "--output", run, np_=2,
               timeout=TIMEOUT)
    assert p.returncode == 2, p.stderr
    errs = error_lines(p.stderr)
    assert len(errs) == 1 and "--export classes" in errs[0], p.stderr


def test_sluice_export_into_the_runs_own_export_folder_keeps_its_files_and_names_one_that_differs(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    out = os.path.join(run, "export")
    job = [*BASE, "--samples", 24, "--outputs", "argmax", "--export", "masks", "--output", run]
    sluice("run", *job, np_=2, check=True, timeout=TIMEOUT)
    live = files_of(out)
    assert len(live) == 24
    # Another run's export into this folder: the files are foreign to that run, refused as ever.
    other = fresh_dir(str(tmp_path / "other"))
    sluice("run", *BASE, "--samples", 24, "--outputs", "argmax", "--output", other, np_=2, check=True, timeout=TIMEOUT)
    p = sluice("export", other, "--out", out, np_=2, timeout=TIMEOUT)
    assert p.returncode == 3 and "was not written by sluice export" in p.stderr, p.stderr
    assert files_of(out) == live
    # One of the run's files changed after the run (as another export's would differ: another format,
    # --original-size): the export says which file, and whose, and replaces nothing.
    with open(os.path.join(out, "3.png"), "wb") as f:
        f.write(b"not the export's mask")
    p = sluice("export", run, np_=2, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "3.png" in lines[0] and "run's own --export masks" in lines[0], p.stderr
    assert "--overwrite" in p.stderr and "--out" in p.stderr
    assert open(os.path.join(out, "3.png"), "rb").read() == b"not the export's mask"
    # The same export over the run's files, byte for byte: kept as they are (the same inodes), not
    # rewritten; --overwrite replaces the one that differs.
    inodes = {n: os.stat(os.path.join(out, n)).st_ino for n in live}
    p = sluice("export", run, "--overwrite", np_=2, check=True, timeout=TIMEOUT)
    assert "1 masks written, 23 already there" in p.stdout, p.stdout
    assert files_of(out) == live == reference_export(run, "masks", tmp_path)
    assert {n: os.stat(os.path.join(out, n)).st_ino for n in live if n != "3.png"} == \
        {n: i for n, i in inodes.items() if n != "3.png"}
    p = sluice("export", run, np_=2, check=True, timeout=TIMEOUT)
    assert "0 masks written, 24 already there" in p.stdout, p.stdout


YOLO = os.path.join(ROOT, "tests", "data", "detect", "yolo_v8.onnx")
WHOLE = {  # --export FORMAT: the job's own options (the model: None for the classifier), the files it ends with
    "embeddings": (["--outputs", "embedding"], ["embeddings.keys.txt", "embeddings.npy"]),
    "detections": (["--model", YOLO, "--outputs", "detections", "--detection-format", "yolo", "--score-threshold", 0.3],
                   ["detections.csv", "detections.json", "images.json"]),
}


def whole_file_job(fmt, tmp_path, samples, run):
    """The job of an --export embeddings | detections run, and the files it ends with."""
    options, names = WHOLE[fmt]
    model = [] if "--model" in options else ["--model", classifier(str(tmp_path / "classifier.onnx"))]
    return [*BASE, *model, "--samples", samples, *options, "--export", fmt, "--output", run], names


@pytest.mark.parametrize("fmt", list(WHOLE))
def test_embeddings_and_detections_of_a_run_are_made_of_the_rows_the_ranks_kept(tmp_path, fmt):
    """A run that is not interrupted: the files come from the rows each rank kept as they committed
    (no block read from outputs.h5), and they are what `sluice export` writes."""
    run = fresh_dir(str(tmp_path / "run"))
    job, names = whole_file_job(fmt, tmp_path, 40, run)
    job = [a for a in job if a != "--quiet"]
    p = sluice("run", *job, "--export-threads", 2, np_=3, env={**MPI_ENV, "SLUICE_LOG_LEVEL": "debug"}, check=True,
               timeout=TIMEOUT)
    assert "export: 0 block(s) read from outputs.h5" in p.stdout + p.stderr, p.stderr
    got = files_of(os.path.join(run, "export"))
    assert sorted(got) == names and got == reference_export(run, fmt, tmp_path)


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("fmt", list(WHOLE))
def test_embeddings_and_detections_kept_as_rows_commit_survive_kill_9_and_resume_as_sluice_export_writes_them(
        tmp_path, fmt, ranks):
    """--export embeddings | detections: each rank keeps its committed rows in a record file as the
    job runs; killed (SIGKILL) once rows are committed and every rank has kept some, with a record
    cut short, and resumed, the run ends with the files `sluice export` writes, byte for byte, and
    no record file; a resume of the complete run writes a file a kill at its very end kept from
    being renamed into place."""
    run = fresh_dir(str(tmp_path / "run"))
    out = os.path.join(run, "export")
    job, names = whole_file_job(fmt, tmp_path, 160, run)
    throttled = ",".join(str(r) for r in range(ranks))
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", BIN, "run", *map(str, job), "--throttle-ms", "40",
           "--throttle-ranks", throttled]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = [os.path.join(out, f".{fmt}.r{r}.sluice-lines") for r in range(ranks)]
    deadline = time.time() + TIMEOUT
    while committed_samples(run) < 32 or not all(os.path.exists(p) and os.path.getsize(p) > 0 for p in records):
        assert proc.poll() is None, f"the job ended before the kill: {proc.communicate()}"
        assert time.time() < deadline, "no progress to kill at"
        time.sleep(0.02)
    for pid in pids_of("sluice", run):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=TIMEOUT)
    assert not any(os.path.exists(os.path.join(out, n)) for n in names)
    assert committed_samples(run) < 160
    with open(records[0], "r+b") as f:  # a record cut short, as a kill in the middle of a write leaves it
        f.truncate(os.path.getsize(records[0]) - 3)
    p = sluice("run", *job, "--resume", np_=ranks, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    got = files_of(out)
    assert sorted(got) == names  # the record files are gone once the files are in place
    assert got == reference_export(run, fmt, tmp_path)
    if fmt == "embeddings":
        with h5py.File(os.path.join(run, "outputs.h5")) as f:
            np.testing.assert_array_equal(np.load(os.path.join(out, "embeddings.npy")),
                                          f["outputs/embedding"][:].astype(np.float16))
        assert got["embeddings.keys.txt"] == b"".join(b"%d\n" % i for i in range(160))
    else:
        assert len(json.loads(got["images.json"])["images"]) == 160 and json.loads(got["detections.json"])
    # A kill after the job completed but before its last file was renamed into place: a --resume of
    # the complete run writes the files again (the same bytes), from outputs.h5.
    os.remove(os.path.join(out, names[-1]))
    p = sluice("run", *job, "--resume", np_=ranks, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert files_of(out) == got
    # `sluice export` into the run's own folder takes them as they are.
    p = sluice("export", run, "--what", fmt, check=True, timeout=TIMEOUT)
    assert f"0 files written, {len(names)} already there" in p.stdout, p.stdout
    assert files_of(out) == got


def test_embeddings_and_detections_of_outputs_they_cannot_take_are_usage_errors(tmp_path):
    model = classifier(str(tmp_path / "classifier.onnx"))
    for fmt, outputs in (("detections", "logits"), ("embeddings", "argmax")):
        run = fresh_dir(str(tmp_path / f"run-{fmt}"))
        job = [*BASE, "--samples", 16, "--outputs", outputs, "--export", fmt, "--output", run]
        if fmt == "detections":
            job += ["--model", model]
        p = sluice("run", *job, np_=2, timeout=TIMEOUT)
        assert p.returncode == 2, p.stderr
        errs = error_lines(p.stderr)
        assert len(errs) == 1 and f"--export {fmt}" in errs[0], p.stderr


@pytest.mark.parametrize("fmt", list(WHOLE))
def test_embeddings_and_detections_of_photos_with_a_bad_file_equal_sluice_export(tmp_path, fmt):
    """Photos of several sizes and one unreadable file: the bad sample has no record and no place
    in the files, the boxes go back to each photo's pixels (letterbox undone), as sluice export's."""
    images = tmp_path / "photos"
    rng = np.random.default_rng(5)
    for i, (w, h) in enumerate([(80, 60), (50, 120), (64, 64), (130, 70), (33, 47), (90, 90)]):
        (images / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(images / f"d{i % 2}" / f"{i:06d}.png")
    (images / "d1" / "000099.jpg").write_bytes(b"not an image")
    options, names = WHOLE[fmt]
    model = [] if "--model" in options else ["--model", classifier(str(tmp_path / "classifier.onnx"))]
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--input", images, *model, *options, "--letterbox", "--scale", 1 / 255, "--batch-size", 2,
           "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--quiet", "--export", fmt, "--output", run,
           np_=2, check=True, timeout=TIMEOUT)
    got = files_of(os.path.join(run, "export"))
    assert sorted(got) == names and got == reference_export(run, fmt, tmp_path)
    if fmt == "embeddings":
        assert np.load(os.path.join(run, "export", "embeddings.npy")).shape == (6, 3)
        assert b"000099" not in got["embeddings.keys.txt"]
    else:
        assert [im["file_name"] for im in json.loads(got["images.json"])["images"]] == \
            [f"d{i % 2}/{i:06d}.png" for i in (0, 2, 4, 1, 3, 5)]
