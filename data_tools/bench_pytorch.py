#!/usr/bin/env python3
"""The baseline Sluice must beat: the same batch-inference workload written as a careful PyTorch user
would write it, timed the same way.

    python3 data_tools/bench_pytorch.py --model deeplabv3_resnet50 --batch 64 --size 512 --batches 16

The model is torchvision's (random weights, eval mode, 21 classes for segmentation, no auxiliary
head).  Input: a pool of random float32 batches made once in pinned memory (so the Python side costs
nothing and the figure is the GPU path's).  Variants:
  plain     x.to('cuda'); y = model(x); y.cpu()         (synchronous, the common script)
  pipelined the seed posts' recipe: pinned memory, non_blocking H2D on a copy stream, compute on
            another stream, D2H into pinned buffers on a third, events between them
Precision: fp32 (TF32 off), tf32 (PyTorch's default for convolutions), bf16 (autocast).  Prints one
line per run with images/s over the timed batches (warm-up batches excluded).
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_model import build  # noqa: E402  (the same models, with the same weights, as the .onnx files)


def set_precision(p):
    torch.backends.cudnn.allow_tf32 = p in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def run_plain(model, pool, batches, warmup, precision):
    outs = []
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        for i in range(warmup + batches):
            if i == warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            x = pool[i % len(pool)].to("cuda")
            y = model(x).float().cpu()
            outs.append(y.shape[0])
    torch.cuda.synchronize()
    return sum(outs[warmup:]) / (time.perf_counter() - t0)


def run_pipelined(model, pool, batches, warmup, precision):
    copy, compute, egress = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    with torch.inference_mode():
        probe = model(pool[0][:1].to("cuda")).float()
    out_shape = (pool[0].shape[0],) + tuple(probe.shape[1:])
    host_out = [torch.empty(out_shape, dtype=torch.float32, pin_memory=True) for _ in range(3)]
    done = [None] * 3
    n = 0
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        for i in range(warmup + batches):
            if i == warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            slot = i % 3
            if done[slot] is not None:
                done[slot].synchronize()  # the host buffer is free again (the "writer" consumed it)
            with torch.cuda.stream(copy):
                x = pool[i % len(pool)].to("cuda", non_blocking=True)
            compute.wait_stream(copy)
            with torch.cuda.stream(compute):
                y = model(x).float()
            egress.wait_stream(compute)
            with torch.cuda.stream(egress):
                host_out[slot].copy_(y, non_blocking=True)
                done[slot] = torch.cuda.Event()
                done[slot].record(egress)
                y.record_stream(egress)
            x.record_stream(compute)
            if i >= warmup:
                n += out_shape[0]
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="deeplabv3_resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", nargs="+", default=["fp32", "tf32", "bf16"])
    ap.add_argument("--variant", nargs="+", default=["plain", "pipelined"])
    a = ap.parse_args()
    model = build(a.model, 0)[1].cuda().eval()
    pool = [torch.randn(a.batch, 3, a.size, a.size).pin_memory() for _ in range(2)]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {a.model}, batch {a.batch}, "
          f"{a.size}x{a.size}, {a.batches} timed batches after {a.warmup} warm-up")
    for p in a.precision:
        set_precision(p)
        for v in a.variant:
            fn = run_plain if v == "plain" else run_pipelined
            ips = fn(model, pool, a.batches, a.warmup, p)
            print(f"pytorch {v:9s} {p:5s} {ips:8.1f} images/s")


if __name__ == "__main__":
    main()
