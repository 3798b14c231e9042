#!/usr/bin/env python3
"""A finished run's results as one Parquet table, one row per sample, for dataframe tools.

    python3 data_tools/export_parquet.py RUN_DIR --out results.parquet [--top-k 5] [--masks DIR]

Columns:
  key        the sample's key (/sample_key; the index for runs without keys)
  index      the sample's index in the input
  status     0 ok, else why the sample has no result (1 bad sample, 2 non-finite input)
  class_ids  list<int32>: the top-k classes, largest first        (classification runs)
  probs      list<float32>: their probabilities                   (from topk_probs, softmax or logits)
  logits     list<float32>: instead of probs when the run stored only a topk output (logits)
  embedding  list<float32>: the vector of `sluice run --outputs embedding`  (encoder runs)
  mask_path  the mask PNG of the sample, relative to --masks DIR   (with --masks: the folder that
             `sluice export RUN_DIR --what masks` wrote; read from its manifest .sluice-export.json)
Bad samples have null results.  Reads RUN_DIR/outputs.h5 with h5py; needs pyarrow
(data_tools/requirements.txt).  Exit status 3 with one line when the run is not complete.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - the message is the point
    print("export_parquet.py: needs pyarrow (pip install -r data_tools/requirements.txt)", file=sys.stderr)
    sys.exit(2)

BLOCK = 65536  # rows read at once


def fail(msg):
    print(f"export_parquet.py: {msg}", file=sys.stderr)
    sys.exit(3)


def open_run(run_dir):
    path = os.path.join(run_dir, "outputs.h5")
    if not os.path.exists(path):
        fail(f"{run_dir} has no outputs.h5: the run is not complete; finish it with "
             f"`sluice run --resume --output {run_dir} ...`")
    f = h5py.File(path, "r")
    index = f["sample_index"][:]
    if not np.array_equal(index, np.arange(len(index))):
        fail(f"{path}: /sample_index does not map every sample (the run is not complete; --resume it)")
    return f


def text_of(key):
    """A key as Sluice writes it in JSON (docs/file-formats.md): UTF-8 as is; otherwise each byte
    outside UTF-8 as \\xHH and each backslash doubled, so the keys match the export manifest's."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def keys_of(f, n):
    if "sample_key" not in f:
        return [str(i) for i in range(n)]
    return [text_of(k) if isinstance(k, bytes) else str(k) for k in f["sample_key"][:]]


def top_k_columns(f, k):
    """(class ids [N, k], values [N, k], value column name) from the best stored output."""
    out = f["outputs"]
    if "topk_probs_values" in out:
        return out["topk_probs_indices"], out["topk_probs_values"], "probs", None
    for name in ("softmax", "logits"):
        if name in out and np.prod(out[name].shape[1:]) == out[name].shape[1]:
            return None, out[name], "probs", name == "logits"
    if "topk_values" in out:
        return out["topk_indices"], out["topk_values"], "logits", None
    return None, None, None, None


def softmax_top_k(scores, k, softmax):
    s = scores.reshape(len(scores), -1).astype(np.float64)
    if softmax:
        s = np.exp(s - s.max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return order.astype(np.int32), np.take_along_axis(s, order, 1).astype(np.float32)


def mask_paths(masks_dir):
    """key -> mask file (relative to masks_dir) from the export manifest's last record per file."""
    manifest = os.path.join(masks_dir, ".sluice-export.json")
    if not os.path.exists(manifest):
        fail(f"{masks_dir} has no .sluice-export.json: export the masks with `sluice export RUN_DIR --out {masks_dir}`")
    by_key = {}
    with open(manifest) as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed export
            if "file" in rec and rec.get("key"):
                by_key[rec["key"]] = rec["file"]
    return by_key


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--out", required=True, help="the .parquet file to write")
    p.add_argument("--top-k", type=int, default=5, help="classes per row (at most what a topk output holds)")
    p.add_argument("--masks", help="folder of `sluice export --what masks` (adds mask_path)")
    args = p.parse_args(argv)
    if args.top_k < 1:
        p.error("--top-k must be at least 1")

    f = open_run(args.run_dir)
    n = len(f["sample_index"])
    keys = keys_of(f, n)
    status = f["sample_status"][:] if "sample_status" in f else np.zeros(n, np.uint8)
    ok = status == 0
    columns = {"key": pa.array(keys, pa.string()), "index": pa.array(np.arange(n, dtype=np.int64)),
               "status": pa.array(status.astype(np.uint8))}

    ids_ds, values_ds, value_name, softmax = top_k_columns(f, args.top_k)
    if values_ds is not None:
        k = args.top_k if ids_ds is None else min(args.top_k, values_ds.shape[1])
        ids, vals = np.zeros((n, k), np.int32), np.zeros((n, k), np.float32)
        for first in range(0, n, BLOCK):
            last = min(n, first + BLOCK)
            if ids_ds is None:
                ids[first:last], vals[first:last] = softmax_top_k(values_ds[first:last], k, softmax)
            else:
                ids[first:last] = ids_ds[first:last, :k]
                vals[first:last] = values_ds[first:last, :k]
        mask = ~ok
        columns["class_ids"] = pa.array([None if mask[i] else ids[i].tolist() for i in range(n)], pa.list_(pa.int32()))
        columns[value_name] = pa.array([None if mask[i] else vals[i].tolist() for i in range(n)], pa.list_(pa.float32()))
    if "embedding" in f["outputs"]:
        emb = f["outputs"]["embedding"]
        rows = []
        for first in range(0, n, BLOCK):
            block = emb[first:min(n, first + BLOCK)].astype(np.float32)
            rows += [None if not ok[first + i] else v.tolist() for i, v in enumerate(block)]
        columns["embedding"] = pa.array(rows, pa.list_(pa.float32()))
    if args.masks:
        by_key = mask_paths(args.masks)
        columns["mask_path"] = pa.array([by_key.get(keys[i]) if ok[i] else None for i in range(n)], pa.string())
    if len(columns) == 3:
        fail(f"{args.run_dir}: no classification output (topk_probs, softmax, logits [N, C] or topk), no embedding "
             "and no --masks")

    table = pa.table(columns)
    pq.write_table(table, args.out)
    print(f"wrote {args.out}: {table.num_rows} rows, columns {', '.join(table.column_names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
