#!/usr/bin/env python3
"""The image benchmark: image files to ResNet-50 top-5, Sluice against PyTorch on the same files.

    python3 data_tools/bench_images.py --images /tmp/sluice-images/images --model /tmp/sluice-images/resnet50.onnx \\
        --sluice build/sluice --gpu-tests build/tests/sluice_gpu_tests [--runner .devrt/run]

Steps (--steps, comma list; all by default), each printed as it ends, then one table:
  decoders  how far the JPEG decoders differ on the first files: PIL, torchvision's CPU decoder
            (libjpeg-turbo) and torchvision's GPU decoder (nvJPEG), max and mean |difference|
  nvjpeg    our nvJPEG decoder alone and our GPU image input without the model
            (sluice_gpu_tests ImageBench, disabled test: see tests/gpu/test_image_bench.cpp)
  sluice    `sluice run` of jobs/resnet50_images.toml on the folder, end to end (a short warm-up
            run first: cuDNN autotuning), with the report's stage times
  pil       PIL + torchvision transforms (Resize 256, CenterCrop 224) in a DataLoader, N workers,
            input only
  tvgpu     torchvision.io.decode_jpeg on the GPU, batched, + GPU resize/crop, input only
  tvgpu_e2e the same + ResNet-50 bf16 channels_last + top-5 to the host
Throughput is files over wall time of the whole pass (file reading included), after a warm-up batch
for the PyTorch paths.  PyTorch steps read at most --torch-count files.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROWS = []  # (path, images/s, note)


def log(msg):
    print(msg, flush=True)


def files_of(folder, limit):
    paths = []
    for root, _, names in os.walk(folder):
        paths += [os.path.join(root, n) for n in names if n.lower().endswith((".jpg", ".jpeg"))]
    paths.sort()
    return paths[:limit] if limit else paths


def step_decoders(a, paths):
    import numpy as np
    import torch
    import torchvision
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg
    sel = paths[:a.decoder_files]
    datas = [torchvision.io.read_file(p) for p in sel]
    pil = [np.asarray(Image.open(p).convert("RGB")) for p in sel]
    cpu = [decode_jpeg(d, mode=ImageReadMode.RGB).permute(1, 2, 0).numpy() for d in datas]
    gpu = [t.permute(1, 2, 0).cpu().numpy() for t in decode_jpeg(datas, mode=ImageReadMode.RGB, device="cuda")]
    for name, x, y in (("PIL vs libjpeg-turbo (torchvision CPU)", pil, cpu), ("PIL vs nvJPEG (torchvision GPU)", pil, gpu),
                       ("libjpeg-turbo vs nvJPEG", cpu, gpu)):
        d = [np.abs(u.astype(np.int16) - v.astype(np.int16)) for u, v in zip(x, y)]
        log(f"[ decoders ] {name}: max {max(int(e.max()) for e in d)}, mean {np.mean([e.mean() for e in d]):.3f} "
            f"over {len(d)} files")


def step_nvjpeg(a, paths):
    env = dict(os.environ, SLUICE_IMAGE_DIR=a.images, SLUICE_BENCH_IMAGES=str(a.nvjpeg_count),
               SLUICE_BENCH_BATCHES=a.batches, SLUICE_BENCH_BACKENDS=a.backends)
    cmd = shlex.split(a.runner) + [a.gpu_tests, "--gtest_also_run_disabled_tests", "--gtest_filter=ImageBench.*"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("[ bench"):
            log(line)
            m = re.search(r"backend=(\w+) batch=(\d+).*images_per_s=(\d+)", line)
            if m:
                ROWS.append((f"nvJPEG alone ({m[1]}, batch {m[2]}), decode to RGB", int(m[3]), "our decoder, files in memory"))
            m = re.search(r"nvJPEG (\S+).* batch=(\d+).*gpu_images_per_s=(\d+) fill_images_per_s_per_thread=(\d+)", line)
            if m:
                ROWS.append((f"Sluice image input, GPU side ({m[1]}, batch {m[2]})", int(m[3]),
                             f"+ resize/crop kernel; one reader thread fills {m[4]}/s"))
        elif "FAILED" in line or "Failure" in line:
            log(line)
    if out.returncode != 0:
        log(f"[ nvjpeg ] sluice_gpu_tests exit {out.returncode}")


def sluice_run(a, out_dir, samples, extra=()):
    cmd = shlex.split(a.runner) + [a.sluice, "run", "--config", a.job, "--input", a.images, "--model", a.model,
                                   "--samples", str(samples), "--output", out_dir, "--overwrite", "--quiet",
                                   "--batch-size", str(a.batch), *extra]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if out.returncode != 0:
        log(f"[ sluice ] exit {out.returncode}: {' '.join(cmd)}\n{out.stderr[-3000:]}")
        return None
    return json.load(open(os.path.join(out_dir, "report.json"))), time.time() - t0


def step_sluice(a, paths):
    n = len(paths)
    if sluice_run(a, a.workdir + "/images-warmup", min(n, 4 * a.batch)) is None:
        return
    r = sluice_run(a, a.workdir + "/images", n)
    if r is None:
        return
    rep, wall = r
    job, rank = rep["job"], rep["ranks"][0]
    busy = " ".join(f"{k} {100 * v:.0f}%" for k, v in rank["busy"].items())
    stall = " ".join(f"{k} {100 * v:.0f}%" for k, v in rank["stall"].items())
    log(f"[ sluice ] {job['samples']} files in {job['makespan_s']:.2f} s: {job['throughput']:.0f} images/s "
        f"(steady {rank['steady_images_per_s']:.0f}; process wall {wall:.1f} s)")
    log(f"[ sluice ] busy: {busy}; stalls: {stall}")
    log(f"[ sluice ] seconds: " + " ".join(f"{k} {v:.2f}" for k, v in rank["seconds"].items()))
    ROWS.append((f"Sluice end to end (ResNet-50 bf16, batch {a.batch}, top-5 stored)", round(job["throughput"]),
                 f"steady {rank['steady_images_per_s']:.0f}/s; {busy}"))


def transforms_224():
    import torchvision.transforms as T
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])


class PilFiles:
    def __init__(self, paths):
        self.paths, self.tf = paths, transforms_224()

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.paths[i]) as im:
            return self.tf(im.convert("RGB"))


def step_pil(a, paths):
    import torch
    sel = paths[:a.torch_count]
    loader = torch.utils.data.DataLoader(PilFiles(sel), batch_size=a.batch, num_workers=a.workers, pin_memory=True)
    it = iter(loader)
    next(it)  # workers started, first batch out
    t0, n = time.time(), 0
    for b in it:
        n += b.shape[0]
    rate = n / (time.time() - t0)
    log(f"[ pil ] {n} files, {a.workers} workers: {rate:.0f} images/s")
    ROWS.append((f"PyTorch: PIL + transforms, DataLoader {a.workers} workers", round(rate), "input only"))


def gpu_batches(a, paths, model=None):
    """decode_jpeg on the GPU in batches, resize 256 + crop 224 there; with a model, its top-5 too."""
    import torch
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms.v2 import functional as F
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)
    n = 0
    for i in range(0, len(paths), a.batch):
        datas = [torchvision.io.read_file(p) for p in paths[i:i + a.batch]]
        imgs = decode_jpeg(datas, mode=ImageReadMode.RGB, device="cuda")
        x = torch.stack([F.center_crop(F.resize(t, [256], antialias=True), [224, 224]) for t in imgs])
        if model is not None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = model(((x.float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last))
            vals, idx = torch.softmax(y.float(), 1).topk(5)
            vals.cpu(), idx.cpu()
        n += len(datas)
    torch.cuda.synchronize()
    return n


def step_tvgpu(a, paths, e2e):
    import torch
    import torchvision
    model = None
    if e2e:
        model = torchvision.models.resnet50(weights=None).eval().cuda().to(memory_format=torch.channels_last)
    sel = paths[:a.torch_count]
    with torch.inference_mode():
        gpu_batches(a, sel[:a.batch], model)  # warm-up: nvJPEG and cuDNN set-up
        t0 = time.time()
        n = gpu_batches(a, sel, model)
        rate = n / (time.time() - t0)
    what = "decode_jpeg GPU + resize/crop" + (" + ResNet-50 bf16 channels_last + top-5" if e2e else "")
    log(f"[ tvgpu ] {what}: {n} files, {rate:.0f} images/s")
    ROWS.append((f"PyTorch: {what}, batch {a.batch}", round(rate), "end to end" if e2e else "input only"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", required=True, help="folder of JPEG files (data_tools/make_image_dataset.py)")
    p.add_argument("--model", default="jobs/models/resnet50.onnx", help="ResNet-50 ONNX (data_tools/export_model.py)")
    p.add_argument("--job", default="jobs/resnet50_images.toml")
    p.add_argument("--sluice", default="build/sluice")
    p.add_argument("--gpu-tests", default="build/tests/sluice_gpu_tests")
    p.add_argument("--runner", default="", help="prefix for the binaries, e.g. .devrt/run")
    p.add_argument("--workdir", default="/tmp/sluice-images")
    p.add_argument("--steps", default="decoders,nvjpeg,sluice,pil,tvgpu,tvgpu_e2e")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", default="64 128 256", help="nvjpeg step: batch sizes")
    p.add_argument("--backends", default="auto hybrid", help="nvjpeg step: auto (hardware where present), hybrid")
    p.add_argument("--nvjpeg-count", type=int, default=4096)
    p.add_argument("--torch-count", type=int, default=8192)
    p.add_argument("--decoder-files", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--timeout", type=int, default=300, help="seconds per subprocess")
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    paths = files_of(a.images, 0)
    if not paths:
        sys.exit(f"no .jpg files under {a.images}")
    log(f"{len(paths)} JPEG files under {a.images}, {sum(os.path.getsize(x) for x in paths) / len(paths) / 1e3:.1f} kB "
        f"on average; {os.cpu_count()} cores")
    steps = {"decoders": lambda: step_decoders(a, paths), "nvjpeg": lambda: step_nvjpeg(a, paths),
             "sluice": lambda: step_sluice(a, paths), "pil": lambda: step_pil(a, paths),
             "tvgpu": lambda: step_tvgpu(a, paths, False), "tvgpu_e2e": lambda: step_tvgpu(a, paths, True)}
    failed = 0
    for s in a.steps.split(","):
        t0 = time.time()
        try:
            steps[s]()
        except Exception as e:  # one step's failure must not hide the others' figures
            failed += 1
            log(f"[ {s} ] failed: {type(e).__name__}: {str(e)[:400]}")
        log(f"[ {s} ] {time.time() - t0:.1f} s")
    log("\n| path | images/s | note |\n|---|---:|---|")
    for path, rate, note in ROWS:
        log(f"| {path} | {rate:,} | {note} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
