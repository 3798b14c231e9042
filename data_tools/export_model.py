#!/usr/bin/env python3
"""Exports a torchvision model to ONNX for Sluice, with random (seeded) or given weights.

    /usr/bin/python3 data_tools/export_model.py --model deeplabv3_resnet50 --out /tmp/dl.onnx \\
        --height 512 --width 512 --seed 0 --save-reference /tmp/dl-ref

Models are built with weights=None (nothing is downloaded) and put in eval mode; random weights get
BatchNorm statistics perturbed from torchvision's identity initialisation (seeded), so that BatchNorm
folding is really exercised.  Segmentation models (21 classes, no auxiliary head) export their 'out'
tensor only.  The batch axis is dynamic, unless --static-batch: then the model is exported the way a
user usually does it, `torch.onnx.export(m, x[:1], path)` with no dynamic axes (batch fixed at 1, folded
into Reshape/Resize constants), which Sluice re-specializes or runs on sub-batches at any --batch-size.

tiny_deeplab is a small DeepLab-like segmentation net (strided and dilated convolutions, an image-pool
branch resized back with F.interpolate, a bilinear upsampling to the input size, 5 classes) for tests.

Exporters:
  torchscript  torch.onnx.export(dynamo=False), opset 17, weights inside the .onnx
  dynamo       torch.onnx.export(dynamo=True), opset 18, weights in an external-data file beside the
               .onnx; needs torch >= 2.5 (the script says so and exits 2 when the torch has none)

--save-reference DIR writes DIR/input.npy (a seeded random input [batch, 3, H, W] float32) and
DIR/torch_output.npy (torch's eager output for it), so tests can compare an engine against torchvision
itself.  Works with torch 1.13 / torchvision 0.14 and torch 2.x.
"""
import argparse
import inspect
import os
import sys
import warnings

import numpy as np
import torch
import torchvision

CLASSIFICATION = ["resnet18", "resnet50", "mobilenet_v3_small", "mobilenet_v3_large", "mobilenet_v2",
                  "efficientnet_b0"]
SEGMENTATION = ["deeplabv3_resnet50", "fcn_resnet50", "lraspp_mobilenet_v3_large"]
SMALL = ["tiny_deeplab"]
EXPORTERS = {"torchscript": 17, "dynamo": 18}


