"""What every pytest file of tests/ (python/, mpi/, slurm/) shares: `support.sluice_test` (tests/support/)
and the data makers of data_tools/ are importable by name.  A test file's own folder is on the path
already (pytest puts it there), so files of one folder import each other directly."""
import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.join(os.path.dirname(_TESTS), "data_tools"), _TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
