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
