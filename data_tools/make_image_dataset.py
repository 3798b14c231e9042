#!/usr/bin/env python3
"""Makes a folder of natural-looking JPEG files (the image benchmark's input: 50,000 files of about
500x375, quality 90, ~65 kB), seeded, in parallel.

Each picture is drawn from its own generator seeded by (seed, index), so the files do not depend on
the number of workers.  A picture is a smooth background (a few colour gradients), 1/f "fractal"
texture (the spectrum of photographs, so the JPEGs compress like photos rather than like flat
drawings), blurred shapes, and a little sensor noise.  Sizes vary around the base size by a few
per cent, some pictures are portrait, and optional flags add grey JPEGs and PNG files.

    python3 data_tools/make_image_dataset.py --out /data/images --count 50000
    python3 data_tools/make_image_dataset.py --out /tmp/few --count 200 --grey 0.05 --png 0.05 --shards 4

Layout: OUT/NNN/NNNNNN.jpg (a thousand files a folder; keys are these relative paths).  With
--shards K the same files also go into WebDataset tar shards OUT-shards/train-000000.tar ...
(members NNNNNN.jpg, so the key of a member is its stem).
"""
import argparse
import io
import multiprocessing as mp
import os
import sys
import tarfile
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def texture(rng, h, w, beta, channels=1):
    """Noise whose power falls as 1/f^beta, h x w x channels, unit-ish scale: a pyramid of random
    grids from 4 cells across to one per pixel, each level the previous one enlarged (bilinear)
    plus fresh noise, the amplitude shrinking by 2^(-beta/2) per octave."""
    long_side = max(h, w)
    gh, gw = max(2, 4 * h // long_side), max(2, 4 * w // long_side)
    levels = [rng.standard_normal((gh, gw), dtype=np.float32) for _ in range(channels)]
    amp = 1.0
    while (gh, gw) != (h, w):
        gh, gw = min(2 * gh, h), min(2 * gw, w)
        amp *= 2 ** (-beta / 2)
        levels = [np.asarray(Image.fromarray(lv, mode="F").resize((gw, gh), Image.BILINEAR))
                  + amp * rng.standard_normal((gh, gw), dtype=np.float32) for lv in levels]
    out = np.stack(levels, -1)
    return out / (3 * out.std() + 1e-6)


def picture(seed, index, base_w, base_h, portrait_frac, grey, detail=1.0):
    rng = np.random.default_rng([seed, index])
    w = int(round(base_w * rng.uniform(0.92, 1.08)))
    h = int(round(base_h * rng.uniform(0.92, 1.08)))
    if rng.random() < portrait_frac:
        w, h = h, w
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    yy /= h
    xx /= w
    # A background of two or three colour gradients in random directions.
    img = np.zeros((h, w, 3), np.float32)
    for _ in range(rng.integers(2, 4)):
        angle = rng.uniform(0, 2 * np.pi)
        ramp = np.cos(angle) * xx + np.sin(angle) * yy
        ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-6)
        c0, c1 = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
        img += (c0 + (c1 - c0) * ramp[..., None]) / 2.5
    # Texture as foliage, sand or fabric look at this scale: a luminance part and weaker,
    # smoother colour parts.
    luma = texture(rng, h, w, rng.uniform(0.7, 1.1), 2) * (detail * rng.uniform(90, 135))
    img += luma[..., :1]
    img += texture(rng, h, w, 1.5, 3) * (detail * rng.uniform(38, 60))
    # Shapes with soft edges (objects somewhat out of focus).
    layer = Image.new("RGB", (w, h))
    mask = Image.new("L", (w, h), 0)
    draw_l, draw_m = ImageDraw.Draw(layer), ImageDraw.Draw(mask)
    for _ in range(rng.integers(3, 10)):
        x0, y0 = rng.uniform(-0.1, 0.9) * w, rng.uniform(-0.1, 0.9) * h
        x1, y1 = x0 + rng.uniform(0.05, 0.5) * w, y0 + rng.uniform(0.05, 0.5) * h
        colour = tuple(int(v) for v in rng.uniform(0, 255, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw_l.ellipse([x0, y0, x1, y1], fill=colour)
            draw_m.ellipse([x0, y0, x1, y1], fill=255)
        elif kind == 1:
            draw_l.rectangle([x0, y0, x1, y1], fill=colour)
            draw_m.rectangle([x0, y0, x1, y1], fill=255)
        else:
            pts = [(float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))) for _ in range(rng.integers(3, 7))]
            draw_l.polygon(pts, fill=colour)
            draw_m.polygon(pts, fill=255)
    mask = mask.filter(ImageFilter.GaussianBlur(rng.uniform(0.8, 3.0)))
    alpha = np.asarray(mask, np.float32)[..., None] * (1 / 255)
    img += (np.asarray(layer, np.float32) + 0.6 * luma[..., 1:] - img) * alpha  # textured shapes
    img += rng.standard_normal(img.shape, dtype=np.float32) * (detail * rng.uniform(5.0, 8.0))  # sensor noise
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    return im.convert("L") if grey else im


