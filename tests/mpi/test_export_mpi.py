"""The new-user path under mpirun: `sluice run` on 2 ranks, then `mpirun -np 2 sluice export`: rank 0
exports, the other rank leaves it alone, and the masks are the stored argmax rows."""
import os

import h5py
import numpy as np
import pytest

from support.sluice_test import QUICKSTART, fresh_dir, sluice

Image = pytest.importorskip("PIL.Image")


def test_run_and_export_under_mpirun(tmp_path):
    run = fresh_dir(str(tmp_path / "run"))
    sluice("run", "--config", QUICKSTART, "--samples", 24, "--batch-size", 4, "--outputs", "argmax", "--output", run,
           "--cpu-threads", 1, "--quiet", np_=2, check=True, timeout=120)
    p = sluice("export", run, np_=2, check=True, timeout=120)
    assert p.stdout.count("masks written") == 1, p.stdout
    with h5py.File(os.path.join(run, "outputs.h5")) as f:
        argmax = f["outputs/argmax"][:]
    for i in range(24):
        with Image.open(os.path.join(run, "export", f"{i}.png")) as im:
            assert np.array_equal(np.array(im), argmax[i])
