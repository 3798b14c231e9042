"""Parquet inputs through `sluice run` (io/parquet_source.cpp): a Hugging Face-style image table
({bytes, path} structs, two files of 5-row row groups) gives the outputs, keys and statuses of the
same PNG files in a folder, bit for bit, at 1, 2 and 3 ranks, and a run killed on one rank resumes to
the same rows; an array column gives what the same arrays in a .npy give; a null image and a corrupt
row group are bad samples naming the file and row group; a text table is opened and counted like a
JSONL corpus; a corrupt footer, a missing column and a misplaced option are one clear error and a
non-zero exit on every rank, under mpirun too.  The samples themselves (text against JSONL, arrays,
keys, bounds) are tested in tests/unit/test_io_parquet.cpp.  Tiny: CI is at its time limit.
"""
import io
import os

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, save
from PIL import Image

from support.sluice_test import QUICKSTART, error_lines, fresh_dir, sluice

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TIMEOUT = 120
RUN = ["--batch-size", 4, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--quiet"]


def identity_model(path):
    """uint8 [N, 3, 8, 8] -> float32: the stored logits are the pixels that reached the engine."""
    x = helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, 8, 8])
    g = helper.make_graph([helper.make_node("Cast", ["pixels"], ["logits"], to=TensorProto.FLOAT)], "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def png(rng, h, w):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("parquet")
    rng = np.random.default_rng(7)
    names = [f"img_{i:02d}.png" for i in range(22)]
    blobs = [png(rng, int(rng.integers(8, 20)), int(rng.integers(8, 20))) for _ in names]
    (d / "photos").mkdir()
    for n, b in zip(names, blobs):
        (d / "photos" / n).write_bytes(b)
    # Hugging Face's layout: data/train-0000N-of-00002.parquet, the Image feature as {bytes, path}.
    paths = names[:11] + ["missing.png"] + names[11:]
    image = pa.array([{"bytes": b, "path": n} for n, b in zip(names[:11], blobs[:11])] + [{"bytes": None, "path": "missing.png"}]
                     + [{"bytes": b, "path": n} for n, b in zip(names[11:], blobs[11:])],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.table({"image": image, "label": list(range(len(paths)))})
    (d / "hf" / "data").mkdir(parents=True)
    pq.write_table(table.slice(0, 12), d / "hf" / "data" / "train-00000-of-00002.parquet", row_group_size=5)
    pq.write_table(table.slice(12), d / "hf" / "data" / "train-00001-of-00002.parquet", row_group_size=5)
    # Arrays: the quickstart model's float32 [3, 64, 64], as a fixed_shape_tensor column and a .npy.
    x = rng.standard_normal((10, 3, 64, 64)).astype(np.float32)
    np.save(d / "x.npy", x)
    pq.write_table(pa.table({"x": pa.FixedShapeTensorArray.from_numpy_ndarray(x)}), d / "x.parquet", row_group_size=3)
    # Text, as test_text_inputs.py's corpus.
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(50)], "text": [f"passage {i}" for i in range(50)]}),
                   d / "c.parquet", row_group_size=16)
    # A row group whose pages are corrupt (the footer intact), and a file whose footer is not Parquet.
    pq.write_table(table, d / "corrupt.parquet", row_group_size=5, compression="snappy")
    cc = pq.ParquetFile(d / "corrupt.parquet").metadata.row_group(1).column(0)
    start = cc.dictionary_page_offset or cc.data_page_offset
    raw = bytearray((d / "corrupt.parquet").read_bytes())
    for k in range(start + 20, start + cc.total_compressed_size - 4):
        raw[k] ^= 0x5A
    (d / "corrupt.parquet").write_bytes(bytes(raw))
    (d / "footer.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    identity_model(d / "identity.onnx")
    return d


def require_parquet(p):
    if "Parquet inputs are not in this build" in p.stderr:
        pytest.fail("this sluice was built without Parquet inputs: CMake did not find the pyarrow wheel "
                    "(data_tools/install-deps.sh installs it; CI must build with it)")


def stored(out):
    """(keys, logits, status, {key: bad reason}) of outputs.h5."""
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["sample_key"][:]]
        bad = {keys[r["index"]]: r["reason"].decode().rstrip("\0") for r in f["bad_samples"][:]}
        return keys, f["outputs/logits"][:], f["sample_status"][:], bad