def make_one(args):
    index, opt = args
    rng = np.random.default_rng([opt["seed"], index, 1])
    grey = rng.random() < opt["grey"]
    png = rng.random() < opt["png"]
    im = picture(opt["seed"], index, opt["width"], opt["height"], opt["portrait"], grey, opt["detail"])
    rel = os.path.join(f"{index // 1000:03d}", f"{index:06d}." + ("png" if png else "jpg"))
    path = os.path.join(opt["out"], rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buf = io.BytesIO()
    if png:
        im.save(buf, "PNG")
    else:
        im.save(buf, "JPEG", quality=opt["quality"])
    with open(path + ".part", "wb") as f:
        f.write(buf.getvalue())
    os.replace(path + ".part", path)
    return rel, len(buf.getvalue())


def write_shards(out, files, shards):
    folder = out.rstrip("/") + "-shards"
    os.makedirs(folder, exist_ok=True)
    per = (len(files) + shards - 1) // shards
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"train-{s:06d}.tar"), "w") as tar:
            for rel in files[s * per:(s + 1) * per]:
                tar.add(os.path.join(out, rel), arcname=os.path.basename(rel))
    return folder


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=500, help="base width (each picture varies by up to 8%%)")
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--portrait", type=float, default=0.15, help="fraction of portrait pictures")
    ap.add_argument("--grey", type=float, default=0.0, help="fraction of grey pictures")
    ap.add_argument("--png", type=float, default=0.0, help="fraction stored as PNG")
    ap.add_argument("--detail", type=float, default=1.0, help="texture and noise strength (file size grows with it)")
    ap.add_argument("--shards", type=int, default=0, help="also write K WebDataset tar shards beside OUT")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.count < 1:
        sys.exit("make_image_dataset: --count must be at least 1")
    opt = dict(out=a.out, seed=a.seed, width=a.width, height=a.height, quality=a.quality, portrait=a.portrait,
               grey=a.grey, png=a.png, detail=a.detail)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    jobs = [(i, opt) for i in range(a.count)]
    if a.workers > 1:
        with mp.Pool(a.workers) as pool:
            done = pool.map(make_one, jobs, chunksize=64)
    else:
        done = [make_one(j) for j in jobs]
    sizes = np.array([n for _, n in done])
    print(f"{a.count} files in {a.out}: mean {sizes.mean() / 1e3:.1f} kB (min {sizes.min() / 1e3:.1f}, "
          f"max {sizes.max() / 1e3:.1f}), total {sizes.sum() / 1e6:.1f} MB, {time.time() - t0:.1f} s "
          f"with {a.workers} worker(s)")
    if a.shards > 0:
        folder = write_shards(a.out, [rel for rel, _ in done], a.shards)
        print(f"{a.shards} tar shards in {folder}")


if __name__ == "__main__":
    main()
