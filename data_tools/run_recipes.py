#!/usr/bin/env python3
"""Runs every recipe of docs/recipes.md as written, on a host with torch, torchvision, timm and
transformers (the GPU host; no network needed: the recipes build their models from configurations).

    PYTHONUNBUFFERED=1 python3 data_tools/run_recipes.py [--sluice CMD] [--only NAME,...] [--keep DIR]

A recipe is a `<!-- recipe: NAME -->` marker, a ```python block and a ```sh block; they are read from
the page itself, so the page and this run cannot drift apart.  Each recipe runs in a folder of its own
that holds `build/sluice` (this build, or --sluice: e.g. ".devrt/run sluice" on the GPU host) and
`photos/` (a few photo-like JPEGs from make_image_dataset.py, landscape and portrait): the Python block
first (the export), then the shell block's commands one by one (`sluice check`, a short `sluice run`
over the photos, `sluice export`).  One JSON line per recipe on stdout:

    {"recipe": "clip", "status": "ok" | "failed", "step": "export" | "check" | "run" | "export-files" | ...,
     "reason": "...", "seconds": 41.2, "check": ["cpu ...; cuda ...; batch ..."], "run": "job: ... | status: ..."}

`step` and `reason` say where a failed recipe stopped and the end of what it printed; progress goes to
stderr.  Exit status 0 when every recipe ran, 1 otherwise.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "recipes.md")
RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\s*```python\n(.*?)```\s*```sh\n(.*?)```", re.S)


def recipes(text=None):
    """[(name, python, sh)] in the page's order."""
    if text is None:
        with open(PAGE) as f:
            text = f.read()
    return RECIPE.findall(text)


def commands(sh):
    """The shell block as argument lists: continuation lines joined, comments dropped."""
    out = []
    for line in sh.replace("\\\n", " ").splitlines():
        args = shlex.split(line, comments=True)
        if args:
            out.append(args)
    return out


def step_of(args):
    """"check", "run", "export", ... for `build/sluice VERB ...`; the command's first word otherwise."""
    if args[0] == "build/sluice" and len(args) > 1:
        return args[1]
    return os.path.basename(args[0])


def tail(text, n=1500):
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def make_photos(folder, count):
    subprocess.run([sys.executable, os.path.join(ROOT, "data_tools", "make_image_dataset.py"), "--out", folder,
                    "--count", str(count), "--workers", "2", "--portrait", "0.3"], check=True, capture_output=True)


def sluice_wrapper(folder, sluice):
    """build/sluice in `folder`: a link to the binary, or a script running `sluice` (a command line)."""
    os.makedirs(os.path.join(folder, "build"), exist_ok=True)
    path = os.path.join(folder, "build", "sluice")
    words = shlex.split(sluice)
    first = os.path.abspath(words[0]) if os.path.exists(words[0]) else words[0]
    if len(words) == 1:
        os.symlink(first, path)
        return
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(shlex.quote(w) for w in [first] + words[1:]) + ' "$@"\n')
    os.chmod(path, 0o755)


def run_recipe(name, python, sh, folder, photos, sluice, timeout):
    t0 = time.time()
    result = {"recipe": name, "status": "ok"}
    os.makedirs(folder)
    sluice_wrapper(folder, sluice)
    os.symlink(photos, os.path.join(folder, "photos"))
    with open(os.path.join(folder, "recipe.py"), "w") as f:
        f.write(python)

    def fail(step, reason):
        result.update(status="failed", step=step, reason=reason)
        return result

    try:
        p = subprocess.run([sys.executable, "recipe.py"], cwd=folder, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            return fail("export", tail(p.stderr or p.stdout))
        for args in commands(sh):
            step = step_of(args)
            p = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=timeout)
            if step == "check":
                result.setdefault("check", []).append("; ".join(
                    line for line in p.stdout.splitlines() if line.split(" ")[0] in ("cpu", "cuda", "batch")))
            elif step == "run":
                lines = [x for x in p.stdout.splitlines() + p.stderr.splitlines() if x.startswith(("job:", "status:"))]
                result["run"] = " | ".join(lines)
            if p.returncode != 0:
                return fail(step, f"exit {p.returncode}: {' '.join(args)}\n" + tail(p.stderr + "\n" + p.stdout))
    except subprocess.TimeoutExpired as e:
        return fail("timeout", f"more than {timeout} s: {e.cmd}")
    finally:
        result["seconds"] = round(time.time() - t0, 1)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"),
                    help="the sluice to run: a binary, or a command line such as '.devrt/run sluice'")
    ap.add_argument("--only", default="", help="comma list of recipe names")
    ap.add_argument("--keep", default="", help="folder to work in and keep (default: a temporary one, removed)")
    ap.add_argument("--photos", type=int, default=12, help="photos in photos/")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for each step")
    a = ap.parse_args()
    found = recipes()
    names = [n for n, _, _ in found]
    only = [x for x in a.only.split(",") if x]
    unknown = [x for x in only if x not in names]
    if unknown:
        sys.exit(f"run_recipes: no recipe {', '.join(unknown)} in {PAGE} (it has {', '.join(names)})")
    work = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(prefix="recipes-")
    os.makedirs(work, exist_ok=True)
    photos = os.path.join(work, "photos")
    if not os.path.isdir(photos):
        make_photos(photos, a.photos)
    failed = 0
    try:
        for name, python, sh in found:
            if only and name not in only:
                continue
            print(f"run_recipes: {name} ...", file=sys.stderr, flush=True)
            folder = os.path.join(work, name)
            shutil.rmtree(folder, ignore_errors=True)
            r = run_recipe(name, python, sh, folder, photos, a.sluice, a.timeout)
            failed += r["status"] != "ok"
            print(json.dumps(r), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