def run_images(data, out, *extra, np_=None, check=True):
    p = sluice("run", "--model", data / "identity.onnx", "--resize", "8x8", "--outputs", "logits", *RUN,
               "--output", fresh_dir(out), *extra, np_=np_, timeout=TIMEOUT)
    require_parquet(p)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def folder_run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("folder-run") / "out"
    run_images(data, out, "--input", data / "photos")
    return stored(out)


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_hf_image_table_gives_the_outputs_of_the_same_files_in_a_folder(data, folder_run, tmp_path, np_):
    run_images(data, tmp_path / "o", "--input", data / "hf", "--key-field", "image.path", np_=np_)
    keys, logits, status, bad = stored(tmp_path / "o")
    fkeys, flogits, fstatus, _ = folder_run
    assert len(keys) == 23 and keys[11] == "missing.png"
    ok = [i for i in range(23) if i != 11]
    assert [keys[i] for i in ok] == fkeys
    np.testing.assert_array_equal(logits[ok], flogits)  # bit for bit: the same bytes, decoded the same
    assert list(status[ok]) == list(fstatus) and fstatus.max() == 0
    assert status[11] == 1 and "train-00000-of-00002.parquet row 11" in bad["missing.png"], bad
    assert "its image (column 'image') is null" in bad["missing.png"], bad


def test_a_run_killed_on_one_rank_resumes_to_the_rows_of_an_unbroken_one(data, folder_run, tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    job = ["--input", data / "hf", "--key-field", "image.path"]
    run_images(data, whole, *job, np_=2)
    p = run_images(data, broken, *job, "--fail-ranks", 1, "--fail-at-batch", 2, np_=2, check=False)
    assert p.returncode != 0 and not (broken / "outputs.h5").exists(), p.stderr
    p = sluice("run", "--resume", "--output", broken, "--quiet", np_=3, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    a, b = stored(whole), stored(broken)
    assert a[0] == b[0] and a[3] == b[3]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])


def test_a_corrupt_row_group_is_bad_samples_naming_it(data, tmp_path):
    run_images(data, tmp_path / "o", "--input", data / "corrupt.parquet")
    keys, logits, status, bad = stored(tmp_path / "o")
    assert list(np.nonzero(status)[0]) == [5, 6, 7, 8, 9, 11], status  # row group 1, and the null image
    assert all("row group 1 of corrupt.parquet cannot be read" in bad[str(i)] for i in range(5, 10)), bad
    assert logits[status == 0].max() > 0


def test_an_array_column_gives_what_the_same_arrays_in_npy_give(data, tmp_path):
    common = ["--config", QUICKSTART, *RUN]
    p = sluice("run", *common, "--input", data / "x.parquet", "--output", fresh_dir(tmp_path / "pq"), np_=2,
               timeout=TIMEOUT)
    require_parquet(p)
    assert p.returncode == 0, p.stderr
    sluice("run", *common, "--input", data / "x.npy", "--output", fresh_dir(tmp_path / "npy"), check=True,
           timeout=TIMEOUT)
    with h5py.File(tmp_path / "pq" / "outputs.h5") as a, h5py.File(tmp_path / "npy" / "outputs.h5") as b:
        np.testing.assert_array_equal(a["outputs/logits"][:], b["outputs/logits"][:])
        assert a["outputs/logits"].shape[0] == 10


@pytest.mark.parametrize("np_", [None, 2])
def test_a_text_table_is_opened_and_counted_like_a_jsonl_corpus(data, tmp_path, np_):
    p = sluice("run", "--config", QUICKSTART, *RUN, "--input", data / "c.parquet", "--key-field", "id",
               "--output", tmp_path / "o", np_=np_, timeout=TIMEOUT)
    require_parquet(p)
    assert p.returncode in (2, 3), p.stderr  # the quickstart CNN takes no text
    # Read as passages: the CNN's input is none a text model's token inputs fill.
    assert "fills from text" in p.stderr, p.stderr
    assert "other samples than rank 0" not in p.stderr and "terminate called" not in p.stderr, p.stderr