class SegmentationOut(torch.nn.Module):
    """torchvision segmentation models return a dict; Sluice wants the 'out' tensor."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


class TinyDeepLab(torch.nn.Module):
    """A DeepLab-shaped net small enough for CPU tests: output stride 4, an atrous branch, an
    image-pool branch (global average pool, 1x1 conv, interpolated back to the feature size), concat,
    a classifier and a bilinear upsampling to the input size."""

    def __init__(self, classes=5):
        super().__init__()
        nn = torch.nn

        def cbr(cin, cout, **kw):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, bias=False, **kw), nn.BatchNorm2d(cout), nn.ReLU())
        self.stem = nn.Sequential(cbr(3, 8, stride=2, padding=1), cbr(8, 16, stride=2, padding=1))
        self.atrous = cbr(16, 16, padding=2, dilation=2)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 16, 1), nn.ReLU())
        self.head = nn.Conv2d(48, classes, 1)

    def forward(self, x):
        f = self.stem(x)
        p = torch.nn.functional.interpolate(self.pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False)
        y = self.head(torch.cat([f, self.atrous(f), p], dim=1))
        return torch.nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def build(name, seed, weights=None):
    """The torchvision model (for state dicts) and the module to export."""
    torch.manual_seed(seed)
    if name in SMALL:
        net = TinyDeepLab()
    elif name in CLASSIFICATION:
        net = getattr(torchvision.models, name)(weights=None)
    elif name in SEGMENTATION:
        ctor = getattr(torchvision.models.segmentation, name)
        kwargs = {"weights": None, "weights_backbone": None, "num_classes": 21}
        if "aux_loss" in inspect.signature(ctor).parameters:
            kwargs["aux_loss"] = False
        net = ctor(**kwargs)
    else:
        raise SystemExit(f"unknown model '{name}'; choose from {', '.join(CLASSIFICATION + SEGMENTATION + SMALL)}")
    if weights:
        state = torch.load(weights, map_location="cpu")
        net.load_state_dict(state)
    else:
        # torchvision starts BatchNorm as the identity (mean 0, var 1, weight 1, bias 0); perturb it
        # mildly so the folded weights differ from the raw ones without blowing up deep activations.
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.8, 1.25)
                    m.weight.uniform_(0.8, 1.2)
                    m.bias.uniform_(-0.1, 0.1)
    net.eval()
    module = SegmentationOut(net) if name in SEGMENTATION else net
    return net, module.eval()


def has_dynamo_exporter():
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5) and "dynamo" in inspect.signature(torch.onnx.export).parameters


def export(module, x, out, exporter, static_batch=False):
    params = inspect.signature(torch.onnx.export).parameters
    if exporter == "torchscript":
        kwargs = {"dynamo": False} if "dynamo" in params else {}
        if not static_batch:
            kwargs["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
        torch.onnx.export(module, (x,), out, opset_version=EXPORTERS["torchscript"], input_names=["input"],
                          output_names=["output"], do_constant_folding=True, **kwargs)
        return
    if not has_dynamo_exporter():
        print(f"export_model.py: the dynamo exporter needs torch >= 2.5; this torch is {torch.__version__}. "
              "Use --exporter torchscript.", file=sys.stderr)
        raise SystemExit(2)
    kwargs = {"dynamo": True, "opset_version": EXPORTERS["dynamo"], "input_names": ["input"],
              "output_names": ["output"]}
    if not static_batch:
        kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch", min=1, max=4096)},)
    if "external_data" in params:
        kwargs["external_data"] = True
    program = torch.onnx.export(module, (x,), out if "external_data" in params else None, **kwargs)
    if "external_data" not in params:  # torch 2.5: save through the returned program
        program.save(out, external_data=True)


def op_counts(path):
    """Op histogram of the written model, when the onnx package is importable (else '')."""
    try:
        import onnx
    except ImportError:
        return ""
    from collections import Counter
    m = onnx.load(path, load_external_data=False)
    return ", ".join(f"{k} {v}" for k, v in Counter(n.op_type for n in m.graph.node).most_common())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", required=True, choices=CLASSIFICATION + SEGMENTATION + SMALL)
    p.add_argument("--out", required=True, help="the .onnx file to write")
    p.add_argument("--height", type=int, default=224)
    p.add_argument("--width", type=int, default=224)
    p.add_argument("--batch", type=int, default=2, help="batch of the dummy (and reference) input")
    p.add_argument("--static-batch", action="store_true",
                   help="export with the batch fixed at 1 (x[:1], no dynamic axes), as users usually do; "
                        "--save-reference still runs torch on the whole --batch")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and the reference input")
    p.add_argument("--weights", help="a state_dict (torch.save) to load instead of random weights")
    p.add_argument("--exporter", choices=sorted(EXPORTERS), default="torchscript")
    p.add_argument("--save-reference", metavar="DIR", help="write DIR/input.npy and DIR/torch_output.npy")
    p.add_argument("--save-weights", metavar="PATH", help="also torch.save the model's state_dict to PATH")
    args = p.parse_args(argv)
    if args.batch < 1 or args.height < 1 or args.width < 1:
        p.error("--batch, --height and --width must be positive")
    if args.exporter == "dynamo" and not has_dynamo_exporter():
        print(f"export_model.py: the dynamo exporter is unavailable with torch {torch.__version__} "
              "(it needs torch >= 2.5); use --exporter torchscript", file=sys.stderr)
        return 2

    warnings.filterwarnings("ignore", message="The shape inference of prim::Constant")
    net, module = build(args.model, args.seed, args.weights)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, 3, args.height, args.width, generator=gen)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        export(module, x[:1] if args.static_batch else x, args.out, args.exporter, args.static_batch)
    if args.save_weights:
        torch.save(net.state_dict(), args.save_weights)
    if args.save_reference:
        os.makedirs(args.save_reference, exist_ok=True)
        with torch.no_grad():
            y = module(x)
        np.save(os.path.join(args.save_reference, "input.npy"), x.numpy().astype(np.float32))
        np.save(os.path.join(args.save_reference, "torch_output.npy"), y.numpy().astype(np.float32))
    size = os.path.getsize(args.out)
    ops = op_counts(args.out)
    print(f"wrote {args.out} ({size / 1e6:.1f} MB): {args.model}, {args.exporter} exporter, opset "
          f"{EXPORTERS[args.exporter]}, input [{1 if args.static_batch else 'B'},3,{args.height},{args.width}], "
          f"torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}" + (f"; ops: {ops}" if ops else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
