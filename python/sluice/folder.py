"""A Sluice run folder read from Python: rank files and their ledgers while a job runs or after it
stopped, outputs.h5 once it is complete (docs/file-formats.md has every dataset)."""
import fcntl
import glob
import json
import os
import time
from typing import Dict, Iterator, List, NamedTuple, Optional

import h5py
import numpy as np


class RunError(RuntimeError):
    """A run folder that cannot be read, or a `sluice run` that failed (`status`: its exit status)."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


class Batch(NamedTuple):
    """The rows of one commit: sample indices, keys, statuses and each stored output's rows."""
    indices: np.ndarray          # int64 [n]
    keys: List[str]
    status: np.ndarray           # uint8 [n]: 0 ok, 1 bad sample, 2 NaN/Inf in the input
    outputs: Dict[str, np.ndarray]


def decode_key(raw) -> str:
    """A stored key (NUL-padded bytes) as str; bytes that are not UTF-8 survive as surrogates
    (os.fsencode(key) gives the file name's bytes back)."""
    if isinstance(raw, str):
        return raw
    return bytes(raw).rstrip(b"\0").decode("utf-8", "surrogateescape")


def _open_h5(path: str) -> h5py.File:
    """A closed rank file opens plainly; one a writer holds (or a killed writer left) as a SWMR reader."""
    try:
        return h5py.File(path, "r")
    except OSError:
        return h5py.File(path, "r", swmr=True)


def _read(dataset, spans=None, dtype=None) -> np.ndarray:
    """A dataset's rows: all when `spans` is None, else the runs of rows [(first_row, count), ...]
    one after another (each run read as one hyperslab).  bfloat16 (a 2-byte HDF5 float type) and
    any `dtype` asked for are converted by HDF5 on the way."""
    if dtype is None and dataset.attrs.get("sluice_dtype", b"") in (b"bfloat16", "bfloat16"):
        dtype = np.float32
    source = dataset.astype(dtype) if dtype is not None else dataset
    if spans is None:
        return source[()] if dataset.shape == () else source[:]
    parts = [source[row:row + count] for row, count in spans]
    if not parts:
        return np.zeros((0,) + dataset.shape[1:], dtype or dataset.dtype)
    return np.concatenate(parts)


def _ledger(f: h5py.File):
    """The committed records (first_index, count, first_row) of an open rank file, in commit order;
    a slot whose record never reached the disk (all -1) ends them."""
    if "ledger" not in f:
        return []
    d = f["ledger"]
    if hasattr(d, "refresh"):
        try:
            d.refresh()
        except Exception:  # noqa: BLE001 - a plainly opened file has nothing to refresh
            pass
    out = []
    for rec in d[:]:
        if rec["seq"] < 0 or rec["first_row"] < 0:
            break
        if rec["count"] > 0:
            out.append((int(rec["first_index"]), int(rec["count"]), int(rec["first_row"])))
    return out


