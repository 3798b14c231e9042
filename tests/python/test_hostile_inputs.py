"""Hostile inputs, round 3: inputs that used to hang a rank, cost their size in memory, read as
zeros, drop samples unsaid or fail on an invisible character.  Each case runs the real binary (under
mpirun -np 2 where the ranks each open the input) with a timeout, so a hang is a failure, not a
stuck suite.  References: PIL's convert("RGB") for 16-bit PNGs, h5py for the virtual dataset."""
import io
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import threading
import time
import zlib

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper, save
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN, MPI_ENV, QUICKSTART, ROOT, error_lines, fresh_dir, rank_files, report, sluice  # noqa: E402
from mpi.test_resume import committed_samples  # noqa: E402

TIMEOUT = 120
H, W = 6, 8  # every test image is W x H, the identity model's input size


def identity_model(path, h=H, w=W):
    """uint8 [N, 3, h, w] -> float32 logits: the stored logits are the pixels that reached the model."""
    x = helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 3, h, w])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, h, w])
    g = helper.make_graph([helper.make_node("Cast", ["pixels"], ["logits"], to=TensorProto.FLOAT)], "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return identity_model(tmp_path_factory.mktemp("model") / "id.onnx")


def jpeg_bytes(seed):
    rng = np.random.RandomState(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.randint(0, 256, (H, W, 3), dtype=np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def write_images(folder, names):
    os.makedirs(folder, exist_ok=True)
    for i, name in enumerate(names):
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(jpeg_bytes(i))


def run_images(inp, out, model, *options, np_=2, timeout=TIMEOUT):
    cmd = [BIN, "run", "--input", str(inp), "--model", model, "--output", fresh_dir(str(out)), "--outputs", "logits",
           "--batch-size", 2, "--chunk-batches", 1, "--device", "cpu", "--cpu-threads", 1, "--quiet", *options]
    cmd = [str(c) for c in cmd]
    if np_:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", *cmd]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=MPI_ENV, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no outcome within {timeout} s (a hang): {' '.join(cmd)}")


def bad_samples(out):
    """{key: reason} of outputs.h5's bad samples, and the keys in order."""
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        return {keys[r["index"]]: r["reason"].decode().rstrip("\0") for r in f["bad_samples"][:]}, keys


def pixels(out):
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        return {k: f["outputs/logits"][i].astype(np.uint8) for i, k in enumerate(keys)}


def one_error(p, status, *words):
    assert p.returncode == status, f"exit {p.returncode}\n{p.stderr}"
    errors = error_lines(p.stderr)
    assert len(errors) == 1, p.stderr
    for w in words:
        assert w in errors[0] + " ".join(p.stderr.splitlines()), p.stderr


# ---- FIFOs: never block a rank ------------------------------------------------------------------

def test_an_image_replaced_by_a_fifo_during_the_run_is_a_bad_sample_not_a_hang(tmp_path, model):
    folder = tmp_path / "imgs"
    names = [f"{i:03d}.jpg" for i in range(48)]
    write_images(folder, names)
    out = str(tmp_path / "run")
    # Static ranges: rank 0 reads 000..023, rank 1 024..047; the last of each is replaced once the
    # ranks have committed 4 samples together (the bounded slots keep each rank within a few
    # batches of its commits, so neither has reached its last file then).
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", "--input", str(folder), "--model", model,
           "--output", out, "--outputs", "logits", "--batch-size", "2", "--chunk-batches", "1", "--prefetch", "1",
           "--egress-buffers", "1", "--reader-threads", "1", "--sharding", "static", "--device", "cpu",
           "--cpu-threads", "1", "--quiet", "--throttle-ms", "100", "--throttle-ranks", "0,1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while proc.poll() is None and not (len(rank_files(out)) == 2 and committed_samples(out) >= 4):
            assert time.time() < deadline, "no progress within 60 s"
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()[1]
        for victim in ("023.jpg", "047.jpg"):
            os.remove(folder / victim)
            os.mkfifo(folder / victim)
        try:
            _, stderr = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail("a reader blocked on the FIFO (a hang)")
    finally:
        if proc.poll() is None:
            for victim in ("023.jpg", "047.jpg"):  # a writer end releases a reader blocked in open()
                try:
                    os.close(os.open(folder / victim, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    bad, keys = bad_samples(out)
    assert len(keys) == 48
    assert set(bad) == {"023.jpg", "047.jpg"}, bad
    assert all("FIFO" in why for why in bad.values()), bad


@pytest.mark.parametrize("name,kind", [("list.txt", "auto"), ("shard.tar", "auto"), ("shard-{0..0}.tar", "auto"),
                                       ("noext", "list"), ("noext", "tar")])
def test_a_fifo_named_as_the_input_is_one_clear_error_not_a_hang(tmp_path, model, name, kind):
    os.mkfifo(tmp_path / name.replace("{0..0}", "0"))
    p = run_images(tmp_path / name, tmp_path / "out", model, "--input-kind", kind)
    one_error(p, 3, "FIFO")


# ---- Files too large to be an image: never read whole, never sized into the slots ------------------

def sparse(path, size, head=b""):
    with open(path, "wb") as f:
        f.write(head)
    os.truncate(path, size)


def sparse_tar(path, members):
    """A tar (ustar) of (name, size, head) members without writing their bytes: holes."""
    def header(name, size):
        h = bytearray(512)
        h[0:len(name)] = name.encode()
        h[100:108] = b"0000644\0"
        h[108:116] = b"0000000\0"
        h[116:124] = b"0000000\0"
        h[124:136] = (b"%011o\0" % size) if size < 8 ** 11 else b"\x80" + size.to_bytes(11, "big")
        h[136:148] = b"00000000000\0"
        h[156:157] = b"0"
        h[257:263] = b"ustar\0"
        h[263:265] = b"00"
        h[148:156] = b" " * 8
        h[148:156] = b"%06o\0 " % sum(h)
        return bytes(h)

    pos = 0
    with open(path, "wb") as f:
        for name, size, head in members:
            f.seek(pos)
            f.write(header(name, size))
            f.write(head)
            pos += 512 + (size + 511) // 512 * 512
        os.truncate(path, pos + 1024)  # the two zero blocks that end the archive


def run_measured(cmd):
    """Runs cmd; returns (exit status, stderr, the largest resident set of it or a child, bytes)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=MPI_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    try:
        stderr = proc.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)  # the rusage of this child and the children it waited for
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss * 1024


def test_huge_non_image_files_are_bad_samples_without_being_read(tmp_path, model):
    folder = tmp_path / "imgs"
    write_images(folder, ["a.jpg", "b.jpg", "c.jpg"])
    sparse(folder / "mid.jpg", 600 << 20)                        # 600 MB of zeros: no JPEG, seen from its head
    sparse(folder / "big.jpg", 3 << 30)                          # 3 GB: beyond any image file
    sparse(folder / "huge.png", 40 << 30)                        # 40 GB
    sparse(folder / "looks.jpg", 2 << 30, b"\xff\xd8\xff\xe0")   # a JPEG start, 2 GB: beyond any image file too
    out = str(tmp_path / "run")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", "--input", str(folder), "--model", model,
           "--output", out, "--outputs", "logits", "--batch-size", "2", "--device", "cpu", "--cpu-threads", "1",
           "--quiet"]
    rc, stderr, peak = run_measured(cmd)
    assert rc == 0, stderr
    bad, keys = bad_samples(out)
    assert keys == ["a.jpg", "b.jpg", "big.jpg", "c.jpg", "huge.png", "looks.jpg", "mid.jpg"]
    assert set(bad) == {"big.jpg", "huge.png", "looks.jpg", "mid.jpg"}, bad
    assert "not a JPEG or PNG file" in bad["mid.jpg"] and "not read" in bad["mid.jpg"], bad
    for name in ("big.jpg", "huge.png", "looks.jpg"):
        assert "larger than any image file the decoders take" in bad[name], bad
    assert peak < (1 << 30), f"peak resident memory {peak / 2**30:.1f} GiB"


def test_a_huge_tar_member_is_a_bad_sample_without_being_read(tmp_path, model):
    good = jpeg_bytes(1)
    shard = tmp_path / "s.tar"
    sparse_tar(shard, [("a.jpg", len(good), good), ("big.jpg", 3 << 30, b""), ("c.jpg", len(good), good),
                       ("huge.jpg", 40 << 30, b"\xff\xd8\xff"), ("mid.jpg", 600 << 20, b"")])
    out = str(tmp_path / "run")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", BIN, "run", "--input", str(shard), "--model", model,
           "--output", out, "--outputs", "logits", "--batch-size", "2", "--device", "cpu", "--cpu-threads", "1",
           "--quiet"]
    rc, stderr, peak = run_measured(cmd)
    assert rc == 0, stderr
    bad, keys = bad_samples(out)
    assert keys == ["a", "big", "c", "huge", "mid"]
    assert set(bad) == {"big", "huge", "mid"}, bad
    assert "not a JPEG or PNG file" in bad["mid"], bad
    assert "larger than any image file" in bad["big"] and "larger than any image file" in bad["huge"], bad
    assert peak < (1 << 30), f"peak resident memory {peak / 2**30:.1f} GiB"


# ---- 16-bit PNGs as PIL's convert("RGB") makes them -------------------------------------------------

def png_bytes(array, color_type):
    """A PNG of `array` (uint16 [H, W, C], big-endian samples) with bit depth 16, written by hand:
    PIL cannot write 16-bit grey+alpha or RGB."""
    h, w = array.shape[:2]
    raw = b"".join(b"\0" + array[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_16_bit_pngs_reach_the_model_as_pil_convert_rgb_makes_them(tmp_path, model):
    rng = np.random.RandomState(3)
    folder = tmp_path / "png16"
    folder.mkdir()
    label_map = rng.randint(0, 256, (H, W, 1)).astype(np.uint16)  # a 0..255 label map stored in 16 bits
    wide_grey = rng.randint(0, 65536, (H, W, 1)).astype(np.uint16)
    cases = {
        "grey16_labels.png": (label_map, 0),
        "grey16_wide.png": (wide_grey, 0),
        "grey_alpha16.png": (rng.randint(0, 65536, (H, W, 2)).astype(np.uint16), 4),
        "rgb16.png": (rng.randint(0, 65536, (H, W, 3)).astype(np.uint16), 2),
        "rgba16.png": (rng.randint(0, 65536, (H, W, 4)).astype(np.uint16), 6),
    }
    for name, (a, ct) in cases.items():
        (folder / name).write_bytes(png_bytes(a, ct))
    out = str(tmp_path / "run")
    p = run_images(folder, out, model)
    assert p.returncode == 0, p.stderr
    got = pixels(out)
    for name in cases:
        want = np.asarray(Image.open(folder / name).convert("RGB")).transpose(2, 0, 1)
        assert np.array_equal(got[name], want), (name, got[name][0], want[0])
    assert got["grey16_labels.png"].any()  # not all black


# ---- HDF5 virtual datasets whose sources moved ----------------------------------------------------

def test_a_virtual_dataset_whose_source_moved_is_refused_not_read_as_zeros(tmp_path):
    n = 32
    x = np.random.RandomState(2).rand(n, 3, 64, 64).astype(np.float32) + 0.5
    with h5py.File(tmp_path / "part0.h5", "w") as f:
        f["x"] = x[:16]
    with h5py.File(tmp_path / "part1.h5", "w") as f:
        f["x"] = x[16:]
    layout = h5py.VirtualLayout(shape=x.shape, dtype=np.float32)
    layout[:16] = h5py.VirtualSource("part0.h5", "x", shape=(16, 3, 64, 64))  # relative: beside the virtual file
    layout[16:] = h5py.VirtualSource("part1.h5", "x", shape=(16, 3, 64, 64))
    with h5py.File(tmp_path / "all.h5", "w") as f:
        f.create_virtual_dataset("images", layout)
    job = ["--config", QUICKSTART, "--input", tmp_path / "all.h5", "--input-dataset", "/images", "--device", "cpu",
           "--cpu-threads", 1, "--quiet"]
    # With its sources in place it reads the data (run from another folder: relative to the file).
    p = sluice("run", *job, "--output", tmp_path / "ok", np_=2, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "all.h5", "r") as f:
        assert np.array_equal(f["images"][:], x)
    os.makedirs(tmp_path / "elsewhere")
    shutil.move(tmp_path / "part1.h5", tmp_path / "elsewhere" / "part1.h5")
    p = sluice("run", *job, "--output", tmp_path / "moved", np_=2, timeout=TIMEOUT)
    one_error(p, 3, "virtual dataset", "part1.h5", "is missing", "HDF5_VDS_PREFIX")
    assert not (tmp_path / "moved" / "outputs.h5").exists()
    # The source file back, but without its dataset: refused too.
    with h5py.File(tmp_path / "part1.h5", "w") as f:
        f["y"] = x[16:]
    p = sluice("run", *job, "--output", tmp_path / "nods", np_=2, timeout=TIMEOUT)
    one_error(p, 3, "virtual dataset", "part1.h5:x", "does not exist")


# ---- tar link members ---------------------------------------------------------------------------

def test_tar_hard_links_read_their_target_and_symlinks_are_counted(tmp_path, model):
    a, b = jpeg_bytes(1), jpeg_bytes(2)
    shard = tmp_path / "links.tar"
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as t:
        for name, data in [("a.jpg", a), ("b.jpg", b)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        hard = tarfile.TarInfo("c.jpg")
        hard.type, hard.linkname = tarfile.LNKTYPE, "a.jpg"
        t.addfile(hard)
        soft = tarfile.TarInfo("d.jpg")
        soft.type, soft.linkname = tarfile.SYMTYPE, "b.jpg"
        t.addfile(soft)
        dangling = tarfile.TarInfo("e.jpg")
        dangling.type, dangling.linkname = tarfile.LNKTYPE, "not-in-this-shard.jpg"
        t.addfile(dangling)
    out = str(tmp_path / "run")
    p = run_images(shard, out, model)
    assert p.returncode == 0, p.stderr
    got = pixels(out)
    assert sorted(got) == ["a", "b", "c"], sorted(got)
    assert np.array_equal(got["c"], got["a"]) and got["a"].any()
    assert "2 link members skipped" in report(out)["input"], report(out)["input"]


# ---- folder order with a linked alias of a sub-folder ----------------------------------------------

def test_a_folder_linked_twice_is_listed_under_the_first_name_in_byte_order(tmp_path, model):
    root = tmp_path / "imgs"
    root.mkdir()
    expected = []
    # Pairs of (real folder, link to it): the link's name sorts first in half the pairs, is created
    # first in half of them; readdir's order (creation, reverse creation or a hash) then differs
    # from byte order for some pair whatever the file system does.
    for i in range(8):
        real, alias = (f"r{i}", f"l{i}") if i % 2 == 0 else (f"l{i}", f"r{i}")
        order = [real, alias] if i % 4 < 2 else [alias, real]
        for name in order:
            if name == real:
                write_images(root / real, [f"{i}.jpg"])
            else:
                os.symlink(real, root / alias)
        expected.append(f"{min(real, alias)}/{i}.jpg")
    out = str(tmp_path / "run")
    p = run_images(root, out, model)
    assert p.returncode == 0, p.stderr
    _, keys = bad_samples(out)
    assert keys == sorted(expected), keys


# ---- list files and compressed shards -------------------------------------------------------------

def test_a_list_with_a_utf8_byte_order_mark_reads_its_first_path(tmp_path, model):
    write_images(tmp_path / "imgs", ["a.jpg", "b.jpg"])
    lst = tmp_path / "files.txt"
    lst.write_bytes(b"\xef\xbb\xbfimgs/a.jpg\r\nimgs/b.jpg\r\n")
    out = str(tmp_path / "run")
    p = run_images(lst, out, model)
    assert p.returncode == 0, p.stderr
    bad, keys = bad_samples(out)
    assert keys == ["imgs/a.jpg", "imgs/b.jpg"] and not bad


@pytest.mark.parametrize("tool,words", [("gzip", "gunzip"), ("xz", "unxz")])
@pytest.mark.parametrize("name", ["shard.tar", "shard.tar.gz", "shard-{0..0}.tar"])
def test_a_compressed_shard_says_compressed_and_how_to_decompress(tmp_path, model, tool, words, name):
    if shutil.which(tool) is None:
        pytest.skip(f"no {tool}")
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as t:
        data = jpeg_bytes(0)
        info = tarfile.TarInfo("a.jpg")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    packed = subprocess.run([tool, "-c", str(plain)], capture_output=True, check=True).stdout
    (tmp_path / name.replace("{0..0}", "0")).write_bytes(packed)
    p = run_images(tmp_path / name, tmp_path / "out", model)
    one_error(p, 3, "compressed tar shards are not supported", words)
