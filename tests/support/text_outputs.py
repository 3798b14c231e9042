"""What the text tests read back from a run folder: keys, embeddings and status from outputs.h5, and
cosines in float64."""
import os

import h5py
import numpy as np


def embeddings(outdir):
    """(keys, embedding rows, status) of the run in `outdir`, in the stored order."""
    with h5py.File(os.path.join(outdir, "outputs.h5"), "r") as f:
        keys = [bytes(k).rstrip(b"\0").decode() if not isinstance(k, str) else k for k in f["sample_key"][:]]
        return keys, f["outputs/embedding"][:], f["sample_status"][:]


def cosines(a, b):
    """Cosine of each row pair, in float64."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)


def assert_matches_reference(outdir, model_dir):
    """The run in `outdir` against the zoo model's sentence-transformers reference (ref.npz,
    st_cpu_fp64): rows in input order with their keys, all ok, float32, cosine >= 0.99999 per passage
    and the largest element error under 1e-4 of the scale.  Returns the embeddings."""
    import json
    keys, got, status = embeddings(outdir)
    ref = np.load(os.path.join(model_dir, "ref.npz"))["st_cpu_fp64"]
    passages = [json.loads(line) for line in open(os.path.join(model_dir, "passages.jsonl"))]
    assert keys == [x["id"] for x in passages]
    assert (status == 0).all()
    assert got.shape == ref.shape and got.dtype == np.float32
    cos = cosines(got, ref)
    assert cos.min() >= 0.99999, (cos.min(), int(cos.argmin()))
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 1e-4, err
    return got
