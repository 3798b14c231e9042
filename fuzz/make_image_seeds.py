#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/image_target.cpp into fuzz/corpus/image: small files of every
kind the decoders take (JPEG baseline/progressive/grey/CMYK/4:4:4, PNG grey/grey+alpha/palette/
RGB/RGBA/16-bit/interlaced) and a few refused ones (truncated, not an image)."""
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "image")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(5)
rgb = Image.fromarray((np.add.outer(np.arange(12) * 9, np.arange(17) * 7)[..., None]
                       + rng.integers(0, 40, (12, 17, 3))).clip(0, 255).astype(np.uint8))


def save(name, im, **kw):
    buf = io.BytesIO()
    im.save(buf, **kw)
    with open(os.path.join(out, name), "wb") as f:
        f.write(buf.getvalue())
    return buf.getvalue()


base = save("baseline.jpg", rgb, format="JPEG", quality=80)
save("baseline444.jpg", rgb, format="JPEG", quality=80, subsampling=0)
save("progressive.jpg", rgb, format="JPEG", quality=80, progressive=True)
save("grey.jpg", rgb.convert("L"), format="JPEG", quality=80)
save("cmyk.jpg", rgb.convert("CMYK"), format="JPEG", quality=80)
save("rgb.png", rgb, format="PNG")
save("grey.png", rgb.convert("L"), format="PNG")
save("grey_alpha.png", rgb.convert("LA"), format="PNG")
save("palette.png", rgb.convert("P", palette=Image.ADAPTIVE, colors=16), format="PNG")
save("rgba.png", rgb.convert("RGBA"), format="PNG")
save("grey16.png", Image.fromarray((np.asarray(rgb.convert("L")).astype(np.uint16) * 257)), format="PNG")


def raw_png(name, px, depth, color_type, interlace=False):
    """PIL writes neither 16-bit RGB nor Adam7: a PNG by hand (filter 0 on every row)."""
    h, w = px.shape[:2]
    dt = ">u2" if depth == 16 else "u1"
    passes = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]
    data = b""
    for y0, x0, dy, dx in (passes if interlace else [(0, 0, 1, 1)]):
        sub = px[y0::dy, x0::dx]
        if sub.size:
            data += b"".join(b"\0" + row.astype(dt).tobytes() for row in sub)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace))
    with open(os.path.join(out, name), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b""))


arr = np.asarray(rgb)
raw_png("rgb16.png", arr.astype(np.uint16) * 257 + 3, 16, 2)
raw_png("interlaced.png", arr, 8, 2, interlace=True)
with open(os.path.join(out, "truncated.jpg"), "wb") as f:
    f.write(base[: len(base) // 2])
with open(os.path.join(out, "not_an_image.txt"), "wb") as f:
    f.write(b"hello\n")
print(f"{len(os.listdir(out))} seeds in {out}")
