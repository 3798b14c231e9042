#!/usr/bin/env python3
"""The CPU image path (TurboJPEG/libspng decoding and preprocessing on reader threads, one H2D copy)
on a GPU host, in one call; builds nothing, takes the bundled binary.  Run with the host's
python3 (torch, torchvision with transforms.v2, onnx, h5py, PIL) from the repository root:

    /work/shared/device/bundle.sh .devrt build-cuda/sluice     # here, then pack and send
    python3 tests/gpu/image_cpu_path.py --run .devrt/run --sluice .devrt/bin/sluice --out $OUT

Steps (--steps, default all), each printing a short table:
  agree   an identity model (uint8 -> float) over a mixed folder (JPEG baseline/progressive/grey/
          CMYK, PNG) on --device cpu and --device cuda: the stored tensors must be identical
  torch   torchvision.transforms.v2 Resize(256, antialias=True) + CenterCrop(224) on sluice's own
          decoded pixels (an identity run at the images' size) against sluice's preprocessing:
          max |diff| and % equal (the CPU tests use Debian's torchvision 0.14, which has no v2)
  bench   the image benchmark's kind of files (data_tools/make_image_dataset.py, 500x375, q90) through the CPU path on the
          GPU, identity 224x224 model, --reader-threads 4/8/14: images/s and decode ms per image
"""
import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
from onnx import TensorProto, helper, save
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "data_tools"))
from make_image_dataset import picture  # noqa: E402


def identity_model(path, h, w):
    x = helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 3, h, w])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, h, w])
    g = helper.make_graph([helper.make_node("Cast", ["pixels"], ["logits"], to=TensorProto.FLOAT)], "identity", [x], [y])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def sluice(a, folder, out, model, *opts, timeout=300):
    cmd = [a.run, "mpirun", "-np", "1", a.sluice, "run", "--input", folder, "--model", model, "--output", out,
           "--overwrite", "--quiet", "--outputs", "logits", *map(str, opts)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    if p.returncode != 0:
        sys.exit(f"sluice failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p


def stored(out):
    with h5py.File(os.path.join(out, "outputs.h5"), "r") as f:
        keys = [k.decode() for k in f["sample_key"][:]]
        return keys, f["outputs/logits"][:]


def mixed_folder(d, h=90, w=120):
    os.makedirs(d, exist_ok=True)
    for i in range(12):
        im = picture(3, i, w, h, 0.0, False).resize((w, h))
        kind = i % 6
        if kind == 0:
            im.save(f"{d}/{i:02d}.jpg", quality=90)
        elif kind == 1:
            im.save(f"{d}/{i:02d}.jpg", quality=90, progressive=True)
        elif kind == 2:
            im.convert("L").save(f"{d}/{i:02d}.jpg", quality=90)
        elif kind == 3:
            im.convert("CMYK").save(f"{d}/{i:02d}.jpg", quality=90)
        elif kind == 4:
            im.save(f"{d}/{i:02d}.png")
        else:
            im.save(f"{d}/{i:02d}.jpg", quality=75, subsampling=0)
    return d


def step_agree(a):
    folder = mixed_folder(os.path.join(a.work, "mixed"))
    model = identity_model(os.path.join(a.work, "id56.onnx"), 56, 56)
    res = {}
    for dev in ("cpu", a.device):
        out = os.path.join(a.work, f"agree-{dev}")
        sluice(a, folder, out, model, "--device", dev, "--resize", 64, "--center-crop", 56, "--batch-size", 5)
        res[dev] = stored(out)
    same = res["cpu"][0] == res[a.device][0] and np.array_equal(res["cpu"][1], res[a.device][1])
    print(f"agree: {len(res['cpu'][0])} images, --device cpu vs {a.device}: outputs identical: {same}")
    return same


def step_torch(a):
    import torch
    from torchvision.transforms import v2
    folder = mixed_folder(os.path.join(a.work, "mixed"))
    native = identity_model(os.path.join(a.work, "native.onnx"), 90, 120)
    sluice(a, folder, os.path.join(a.work, "native"), native, "--device", a.device, "--resize", "90x120")
    keys, decoded = stored(os.path.join(a.work, "native"))
    rows = []
    for size, crop in ((256, 224), (64, 56)):
        model = identity_model(os.path.join(a.work, f"c{crop}.onnx"), crop, crop)
        out = os.path.join(a.work, f"crop{crop}")
        sluice(a, folder, out, model, "--device", a.device, "--resize", size, "--center-crop", crop)
        k2, got = stored(out)
        assert k2 == keys
        t = v2.Compose([v2.Resize(size, antialias=True), v2.CenterCrop(crop)])
        want = np.stack([t(torch.from_numpy(x.astype(np.uint8))).numpy() for x in decoded])
        d = np.abs(got.astype(int) - want.astype(int))
        rows.append((size, crop, d.max(), 100 * np.mean(d == 0)))
    pil = np.stack([np.asarray(Image.open(os.path.join(folder, k)).convert("RGB")).transpose(2, 0, 1) for k in keys])
    dd = np.abs(pil.astype(int) - decoded.astype(int))
    import torchvision
    print(f"torch: torchvision {torchvision.__version__} transforms.v2 on sluice's decoded pixels")
    for size, crop, mx, eq in rows:
        print(f"    Resize({size}) + CenterCrop({crop}): max |diff| {mx}, {eq:.2f}% equal")
    print(f"    decoders: PIL {Image.__version__} vs TurboJPEG: max |diff| {dd.max()}, mean {dd.mean():.4f}")
    return all(r[2] <= 1 for r in rows)


def step_bench(a):
    data = os.path.join(a.work, "images")
    if not os.path.isdir(data):
        t0 = time.time()
        subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out", data,
                        "--count", str(a.count)], check=True)
        print(f"bench: made {a.count} files in {time.time() - t0:.0f} s")
    model = identity_model(os.path.join(a.work, "id224.onnx"), 224, 224)
    print("bench: CPU decode + resize 256 + crop 224 on reader threads, identity model on the GPU, batch 256")
    for threads in a.threads:
        out = os.path.join(a.work, f"bench{threads}")
        sluice(a, data, out, model, "--device", a.device, "--resize", 256, "--center-crop", 224, "--batch-size", 256,
               "--reader-threads", threads, "--prefetch", max(4, threads + 2), "--sink", "null", timeout=600)
        r = json.load(open(os.path.join(out, "report.json")))
        k = r["ranks"][0]
        print(f"    reader threads {threads:2d}: {r['job']['throughput']:8.0f} images/s, decode "
              f"{1e3 * k['seconds']['decode'] / max(1, k['samples']):.2f} ms/image (summed over threads), "
              f"read {1e3 * k['seconds']['read'] / max(1, k['samples']):.3f} ms/image, input stall "
              f"{100 * k['stall']['input']:.0f}%")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default=".devrt/run", help="the bundle's wrapper")
    ap.add_argument("--sluice", default=".devrt/bin/sluice")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/sluice-device"))
    ap.add_argument("--work", default="/tmp/sluice-images")
    ap.add_argument("--steps", default="agree,torch,bench")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script without a GPU")
    ap.add_argument("--count", type=int, default=4096, help="files for the bench step")
    ap.add_argument("--threads", type=int, nargs="+", default=[4, 8, 14])
    a = ap.parse_args()
    a.run, a.sluice = os.path.abspath(a.run), os.path.abspath(a.sluice)
    os.makedirs(a.work, exist_ok=True)
    ok = True
    for step in a.steps.split(","):
        ok = globals()[f"step_{step}"](a) and ok
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
