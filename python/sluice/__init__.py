"""Sluice run folders from Python (numpy and h5py only): open_run() reads a finished, stopped or
running job's folder, Run.follow() yields commits as they land, run() launches `sluice run`."""
from .folder import Batch, Run, RunError, decode_key, open_run
from .launch import command_line, find_binary, run

__all__ = ["Batch", "Run", "RunError", "command_line", "decode_key", "find_binary", "open_run", "run"]
__version__ = "0.1.0"
