"""pytest setup of the Python client's tests: stubs generated, package on path.

The stubs are generated once per session (client/python/gen_stubs.sh, well
under a second), so that the tests always run against the current .proto
files, with or without a prior Bazel build.
"""

import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(PYTHON_DIR))

subprocess.run([os.path.join(PYTHON_DIR, "gen_stubs.sh")], check=True)
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


@pytest.fixture
def shm_dir():
    """A fresh folder under /dev/shm (removed afterwards) for segments."""
    import tempfile  # pylint: disable=import-outside-toplevel
    import shutil  # pylint: disable=import-outside-toplevel

    path = tempfile.mkdtemp(prefix="shardd-pytest-", dir="/dev/shm")
    yield path
    shutil.rmtree(path, ignore_errors=True)
