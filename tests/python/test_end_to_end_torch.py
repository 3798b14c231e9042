"""The whole pipeline against torchvision: an exported ResNet-18 run by `sluice run` on two ranks
matches torch eager on the same weights and the same synthetic samples (check_against_torch.py,
the script the GPU runs use too, here with torch on the CPU)."""
import os
import subprocess

import pytest

from support.sluice_test import ROOT, sluice

TORCH_PY = "/usr/bin/python3"  # Debian's python with torch and torchvision


def test_resnet18_run_matches_torch_eager(tmp_path):
    probe = subprocess.run([TORCH_PY, "-c", "import torch, torchvision, h5py"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("Debian's python3-torch, python3-torchvision and python3-h5py are needed (data_tools/install-deps.sh)")
    model = str(tmp_path / "r18.onnx")
    subprocess.run([TORCH_PY, os.path.join(ROOT, "data_tools", "export_model.py"), "--model", "resnet18", "--out", model,
                    "--height", "64", "--width", "64", "--seed", "3"], check=True, capture_output=True)
    out = str(tmp_path / "run")
    sluice("run", "--model", model, "--sample-shape", "3,64,64", "--samples", 50, "--batch-size", 8, "--seed", 11,
           "--outputs", "logits,argmax", "--output", out, "--quiet", "--device", "cpu", np_=2, check=True)
    p = subprocess.run([TORCH_PY, os.path.join(ROOT, "data_tools", "check_against_torch.py"), "--run", out, "--model",
                        "resnet18", "--seed-weights", "3", "--device", "cpu", "--indices", "0,9,31,49"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "logits: max|diff|/max|ref|" in p.stdout and p.stdout.strip().endswith("OK")
