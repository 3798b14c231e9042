#!/usr/bin/env python3
"""W4, files to masks: N JPEG photos -> DeepLabV3-ResNet50 (random weights, resize 512x512, bf16) ->
argmax -> one PNG mask per photo, named after it.  Sluice as the README does it (`sluice run ...
--outputs argmax`, then `sluice export`; and `sluice run ... --export masks` when the binary has that
option) against the plain PyTorch script data_tools/w4_torch.py, in the same call; Sluice with a cold
and a warm cuDNN algorithm cache.  The figure is the wall time from launch to the last PNG.

    python3 data_tools/bench_w4.py --counts 2000,8000 --out OUT      # on a GPU host, from a bundle:
    python3 data_tools/bench_w4.py --sluice .devrt/bin/sluice --runner .devrt/run --out "$OUT"

Steps: make max(--counts) photos (640x480 quality 90, ~100 kB, data_tools/make_image_dataset.py)
while the model is exported (data_tools/export_model.py, its weights saved for the PyTorch script);
one short warm-up of each side (libraries into the page cache; not timed); then for each count,
largest first: PyTorch, Sluice cold (a fresh, empty --algo-cache folder), Sluice warm (the folder the
cold run filled), and the same two with --export.  Each run's PNGs are counted (every photo must have
its mask) and a few masks compared with PyTorch's (agreement, not equality: bf16 and two resizers).
Prints one table and a second with where each Sluice run's seconds went (set-up part by part, the
pipeline, the export step, the rest: process start and teardown), and writes OUT/w4.txt, OUT/w4.json
and each run's log under OUT/logs/.  Runs that would pass --deadline are skipped and say so.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGENET = ["--scale", "0.00392156862745098", "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def jpegs(folder):
    out = []
    for root, _, names in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, n), folder) for n in names if n.endswith(".jpg")]
    return sorted(out)


def pngs(folder):
    n = 0
    for _, _, names in os.walk(folder):
        n += sum(1 for x in names if x.endswith(".png"))
    return n


def subset(src, dst, names):
    """The first len(names) photos as hard links: the same files, a folder of their own."""
    shutil.rmtree(dst, ignore_errors=True)
    for n in names:
        os.makedirs(os.path.join(dst, os.path.dirname(n)), exist_ok=True)
        os.link(os.path.join(src, n), os.path.join(dst, n))


class Bench:
    def __init__(self, a):
        self.a = a
        self.runner = shlex.split(a.runner)
        self.rows = []
        os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)

    def left(self):
        return self.a.deadline - (time.time() - T0)

    def timed(self, tag, cmd, env=None):
        """Runs cmd, its output to OUT/logs/TAG.log; (seconds, exit status, stdout)."""
        budget = min(self.a.timeout, max(1, self.left()))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, env=env)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", f"timed out after {budget:.0f} s"
        dt = time.perf_counter() - t0
        with open(os.path.join(self.a.out, "logs", tag + ".log"), "a") as f:
            f.write(f"$ {shlex.join(map(str, cmd))}\n# exit {rc} after {dt:.2f} s\n{out}\n{err}\n")
        if rc != 0:
            log(f"{tag}: exit {rc} (OUT/logs/{tag}.log): {err.strip().splitlines()[-1] if err.strip() else ''}")
        return dt, rc, out

    def sluice(self, *args):
        return self.runner + [self.a.sluice, *map(str, args)]

    def has_run_export(self):
        p = subprocess.run(self.sluice("run", "--help"), capture_output=True, text=True)
        return re.search(r"^\s*--export\b", p.stdout, re.M) is not None

    # ---- the sides ----

    def torch(self, tag, photos, n):
        dst = os.path.join(self.a.work, "runs", tag)
        shutil.rmtree(dst, ignore_errors=True)
        dt, rc, _ = self.timed(tag, [sys.executable, os.path.join(HERE, "w4_torch.py"), photos, dst, self.weights,
                                     str(self.a.batch)])
        return self.row(tag, "pytorch", n, dt, rc, dst)

    def sluice_run(self, tag, photos, n, cache, during):
        run_dir = os.path.join(self.a.work, "runs", tag)
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = self.sluice("run", "--model", self.model, "--input", photos, "--resize", "512x512", *IMAGENET,
                          "--outputs", "argmax", "--batch-size", self.a.batch, "--precision", "bf16",
                          "--output", run_dir, "--algo-cache", cache, "--quiet", *shlex.split(self.a.sluice_args))
        if during:
            cmd += ["--export", "masks"]
        t_run, rc, out = self.timed(tag, cmd)
        t_export = 0.0
        if rc == 0 and not during:
            t_export, rc, _ = self.timed(tag, self.sluice("export", run_dir))
        # RUN_DIR/export, where both ways of exporting write by default (else wherever the PNGs are).
        png_dir = os.path.join(run_dir, "export")
        if not os.path.isdir(png_dir):
            png_dir = run_dir
        row = self.row(tag, "sluice" + (" --export" if during else " + export"), n, t_run + t_export, rc, png_dir)
        row["cache"] = "cold" if "cold" in tag else "warm"
        row["run_s"], row["export_s"] = t_run, t_export
        try:
            rep = json.load(open(os.path.join(run_dir, "report.json")))
            k = rep["ranks"][0]
            row["setup_s"], row["setup"] = k["setup_s"], k.get("setup", {})
            row["pipeline_s"], row["first_batch_s"] = rep["job"]["makespan_s"], k["first_batch_s"]
            row["images_per_s"], row["limit"] = rep["job"]["throughput"], k["limit"]
        except (OSError, KeyError, ValueError):
            pass
        line = next((x for x in out.splitlines() if x.startswith("set-up:")), "")
        if line:
            log(f"{tag}: {line}")
        return row

    def row(self, tag, side, n, wall, rc, png_dir):
        made = pngs(png_dir) if rc == 0 else 0
        r = {"tag": tag, "side": side, "photos": n, "wall_s": wall if rc == 0 else None, "exit": rc, "pngs": made,
             "png_dir": png_dir}
        ok = rc == 0 and made == n
        log(f"{tag}: {side}, {n} photos: " + (f"{wall:.2f} s, {made} PNGs" if rc == 0 else f"FAILED (exit {rc})") +
            ("" if ok or rc != 0 else f"  <-- {n - made} masks missing"))
        self.rows.append(r)
        return r

    def agreement(self, a_dir, b_dir, names, count=16):
        """Fraction of mask pixels on which two runs agree, over the first `count` photos."""
        import numpy as np
        from PIL import Image
        same = total = 0
        for n in names[:count]:
            png = os.path.splitext(n)[0] + ".png"
            try:
                x = np.asarray(Image.open(os.path.join(a_dir, png)))
                y = np.asarray(Image.open(os.path.join(b_dir, png)))
            except OSError:
                return None
            if x.shape != y.shape:
                return None
            same += int((x == y).sum())
            total += x.size
        return same / total if total else None

    # ---- the whole call ----

    def prepare(self):
        a = self.a
        os.makedirs(a.work, exist_ok=True)
        top = max(a.counts)
        self.model = os.path.join(a.work, "deeplabv3_resnet50.onnx")
        self.weights = os.path.join(a.work, "deeplabv3_resnet50.pt")
        all_photos = os.path.join(a.work, "photos")
        procs = []
        if len(jpegs(all_photos)) < top:
            shutil.rmtree(all_photos, ignore_errors=True)
            procs.append(("photos", subprocess.Popen(
                [sys.executable, os.path.join(HERE, "make_image_dataset.py"), "--out", all_photos, "--count", str(top),
                 "--width", "640", "--height", "480", "--portrait", "0", "--quality", "90"],
                stdout=open(os.path.join(a.out, "logs", "photos.log"), "w"), stderr=subprocess.STDOUT)))
        if not (os.path.exists(self.model) and os.path.exists(self.weights)):
            procs.append(("model", subprocess.Popen(
                [sys.executable, os.path.join(HERE, "export_model.py"), "--model", "deeplabv3_resnet50", "--out",
                 self.model, "--height", "512", "--width", "512", "--save-weights", self.weights],
                stdout=open(os.path.join(a.out, "logs", "model.log"), "w"), stderr=subprocess.STDOUT)))
        for name, p in procs:
            if p.wait() != 0:
                raise SystemExit(f"bench_w4: making the {name} failed: OUT/logs/{name}.log")
        names = jpegs(all_photos)
        sizes = [os.path.getsize(os.path.join(all_photos, n)) for n in names[:500]]
        log(f"{len(names)} photos in {all_photos}, {sum(sizes) / len(sizes) / 1e3:.0f} kB on average; model {self.model}")
        self.names = names
        self.folders = {}
        for n in a.counts:
            self.folders[n] = os.path.join(a.work, f"photos-{n}")
            subset(all_photos, self.folders[n], names[:n])
        warm = os.path.join(a.work, "photos-warmup")
        subset(all_photos, warm, names[:2 * a.batch])
        # Libraries and model file into the page cache on both sides (not timed, not in the table).
        if "pytorch" in a.sides:
            self.torch("warmup-pytorch", warm, 2 * a.batch)
        if "sluice" in a.sides:
            self.sluice_run("warmup-sluice", warm, 2 * a.batch, "none", False)
        self.rows = []

    def run(self):
        a = self.a
        during = self.has_run_export()
        log("sluice run --export: " + ("present, timed too" if during else "absent in this binary (only run + export)"))
        for n in sorted(a.counts, reverse=True):
            photos = self.folders[n]
            ref = {}
            plan = [("pytorch", None, False)] if "pytorch" in a.sides else []
            variants = [v for v in ([False, True] if during else [False])
                        if a.variants == "both" or (a.variants == "during") == v]
            for variant in variants if "sluice" in a.sides else []:
                v = "-during" if variant else ""
                plan += [(f"sluice{v}-cold", "cold", variant), (f"sluice{v}-warm", "warm", variant)]
            for name, cache, variant in plan:
                tag = f"{name}-{n}"
                if self.left() < 5:
                    log(f"{tag}: skipped: the {a.deadline:.0f} s deadline is near")
                    continue
                if cache is None:
                    ref = self.torch(tag, photos, n)
                    continue
                cache_dir = os.path.join(a.work, f"cache-{n}{'-during' if variant else ''}")
                if cache == "cold":
                    shutil.rmtree(cache_dir, ignore_errors=True)
                r = self.sluice_run(tag, photos, n, cache_dir, variant)
                if r["exit"] == 0 and ref.get("exit") == 0 and ref.get("pngs"):
                    r["agreement"] = self.agreement(r["png_dir"], ref["png_dir"], self.names)
        self.report()

    def report(self):
        lines = ["W4: JPEG photos (640x480) -> DeepLabV3-ResNet50 bf16 at 512x512 -> argmax -> one PNG each; "
                 "wall time from launch to the last PNG",
                 f"{'photos':>6}  {'side':<18} {'cache':<5} {'wall s':>7} {'vs torch':>8} {'PNGs':>6}  agree",
                 ]
        torch_wall = {r["photos"]: r["wall_s"] for r in self.rows if r["side"] == "pytorch"}
        for r in self.rows:
            t = torch_wall.get(r["photos"])
            speed = f"{t / r['wall_s']:.2f}x" if t and r["wall_s"] else "-"
            wall = f"{r['wall_s']:.2f}" if r["wall_s"] is not None else f"exit {r['exit']}"
            agree = f"{100 * r['agreement']:.2f}%" if r.get("agreement") is not None else ""
            lines.append(f"{r['photos']:>6}  {r['side']:<18} {r.get('cache', ''):<5} {wall:>7} {speed:>8} {r['pngs']:>6}  {agree}")
        lines += ["", "where Sluice's seconds go (s): set-up parts, pipeline (first batch included), export step, "
                  "rest = process start, outputs.h5, teardown",
                  f"{'run':<24} {'wall':>6} {'set-up':>6} {'input':>6} {'model':>6} {'build':>6} {'tune':>6} "
                  f"{'capt':>6} {'other':>6} {'pipe':>6} {'1st b':>6} {'export':>6} {'rest':>6}  img/s, limit"]
        for r in self.rows:
            if "setup_s" not in r or r["wall_s"] is None:
                continue
            p = r["setup"]
            rest = r["wall_s"] - r["setup_s"] - r["pipeline_s"] - r["export_s"]
            vals = [r["wall_s"], r["setup_s"], p.get("input_s", 0), p.get("model_load_s", 0), p.get("engine_build_s", 0),
                    p.get("autotune_s", 0), p.get("graph_capture_s", 0), p.get("other_s", 0), r["pipeline_s"],
                    r["first_batch_s"], r["export_s"], rest]
            lines.append(f"{r['tag']:<24} " + " ".join(f"{v:6.2f}" for v in vals) +
                         f"  {r['images_per_s']:.0f}, {r['limit']}; algorithms measured "
                         f"{p.get('algorithms_measured', '?')}, cached {p.get('algorithms_cached', '?')}")
        text = "\n".join(lines)
        print(text, flush=True)
        open(os.path.join(self.a.out, "w4.txt"), "w").write(text + "\n")
        json.dump(self.rows, open(os.path.join(self.a.out, "w4.json"), "w"), indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", default="2000,8000", help="photo counts, comma list (each a timed set)")
    p.add_argument("--sluice", default="build/sluice")
    p.add_argument("--runner", default="", help="prefix for the sluice binary, e.g. .devrt/run")
    p.add_argument("--batch", type=int, default=64, help="batch size of both sides")
    p.add_argument("--sluice-args", default="", help="more `sluice run` options, one string")
    p.add_argument("--work", default="/tmp/sluice-w4", help="photos, model, caches and runs")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/sluice-w4-out"), help="table, json and logs")
    p.add_argument("--deadline", type=float, default=540, help="seconds for the whole call; later runs are skipped")
    p.add_argument("--sides", default="pytorch,sluice", help="which sides to time (a check of one side alone)")
    p.add_argument("--timeout", type=float, default=150, help="seconds for one process")
    p.add_argument("--variants", default="both", choices=["both", "during", "after"],
                   help="which Sluice ways: `run --export` (during), `run` then `sluice export` (after), or both")
    a = p.parse_args()
    a.counts = [int(x) for x in a.counts.split(",") if x]
    a.work, a.out = os.path.abspath(a.work), os.path.abspath(a.out)
    if not shutil.which(a.sluice) and not os.path.exists(a.sluice):
        raise SystemExit(f"bench_w4: no sluice binary at {a.sluice} (--sluice)")
    b = Bench(a)
    b.prepare()
    b.run()
    return 0 if all(r["exit"] == 0 and r["pngs"] == r["photos"] for r in b.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