@pytest.mark.parametrize("np_", [None, 2, 3])
def test_each_unusable_table_is_one_clear_error_on_every_rank(data, tmp_path, np_):
    cases = {
        "footer": (["--input", data / "footer.parquet"], 3, "footer.parquet is not a readable Parquet file"),
        "column": (["--input", data / "c.parquet", "--image-field", "pixels"], 3, "no column 'pixels' (--image-field)"),
        "text": (["--input", data / "c.parquet", "--text-field", "body"], 3, "no text column 'body' (--text-field)"),
        "key": (["--input", data / "c.parquet", "--key-field", "nope"], 3, "no column 'nope' (--key-field)"),
        "misplaced": (["--input", data / "x.npy", "--image-field", "image"], 2, "--image-field names a column of a Parquet"),
    }
    if np_ is not None:  # the same open on every rank: two cases are enough under mpirun
        cases = {k: cases[k] for k in ("footer", "column")}
    for what, (args, code, text) in cases.items():
        p = sluice("run", "--config", QUICKSTART, *RUN, *args, "--output", tmp_path / "o", np_=np_, timeout=TIMEOUT)
        require_parquet(p)
        assert p.returncode == code, (what, p.returncode, p.stderr)
        lines = error_lines(p.stderr)
        assert len(lines) == 1 and text in lines[0], (what, p.stderr)
        assert not (tmp_path / "o" / "rank-00000.h5").exists(), what


# ---- object storage: s3:// against moto's S3 server on localhost, through a proxy that throttles ----

class FaultyProxy:
    """An HTTP proxy in front of moto that fails the first read of each range of an object (a GET
    with a Range), every other one with 503 SlowDown, the others with their headers and half their
    body before dropping the connection: what a throttled S3 and a dropped connection look like."""

    def __init__(self, upstream):
        import http.client
        import http.server
        import threading
        self.upstream, self.seen, self.faults = upstream, {}, {"throttled": 0, "dropped": 0}
        lock, proxy = threading.Lock(), self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = None
                if self.command == "GET" and "Range" in self.headers:
                    with lock:
                        what = (self.path, self.headers["Range"])
                        if what not in proxy.seen:  # each range's first read fails, one way or the other
                            proxy.seen[what] = len(proxy.seen)
                            fault = ("throttled", "dropped")[proxy.seen[what] % 2]
                            proxy.faults[fault] += 1
                if fault == "throttled":
                    msg = b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                c = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                c.request(self.command, self.path, body=body, headers={k: v for k, v in self.headers.items()})
                r = c.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # A HEAD's length is the object's (no body follows).
                self.send_header("Content-Length", r.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if fault == "dropped" and len(data) > 1:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(data):
    """moto's server on localhost with the image table under s3://sluice/hf/; the environment that
    points sluice at it through the faulty proxy."""
    import socket
    import subprocess
    import sys
    import time
    pytest.importorskip("moto.server", reason="moto[server] (pip) runs the test S3 server")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        import boto3  # moto's own dependency (pyarrow's multipart upload trips over moto's checksums)
        c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="test",
                         aws_secret_access_key="test", region_name="us-east-1")
        c.create_bucket(Bucket="sluice")
        for f in sorted((data / "hf" / "data").iterdir()):
            c.put_object(Bucket="sluice", Key=f"hf/data/{f.name}", Body=f.read_bytes())
        proxy = FaultyProxy(("127.0.0.1", port))
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
                   AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}", AWS_ACCESS_KEY_ID="test",
                   AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        yield env, proxy
        proxy.server.shutdown()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_an_s3_table_behind_throttling_and_dropped_connections_gives_the_local_rows(data, s3, tmp_path):
    env, proxy = s3
    local, remote = tmp_path / "local", tmp_path / "s3"
    run_images(data, local, "--input", data / "hf", "--key-field", "image.path")
    p = sluice("run", "--model", data / "identity.onnx", "--resize", "8x8", "--outputs", "logits", *RUN, "--input",
               "s3://sluice/hf/", "--key-field", "image.path", "--output", fresh_dir(remote), np_=2, env=env,
               timeout=TIMEOUT)
    require_parquet(p)
    assert p.returncode == 0, p.stderr
    a, b = stored(local), stored(remote)
    assert a[0] == b[0] and a[3] == b[3]
    np.testing.assert_array_equal(a[1], b[1])
    assert proxy.faults["throttled"] > 0 and proxy.faults["dropped"] > 0, proxy.faults
    # A glob of objects; a prefix that holds none is one clear error on every rank.
    p = sluice("run", "--config", QUICKSTART, *RUN, "--input", "s3://sluice/nothing/", "--output", tmp_path / "o",
               np_=2, env=env, timeout=TIMEOUT)
    assert p.returncode == 3, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "s3://sluice/nothing/" in lines[0], p.stderr
