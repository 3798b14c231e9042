"""The command line as a newcomer meets it, alone and under mpirun -np 2: every subcommand's help
exits 0 (explain-job, mpirun and srun included, and `sluice --help` lists explain-job); flags state
their real default; the last of a repeated option wins, for scalars, lists and flags alike; a list
given with spaces and a misspelt option get a hint that names the fix."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import QUICKSTART, ROOT, error_lines, sluice  # noqa: E402

MODEL = os.path.join(ROOT, "jobs", "models", "quickstart.onnx")


def test_sluice_help_lists_every_command():
    p = sluice("--help")
    assert p.returncode == 0, p.stderr
    for command in ("run", "inspect", "export", "forward", "profile", "mpirun", "srun", "explain-job"):
        assert f"\n  {command} " in p.stdout, (command, p.stdout)


@pytest.mark.parametrize("np_", [None, 2])
@pytest.mark.parametrize("command", ["explain-job", "mpirun", "srun", "run", "export", "inspect"])
def test_every_commands_help_exits_0_and_prints_once(command, np_):
    p = sluice(command, "--help", np_=np_)
    assert p.returncode == 0, p.stderr
    assert f"sluice {command}" in p.stdout or "Usage:" in p.stdout, p.stdout
    assert p.stdout.count("Usage:") == 1, p.stdout  # rank 0 alone under mpirun
    assert p.stderr == "", p.stderr


def test_flags_show_their_real_default():
    p = sluice("run", "--help")
    assert "{false}" not in p.stdout and "{true}" not in p.stdout, p.stdout
    assert "--cuda-graphs, --no-cuda-graphs (default: on)" in p.stdout, p.stdout
    assert "--resume, --no-resume (default: off)" in p.stdout, p.stdout


def resolved(stdout, key):
    """The value of `key` in --dry-run's listing of the resolved job."""
    for line in stdout.splitlines():
        if line.strip().startswith(f"{key} = "):
            return line.strip().split(" = ", 1)[1].split("   [")[0]
    raise AssertionError(f"{key} not in {stdout}")


@pytest.mark.parametrize("np_", [None, 2])
def test_the_last_of_a_repeated_option_wins(tmp_path, np_):
    p = sluice("run", "--config", QUICKSTART, "--output", tmp_path / "o", "--dry-run",
               "--model", tmp_path / "missing.onnx", "--model", MODEL,      # a scalar
               "--mean", "1", "--mean", "2,3,4",                            # a list
               "--cuda-graphs", "--no-cuda-graphs",                         # a flag and its negation
               "--batch-size=8", "--batch-size", "16", np_=np_)
    assert p.returncode == 0, p.stderr
    assert resolved(p.stdout, "model") == f'"{MODEL}"'
    assert resolved(p.stdout, "mean") == "[2, 3, 4]"
    assert resolved(p.stdout, "cuda-graphs") == "false"
    assert resolved(p.stdout, "batch-size") == "16"
    assert p.stdout.count("model = ") == 1  # rank 0 alone explains


@pytest.mark.parametrize("np_", [None, 2])
@pytest.mark.parametrize("values", [["0.485 0.456 0.406"], ["0.485", "0.456", "0.406"]], ids=["quoted", "unquoted"])
def test_a_list_with_spaces_gets_the_comma_hint(tmp_path, np_, values):
    p = sluice("run", "--config", QUICKSTART, "--output", tmp_path / "o", "--mean", *values, np_=np_, timeout=120)
    assert p.returncode == 2, p.stderr
    assert len(error_lines(p.stderr)) == 1, p.stderr
    assert "sluice: hint: separate the values of --mean with commas, without spaces: --mean 0.485,0.456" in p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("np_", [None, 2])
def test_a_misspelt_option_suggests_the_nearest_one_that_keeps_every_letter(tmp_path, np_):
    p = sluice("run", "--config", QUICKSTART, "--output", tmp_path / "o", "--outpus", "argmax", np_=np_, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("sluice: hint: did you mean --outputs?") == 1, p.stderr
