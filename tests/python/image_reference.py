"""Reference preprocessing for tests/python/test_images.py, run by Debian's /usr/bin/python3 (torch,
torchvision, PIL 9.4).  Reads a .npz of decoded images (arrays h x w x 3 uint8, named 0, 1, ...),
applies one transform to each, writes a .npz of uint8 [3, H, W] results:

    image_reference.py resize_crop IN.npz OUT.npz S CROP      torchvision Resize(S) + CenterCrop(CROP)
    image_reference.py exact IN.npz OUT.npz H W               torchvision Resize((H, W))
    image_reference.py letterbox IN.npz OUT.npz H W PAD       PIL: resize (bilinear), paste centred on PAD
    image_reference.py decode FILES.txt OUT.npz               PIL 9.4's decoding, convert("RGB")

torchvision.transforms.v2 is used when this torchvision has it (0.15+); Debian's 0.14 has only the
v1 functional API, whose Resize on a uint8 tensor runs the same torch kernel
(interpolate(mode="bilinear", antialias=True) in float, rounded).  The first line of output says
which ran.
"""
import sys

import numpy as np
import torch
from PIL import Image

try:
    from torchvision.transforms import v2 as T

    def resize(x, size):
        return T.Resize(size, antialias=True)(x)

    def center_crop(x, size):
        return T.CenterCrop(size)(x)

    API = "torchvision.transforms.v2"
except ImportError:
    import torchvision.transforms.functional as F

    def resize(x, size):
        return F.resize(x, size, antialias=True)

    def center_crop(x, size):
        return F.center_crop(x, size)

    API = "torchvision.transforms.functional (v1; no v2 in this torchvision)"


def letterbox(img, H, W, pad):
    """Scale by min(H/h, W/w), the other side rounded half up, centred, padded: image.h's rule."""
    h, w = img.shape[:2]
    if H * w <= W * h:
        nh, nw = H, (2 * w * H + h) // (2 * h)
    else:
        nw, nh = W, (2 * h * W + w) // (2 * w)
    nh, nw = max(nh, 1), max(nw, 1)
    small = Image.fromarray(img).resize((nw, nh), Image.BILINEAR)
    canvas = Image.new("RGB", (W, H), (pad, pad, pad))
    canvas.paste(small, ((W - nw) // 2, (H - nh) // 2))
    return np.asarray(canvas).transpose(2, 0, 1)


def main():
    mode, src, dst, *args = sys.argv[1:]
    out = {}
    if mode == "decode":
        with open(src) as f:
            for i, path in enumerate(f.read().split("\n")):
                if path:
                    out[str(i)] = np.asarray(Image.open(path).convert("RGB"))
        print("PIL", Image.__version__)
    else:
        images = np.load(src)
        for name in images.files:
            img = images[name]
            if mode == "letterbox":
                out[name] = letterbox(img, int(args[0]), int(args[1]), int(args[2]))
                continue
            x = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
            if mode == "resize_crop":
                y = center_crop(resize(x, int(args[0])), int(args[1]))
            elif mode == "exact":
                y = resize(x, [int(args[0]), int(args[1])])
            else:
                sys.exit(f"image_reference: unknown mode {mode}")
            out[name] = y.numpy()
        print(API if mode != "letterbox" else f"PIL {Image.__version__}")
    np.savez(dst, **out)


if __name__ == "__main__":
    main()
