"""docs/recipes.md, cheaply (the recipes themselves run on a host with torch, timm and transformers:
data_tools/run_recipes.py): every recipe marker starts a recipe that run_recipes.py reads, each
Python block parses, each shell block checks the model its Python block writes with `sluice check`
and runs it with options `sluice run` has, and the folders it passes to --preprocess-from are the
ones its Python block saves."""
import ast
import os
import re
import subprocess

import pytest

from support.sluice_test import BIN, ROOT
import run_recipes

PAGE = open(os.path.join(ROOT, "docs", "recipes.md")).read()
RECIPES = run_recipes.recipes(PAGE)
WANTED = {"timm-convnext", "torchvision-swin", "clip", "siglip", "dinov2", "detr", "dynamic-batch"}


def test_every_marked_recipe_is_read():
    names = [n for n, _, _ in RECIPES]
    assert len(names) == PAGE.count("<!-- recipe:") and len(set(names)) == len(names), names
    assert WANTED <= set(names), WANTED - set(names)


@pytest.fixture(scope="module")
def run_options():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"no sluice binary at {BIN}")
    p = subprocess.run([BIN, "run", "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", p.stdout))


@pytest.mark.parametrize("name,python,sh", RECIPES, ids=[n for n, _, _ in RECIPES])
def test_a_recipe_parses_and_checks_what_it_exports(name, python, sh, run_options):
    ast.parse(python, filename=f"recipes.md:{name}")
    cmds = run_recipes.commands(sh)
    assert all(c[0] == "build/sluice" for c in cmds), cmds
    checks = [c for c in cmds if c[1] == "check"]
    runs = [c for c in cmds if c[1] == "run"]
    assert checks and runs, f"{name}: needs a `build/sluice check` line and a `build/sluice run` line"
    for c in checks + runs:
        model = c[c.index("--model") + 1]
        assert f'"{model}"' in python, f"{name}: {model} is not what the Python block writes"
    checked = {c[c.index("--model") + 1] for c in checks}
    for c in runs:
        assert c[c.index("--model") + 1] in checked, f"{name}: `sluice check` the model before running it"
        unknown = [a for a in c if a.startswith("--") and a not in run_options]
        assert not unknown, f"{name}: sluice run has no {unknown}"
        if "--preprocess-from" in c:
            folder = c[c.index("--preprocess-from") + 1].rstrip("/")
            assert f'"{folder}"' in python or f'"{folder}/' in python, f"{name}: nothing saves {folder}/"
        assert c[c.index("--input") + 1] == "photos/"


def test_the_readme_exports_clip_in_its_joint_space():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "pooler_output" not in readme
    assert "image_embeds" in readme and "docs/recipes.md" in readme
    clip = dict((n, p) for n, p, _ in RECIPES)["clip"]
    assert "CLIPVisionModelWithProjection" in clip and ".image_embeds" in clip