class Run:
    """One run folder.  Complete runs read through outputs.h5 (lazily: `dataset(name)` is the
    virtual HDF5 dataset, sliced rows are read on demand); incomplete ones through the rank files'
    ledgers, giving the committed rows in sample order."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self.exit_status: Optional[int] = None  # set by sluice.run()
        if not os.path.isdir(self.path):
            raise RunError(f"{self.path}: no such run folder")
        if not self.complete and not self.rank_files():
            raise RunError(f"{self.path} holds no rank files (rank-*.h5): not a Sluice run folder, or its job "
                           "has not committed anything yet")

    # ---- what the folder holds -----------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """Every sample committed and outputs.h5 written."""
        return os.path.exists(os.path.join(self.path, "outputs.h5"))

    def rank_files(self) -> List[str]:
        return sorted(glob.glob(os.path.join(glob.escape(self.path), "rank-[0-9]*.h5")))

    def _outputs_h5(self) -> h5py.File:
        return h5py.File(os.path.join(self.path, "outputs.h5"), "r")

    @property
    def total(self) -> int:
        """The job's sample count N."""
        if self.complete:
            with self._outputs_h5() as f:
                return int(f.attrs["total_samples"])
        with _open_h5(self.rank_files()[0]) as f:
            return int(f.attrs["total_samples"])

    @property
    def committed(self) -> int:
        """Samples committed so far (every one once the run is complete)."""
        if self.complete:
            return self.total
        return sum(count for _, f in self._open_rank_files() for _, count, _ in _ledger(f))

    @property
    def outputs(self) -> List[str]:
        """The stored outputs' dataset names (topk as its _values and _indices, detections with _count)."""
        if self.complete:
            with self._outputs_h5() as f:
                return sorted(f["outputs"].keys()) if "outputs" in f else []
        with _open_h5(self.rank_files()[0]) as f:
            return sorted(f["outputs"].keys()) if "outputs" in f else []

    def report(self) -> Optional[dict]:
        """report.json (the last attempt that got that far), or None."""
        p = os.path.join(self.path, "report.json")
        if not os.path.exists(p):
            return None
        with open(p) as fh:
            return json.load(fh)

    def attempts(self) -> List[dict]:
        p = os.path.join(self.path, "attempts.json")
        if not os.path.exists(p):
            return []
        with open(p) as fh:
            return json.load(fh).get("attempts", [])

    # ---- rows ------------------------------------------------------------------------------------
    def _open_rank_files(self) -> Iterator:
        """(path, open file) of each rank file that is an HDF5 file yet, closed after its turn."""
        for path in self.rank_files():
            try:
                f = _open_h5(path)
            except OSError:  # a rank file being created (not yet an HDF5 file)
                continue
            with f:
                yield path, f

    def _assemble(self, names, dtype=None):
        """Committed rows of every rank file in sample order: (indices, {name: rows})."""
        indices, parts = [], {n: [] for n in names}
        for _, f in self._open_rank_files():
            spans = [(row, count) for _, count, row in _ledger(f)]
            indices.append(_read(f["sample_index"], spans))
            for n in names:
                parts[n].append(self._rank_rows(f, n, spans, dtype))
        if not indices:
            return np.zeros(0, np.int64), {n: np.zeros(0) for n in names}
        idx = np.concatenate(indices)
        order = np.argsort(idx, kind="stable")
        return idx[order], {n: np.concatenate(v)[order] for n, v in parts.items()}

    @staticmethod
    def _rank_rows(f, name, spans, dtype=None):
        if name == "sample_key":
            return np.array([decode_key(k) for k in _read(f["sample_key"], spans)], dtype=object)
        if name in ("sample_status", "sample_size"):
            return _read(f[name], spans)
        return _read(f["outputs"][name], spans, dtype)

    def indices(self) -> np.ndarray:
        """The committed samples' indices in order: arange(N) once complete."""
        if self.complete:
            return np.arange(self.total, dtype=np.int64)
        return self._assemble([])[0]

    def keys(self) -> np.ndarray:
        """Each committed sample's key (str), in sample order."""
        if self.complete:
            with self._outputs_h5() as f:
                return np.array([decode_key(k) for k in f["sample_key"][:]], dtype=object)
        return self._assemble(["sample_key"])[1]["sample_key"]

    def status(self) -> np.ndarray:
        """Each committed sample's status (uint8: 0 ok, 1 bad sample, 2 NaN/Inf in the input)."""
        if self.complete:
            with self._outputs_h5() as f:
                return f["sample_status"][:]
        return self._assemble(["sample_status"])[1]["sample_status"]

    def bad_samples(self) -> Dict[int, str]:
        """{sample index: reason} of the bad samples (complete runs)."""
        if not self.complete:
            raise RunError(f"{self.path}: bad_samples() reads outputs.h5; the run is not complete "
                           f"({self.committed} of {self.total} committed)")
        with self._outputs_h5() as f:
            if "bad_samples" not in f:
                return {}
            return {int(r["index"]): decode_key(r["reason"]) for r in f["bad_samples"][:]}

    def array(self, name: str, dtype=None) -> np.ndarray:
        """One stored output as a numpy array, rows in sample order (only the committed rows while
        the run is incomplete: `indices()` says which).  `dtype` converts (bfloat16 reads as float32)."""
        if name not in self.outputs:
            raise KeyError(f"{name!r} is not a stored output of {self.path}; it stores {', '.join(self.outputs)}")
        if self.complete:
            with self._outputs_h5() as f:
                return _read(f["outputs"][name], None, dtype)
        return self._assemble([name], dtype)[1][name]

    __getitem__ = array

    def dataset(self, name: str) -> h5py.Dataset:
        """The virtual dataset of a complete run's output, read lazily (d[i:j] reads those rows only).
        The file stays open as long as the dataset is referenced."""
        if not self.complete:
            raise RunError(f"{self.path}: the run is not complete ({self.committed} of {self.total} committed); "
                           "array(name) gives the committed rows")
        f = self._outputs_h5()
        if name not in f.get("outputs", {}):
            f.close()
            raise KeyError(f"{name!r} is not a stored output of {self.path}")
        return f["outputs"][name]

    # ---- a running job ---------------------------------------------------------------------------
    def running(self) -> bool:
        """A job holds the folder: its last attempt is on record as running and the folder's lock is
        held (an attempt killed with -9 holds no lock)."""
        if self.complete:
            return False
        att = self.attempts()
        if att and att[-1].get("ended", "running") != "running":
            return False
        lock = os.path.join(self.path, ".sluice.lock")
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return bool(att) is False  # no lock file yet: a job that is starting
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True  # held by the job
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def follow(self, poll_s: float = 0.5, timeout_s: Optional[float] = None,
               names: Optional[List[str]] = None, dtype=None) -> Iterator[Batch]:
        """Yields each commit's rows as they land (per rank file, in commit order), until the job ends
        and every committed row was yielded, or `timeout_s` passes.  Rows of earlier attempts are
        yielded first.  `names`: the outputs to read (default every stored output)."""
        start = time.monotonic()
        seen: Dict[str, int] = {}
        while True:
            live = self.running()
            got = False
            for path, f in self._open_rank_files():
                records = _ledger(f)
                wanted = names if names is not None else sorted(f["outputs"].keys())
                for _, count, row in records[seen.get(path, 0):]:
                    span = [(row, count)]
                    yield Batch(indices=_read(f["sample_index"], span),
                                keys=[decode_key(k) for k in _read(f["sample_key"], span)],
                                status=_read(f["sample_status"], span),
                                outputs={n: _read(f["outputs"][n], span, dtype) for n in wanted})
                    got = True
                seen[path] = len(records)
            if not live and not got:
                return
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                return
            if not got:
                time.sleep(poll_s)


def open_run(path) -> Run:
    """The run folder at `path` (RunError when it is not one)."""
    return Run(path)
