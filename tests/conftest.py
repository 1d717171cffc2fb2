import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import Daemon  # noqa: E402


@pytest.fixture
def daemon(tmp_path):
    """A running wtwind subprocess with private endpoints; stopped after the test."""
    with Daemon(tmpdir=str(tmp_path)) as d:
        yield d
