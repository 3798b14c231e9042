"""Launching `sluice run` from Python with a progress callback."""
import os
import shutil
import subprocess
import threading
import time
from typing import Callable, List, Optional, Sequence

from .folder import Run, RunError

# Exit statuses (README, "Exit status").
EXIT_OK, EXIT_STOPPED = 0, 75


def find_binary(binary: Optional[str] = None) -> str:
    """`binary`, else $SLUICE_BIN, else `sluice` on PATH, else this repository's build/sluice."""
    if binary:
        return binary
    if os.environ.get("SLUICE_BIN"):
        return os.environ["SLUICE_BIN"]
    on_path = shutil.which("sluice")
    if on_path:
        return on_path
    repo = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "sluice")
    if os.path.exists(repo):
        return repo
    raise RunError("no sluice binary: pass binary=PATH, set SLUICE_BIN, or put sluice on PATH")


def command_line(options: dict) -> List[str]:
    """Keyword options as `sluice run` options: batch_size=8 -> --batch-size 8, a True flag ->
    --flag, False or None -> left out, a list or tuple -> comma-separated values."""
    out: List[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def run(progress: Optional[Callable[[int, int], None]] = None, *, binary: Optional[str] = None,
        launcher: Sequence[str] = (), interval_s: float = 1.0, extra_args: Sequence[str] = (),
        env: Optional[dict] = None, **options) -> Run:
    """Runs `sluice run` with `options` (the long option names, `_` for `-`; `output` is required)
    and returns the run folder.  `progress(committed, total)` is called from this thread as
    commits land (read from the rank files' ledgers, every `interval_s`) and once at the end.
    `launcher`: e.g. ["mpirun", "-np", "4"].  A job that stops on a signal (exit 75) returns its
    incomplete Run (`run.complete` False; resume with resume=True); any other failure raises
    RunError with sluice's error line and exit status."""
    if not options.get("output"):
        raise RunError("sluice.run needs output=FOLDER (the run folder)")
    cmd = [*launcher, find_binary(binary), "run", *command_line(options), *extra_args]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, errors="replace",
                         env=env)
    lines: List[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    folder = os.fspath(options["output"])
    last = -1

    def report():
        nonlocal last
        if progress is None:
            return
        try:
            r = Run(folder)
            done, total = r.committed, r.total
        except (RunError, OSError, KeyError, IndexError):
            return  # not yet a run folder: the job is starting
        if done != last:
            last = done
            progress(done, total)

    while p.poll() is None:
        report()
        time.sleep(interval_s)
    reader.join()
    status = p.returncode
    if status not in (EXIT_OK, EXIT_STOPPED):
        errors = [line.rstrip() for line in lines if line.startswith("sluice: error:")]
        hints = [line.rstrip() for line in lines if line.startswith("sluice: hint:")]
        tail = [line.rstrip() for line in lines[-5:]]
        raise RunError("\n".join(errors + hints) or "\n".join(tail) or f"sluice run exited {status}", status)
    report()
    r = Run(folder)
    r.exit_status = status
    return r
