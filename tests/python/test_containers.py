"""containers/Dockerfile and containers/sluice.def (Apptainer) build the same binary by the same
scripts on the same base system.  Without a container engine here, they are parsed: every
instruction or section is one the format knows, every shell step passes `bash -n`, both run the
same data_tools/ scripts in the same order from the same base image, and the files they name
exist.  Where a Docker daemon answers, the image is also built and its binary run.
The Slurm docs' sbatch lines ask for the CPUs each rank needs."""
import json
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.environ.get("SLUICE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOCKERFILE = os.path.join(ROOT, "containers", "Dockerfile")
DEFFILE = os.path.join(ROOT, "containers", "sluice.def")
DOCKER_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                       "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
APPTAINER_SECTIONS = {"setup", "files", "environment", "post", "runscript", "startscript", "test", "labels", "help",
                      "arguments"}


def docker_instructions():
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in open(DOCKERFILE):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\n")
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "a continuation line at the end of the Dockerfile"
    return out


def apptainer_parts():
    """(header {key: value}, {section: body})."""
    header, sections, current = {}, {}, None
    for line in open(DEFFILE):
        m = re.match(r"^%(\w+)\s*$", line)
        if m:
            current = m.group(1)
            assert current not in sections, f"%{current} twice"
            sections[current] = ""
        elif current:
            sections[current] += line
        elif line.strip() and not line.startswith("#"):
            key, _, value = line.partition(":")
            header[key.strip()] = value.strip()
    return header, sections


def scripts_run(shell_text):
    return re.findall(r"data_tools/[\w.-]+\.sh", shell_text)


def bash_n(text, what):
    p = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert p.returncode == 0, f"{what}: {p.stderr}"


def test_the_dockerfile_parses_and_names_what_exists():
    ins = docker_instructions()
    assert {w for w, _ in ins} <= DOCKER_INSTRUCTIONS, ins
    assert [w for w, _ in ins if w != "ARG"][0] == "FROM"
    for w, args in ins:
        if w == "RUN":
            bash_n(args, f"RUN {args}")
        if w in ("ENTRYPOINT", "CMD") and args.startswith("["):
            json.loads(args)
        if w == "COPY":
            assert args.split()[0] == ".", args  # the repository (the build context)
    ignore = open(DOCKERFILE + ".dockerignore").read().split()
    assert "build" in ignore  # a checkout's build folder is not copied into the image


def test_the_apptainer_definition_parses():
    header, sections = apptainer_parts()
    assert header.get("Bootstrap") == "docker" and header.get("From"), header
    assert set(sections) <= APPTAINER_SECTIONS, sections.keys()
    for name in ("post", "environment", "runscript"):
        bash_n(sections[name], f"%{name}")
    assert sections["files"].split()[:2] == [".", "/opt/sluice"], sections["files"]


def test_both_build_the_same_binary_the_same_way():
    ins = docker_instructions()
    docker_runs = " ".join(a for w, a in ins if w == "RUN")
    header, sections = apptainer_parts()
    assert scripts_run(docker_runs) == scripts_run(sections["post"]) == ["data_tools/install-deps.sh",
                                                                        "data_tools/build.sh"]
    for script in scripts_run(docker_runs):
        assert os.access(os.path.join(ROOT, script), os.X_OK), script
    base = [a for w, a in ins if w == "ARG" and a.startswith("BASE=")][0].split("=", 1)[1]
    assert header["From"] == base == "debian:12"  # the system the README's commands are tested on
    assert "/opt/sluice/build" in sections["environment"] and any("/opt/sluice/build" in a for w, a in ins if w == "ENV")


def docker_daemon():
    return shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.mark.skipif(not docker_daemon(), reason="no Docker daemon answers here: the Dockerfile is parsed only")
def test_the_docker_image_builds_and_runs():
    subprocess.run(["docker", "build", "-f", DOCKERFILE, "-t", "sluice-test", ROOT], check=True, timeout=3600)
    p = subprocess.run(["docker", "run", "--rm", "sluice-test", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("sluice "), p.stderr


def test_the_sbatch_lines_ask_for_cpus_per_task():
    lines = []
    for doc in ("README.md", "slurm/README.md", "docs/usage.md"):
        lines += [line for line in open(os.path.join(ROOT, doc)) if line.lstrip().startswith("sbatch ")]
    gpu_lines = [line for line in lines if "--gpus-per-node" in line]
    assert gpu_lines and all("--cpus-per-task" in line for line in gpu_lines), gpu_lines
