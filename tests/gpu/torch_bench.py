#!/usr/bin/env python3
"""PyTorch eager throughput on the GPU for the same models and batches as the engine benchmark
(tests/gpu/test_cuda_bench.cpp), so the engine's images/s have a baseline.  GPU host only:

    python3 tests/gpu/torch_bench.py --model deeplabv3_resnet50 --batch 32 --size 512

Per precision: fp32 (TF32 off), tf32 (PyTorch's default for convolutions), bf16 and fp16 autocast,
each NCHW and channels_last; the median of 5 timed runs of 5 batches after 3 warm-up batches.
The argmax over classes is included for segmentation models, as Sluice's job computes it on the GPU.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data_tools"))
import export_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="deeplabv3_resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--configs", nargs="+", default=[f"{p}:{l}" for p in ("fp32", "tf32", "bf16", "fp16")
                                                      for l in ("nchw", "channels_last")],
                    help="precision:layout pairs (layout nchw or channels_last)")
    args = ap.parse_args()
    _, module = export_model.build(args.model, 0)
    module = module.cuda().eval()
    seg = args.model in export_model.SEGMENTATION
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda")
    for config in args.configs:
        prec, layout = config.split(":")
        torch.backends.cudnn.allow_tf32 = prec != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.benchmark = True
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        m = module.to(memory_format=fmt)
        xi = x.to(memory_format=fmt)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)

        def step():
            with torch.no_grad(), torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                y = m(xi)
                return y.argmax(1).to(torch.uint8) if seg else y

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(5):
                step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 5)
        ms = sorted(times)[2]
        print(f"[ torch    ] {args.model} batch {args.batch} {prec} {layout}: {ms:.2f} ms/batch, "
              f"{1000 * args.batch / ms:.0f} images/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
