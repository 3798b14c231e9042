"""The new-user task done in PyTorch, for tests/python/test_export_torch.py; run by Debian's
/usr/bin/python3 (torch, torchvision, PIL 9.4).

    torch_task_reference.py export DIR
        builds two small models with fixed weights (seed 0): a segmenter (strided convolutions, then a
        bilinear x2 upsample back to the input size, 6 classes) and a classifier (global average pool
        and a linear layer, 10 classes); saves their weights in DIR and exports them the way a user
        would: segmenter.onnx with a fixed batch of 1 (torch.onnx.export with no dynamic_axes),
        classifier.onnx with a dynamic batch axis.
    torch_task_reference.py predict DIR FILES.txt S CROP OUT.npz
        for each image file: PIL decode, convert("RGB"), torchvision Resize(S) + CenterCrop(CROP) on
        the uint8 tensor (as tests/python/image_reference.py), /255, ImageNet mean/std, then both
        models in float32; writes seg_<i> (argmax map [CROP, CROP] uint8) and cls_<i> (softmax [10]).
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_reference import center_crop, resize  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class Segmenter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.head = torch.nn.Conv2d(16, 6, 1)

    def forward(self, x):
        y = self.head(torch.relu(self.b(torch.relu(self.a(x)))))
        return F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.a(x)).mean(dim=(2, 3))
        return self.fc(y)


def models(directory=None):
    torch.manual_seed(0)
    seg, cls = Segmenter().eval(), Classifier().eval()
    if directory:
        seg.load_state_dict(torch.load(os.path.join(directory, "segmenter.pt")))
        cls.load_state_dict(torch.load(os.path.join(directory, "classifier.pt")))
    return seg, cls


def export(directory):
    seg, cls = models()
    torch.save(seg.state_dict(), os.path.join(directory, "segmenter.pt"))
    torch.save(cls.state_dict(), os.path.join(directory, "classifier.pt"))
    x = torch.zeros(1, 3, 64, 64)
    with torch.no_grad():
        torch.onnx.export(seg, x, os.path.join(directory, "segmenter.onnx"), input_names=["x"], output_names=["logits"],
                          opset_version=13)
        torch.onnx.export(cls, x, os.path.join(directory, "classifier.onnx"), input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=13)


def predict(directory, files_txt, size, crop, out):
    seg, cls = models(directory)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    results = {}
    with open(files_txt) as f:
        files = f.read().splitlines()
    with torch.no_grad():
        for i, path in enumerate(files):
            pixels = np.asarray(Image.open(path).convert("RGB"))
            x = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
            x = center_crop(resize(x, size), crop)
            x = ((x.float() / 255.0 - mean) / std).unsqueeze(0)
            results[f"seg_{i}"] = seg(x)[0].argmax(0).to(torch.uint8).numpy()
            results[f"cls_{i}"] = torch.softmax(cls(x)[0].double(), 0).numpy()
    np.savez(out, **results)


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2])
    elif sys.argv[1] == "predict":
        predict(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
