import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the repository root too, so that job workers spawned by a test can import the test
# module that defines their function (``tests.test_jobs``), also under a bare ``pytest``
# (``python -m pytest`` puts the working directory on the path; the ``pytest`` script not)
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from helpers import Daemon  # noqa: E402

import os  # noqa: E402
import tempfile  # noqa: E402

# run secrets (emitters/run_secret.py) go to a private folder, not ~/.local/state; trainer
# subprocesses inherit it, so a resumed trainer finds its run's secret as in real use
os.environ.setdefault("WTWIN_SECRET_DIR", tempfile.mkdtemp(prefix="wtwin-secrets-"))


@pytest.fixture
def daemon(tmp_path):
    """A running wtwind subprocess with private endpoints; stopped after the test."""
    with Daemon(tmpdir=str(tmp_path)) as d:
        yield d
