#!/usr/bin/env python3
"""Writes jobs/models/quickstart.onnx: a tiny segmentation CNN with random weights (fixed seed).

Input [B, 3, 64, 64] float32 (dynamic batch) -> output "logits" [B, 8, 64, 64].  It is small (well
under 1 MB) and cheap (about 10 MFLOP per sample), yet it exercises what real exports contain:
Conv+BatchNorm+ReLU, a residual Add, MaxPool, a strided conv, a Concat of two branches, a bilinear
Resize whose target size the TorchScript exporter computes from the input's shape at run time
(Shape/Gather/... subgraphs), and a final 1x1 conv to 8 classes.

Run it with an interpreter that has torch (Debian's /usr/bin/python3 here):

    /usr/bin/python3 data_tools/make_quickstart_model.py --out jobs/models/quickstart.onnx
"""
import argparse
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn_relu(cin, cout, stride=1, relu=True):
    layers = [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class QuickstartNet(nn.Module):
    def __init__(self, classes=8):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)                     # 64x64
        self.pool = nn.MaxPool2d(2)                         # 32x32
        self.res_a = conv_bn_relu(16, 16)
        self.res_b = conv_bn_relu(16, 16, relu=False)
        self.down = conv_bn_relu(16, 24, stride=2)          # branch 1: strided conv, 16x16
        self.side = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 8, 1), nn.ReLU())  # branch 2, 16x16
        self.head = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        y = self.pool(self.stem(x))
        y = F.relu(self.res_b(self.res_a(y)) + y)           # residual block
        y = torch.cat([self.down(y), self.side(y)], dim=1)
        y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
        return self.head(y)


def build(seed):
    torch.manual_seed(seed)
    net = QuickstartNet()
    # Non-trivial BatchNorm statistics, so folding them into the convolutions matters.
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return net.eval()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="jobs/models/quickstart.onnx", help="the .onnx file to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (older ones exercise the loader's rewrites)")
    args = p.parse_args(argv)

    # torch 1.13's exporter warns about prim::Constant shape inference on every export; harmless.
    warnings.filterwarnings("ignore", message="The shape inference of prim::Constant")
    net = build(args.seed)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        y = net(x)
    assert tuple(y.shape) == (2, 8, 64, 64), y.shape
    kwargs = {}
    if "dynamo" in torch.onnx.export.__code__.co_varnames:
        kwargs["dynamo"] = False  # torch >= 2.5 defaults to the dynamo exporter; keep TorchScript
    torch.onnx.export(net, x, args.out, opset_version=args.opset, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True,
                      **kwargs)
    params = sum(p.numel() for p in net.parameters())
    print(f"wrote {args.out}: {params} parameters, input [B,3,64,64] -> logits [B,8,64,64] (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
