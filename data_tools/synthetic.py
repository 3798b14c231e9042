#!/usr/bin/env python3
"""Sluice's synthetic input, reproduced in Python (the same bits as io/synthetic_source.cpp), so a run's
outputs can be checked against another framework on exactly the samples Sluice saw.

    python3 data_tools/synthetic.py --seed 1 --shape 3,512,512 --first 0 --count 4 --out x.npy

A table of 2^20 values is drawn from the seed with splitmix64; sample i is the table read from
offset splitmix64(seed * 0x100000001B3 ^ i) mod 2^20, wrapping around.  float32 values are
24-bit fractions in [-1, 1); uint8 values are the top byte of each draw.
"""
import argparse

import numpy as np

MASK = (1 << 64) - 1
TABLE = 1 << 20


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def _splitmix64_np(x):
    """splitmix64 over a uint64 array (numpy wraps on overflow, as C++ does)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def table(seed, dtype="float32"):
    """The 2^20-entry table.  The C++ chains state = splitmix64(state), which is sequential, so this
    is a plain Python loop (about a second)."""
    states = np.empty(TABLE, dtype=np.uint64)
    s = splitmix64((seed ^ 0x5EED) & MASK)
    for k in range(TABLE):
        s = splitmix64(s)
        states[k] = s
    if dtype == "float32":
        return ((states >> np.uint64(40)).astype(np.float64) * (1.0 / 8388608.0) - 1.0).astype(np.float32)
    return (states >> np.uint64(56)).astype(np.uint8)


def samples(seed, shape, first, count, dtype="float32", tab=None):
    """Samples [first, first + count) as an array [count, *shape]."""
    tab = table(seed, dtype) if tab is None else tab
    n = int(np.prod(shape))
    idx = np.arange(first, first + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = np.uint64((seed * 0x100000001B3) & MASK) ^ idx
    pos = (_splitmix64_np(key) % np.uint64(TABLE)).astype(np.int64)
    out = np.empty((count, n), dtype=tab.dtype)
    offsets = np.arange(n, dtype=np.int64)
    for k in range(count):
        out[k] = tab[(pos[k] + offsets) % TABLE]
    return out.reshape((count,) + tuple(shape))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", required=True, help="one sample's shape, e.g. 3,512,512")
    ap.add_argument("--dtype", choices=["float32", "uint8"], default="float32")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shape = tuple(int(d) for d in a.shape.split(","))
    np.save(a.out, samples(a.seed, shape, a.first, a.count, a.dtype))


if __name__ == "__main__":
    main()
