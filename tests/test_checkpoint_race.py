"""Issue 24, checkpoints: a folder swapped for a symlink while the job waits cannot make the
worker read, or write a projection, outside ``[jobs] checkpoint_roots``; and with a
``{run}`` root each run reads only its own folder (over real sockets)."""

from __future__ import annotations

import json
import os

import pytest

from helpers import Daemon, http_get, wait_for
from wtwin.daemon.jobs.project import project_checkpoint
from wtwin.daemon.spectral.checkpoint import CheckpointError, load_opened
from wtwin.daemon.spectral.roots import roots_for
from wtwin.daemon.spectral.safe_open import open_checkpoint, open_under
from wtwin.emitters import connect

torch = pytest.importorskip("torch")


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(64, 32, generator=g)}


@pytest.fixture
def tree(tmp_path):
    """root/team/model.pt inside the root, and outside/team/model.pt beside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "team").mkdir(parents=True)
    (outside / "team").mkdir(parents=True)
    torch.save(_weights(1), root / "team" / "model.pt")
    torch.save({"secret.weight": torch.ones(8, 8)}, outside / "team" / "model.pt")
    return root, outside


class TestSwappedFolder:
    def test_a_folder_swapped_after_the_check_fails_the_open(self, tree):
        root, outside = tree
        path = str(root / "team" / "model.pt")
        parts = ["team", "model.pt"]  # as resolved when the path was checked
        os.rename(root / "team", root / "team.old")          # the swap, after the check
        os.symlink(outside / "team", root / "team")
        with pytest.raises(CheckpointError) as err:
            open_under(str(root), parts, path)
        assert err.value.reason == "swapped" and "symbolic link" in str(err.value)

    def test_the_file_itself_swapped_for_a_link_fails_too(self, tree):
        root, outside = tree
        os.rename(root / "team" / "model.pt", root / "team" / "real.pt")
        os.symlink(outside / "team" / "model.pt", root / "team" / "model.pt")
        with pytest.raises(CheckpointError) as err:
            open_under(str(root), ["team", "model.pt"], str(root / "team" / "model.pt"))
        assert err.value.reason == "swapped"

    def test_a_projection_goes_beside_the_file_opened_not_through_the_new_link(self, tree):
        root, outside = tree
        path = str(root / "team" / "model.pt")
        with open_checkpoint(path, (str(root),)) as ck:
            tensors = load_opened(ck)
            assert set(tensors) == {"a.weight"}              # the file inside the root
            os.rename(root / "team", root / "team.old")      # swapped while the job runs
            os.symlink(outside / "team", root / "team")
            project_checkpoint(tensors, path, None, {}, opened=ck)
        assert (root / "team.old" / "model.wwpgd.pt").exists()
        assert not (outside / "team" / "model.wwpgd.pt").exists()

    def test_symlinks_inside_the_root_still_work_when_checked(self, tree):
        root, _ = tree
        os.symlink(root / "team", root / "latest")
        with open_checkpoint(str(root / "latest" / "model.pt"), (str(root),)) as ck:
            assert set(load_opened(ck)) == {"a.weight"}


class TestRunRoots:
    def test_run_placeholder_gives_each_run_its_own_folder(self, tmp_path):
        roots = (str(tmp_path / "{run}"),)
        assert roots_for("alice", roots) == (os.path.realpath(tmp_path / "alice"),)
        for bad in ("..", ".", "a/../../etc"):
            assert roots_for(bad, roots) == ()

    def test_another_run_cannot_read_or_project_a_victims_checkpoint(self, tmp_path):
        (tmp_path / "alice").mkdir()
        ckpt = tmp_path / "alice" / "model.pt"
        torch.save(_weights(2), ckpt)
        env = {"WTWIND_JOBS__CHECKPOINT_ROOTS": str(tmp_path / "{run}")}
        (tmp_path / "d").mkdir()
        with Daemon(env, tmpdir=str(tmp_path / "d")) as d:
            with connect(d.ipc, run="mallory") as emit:
                emit.checkpoint(1, str(ckpt), want=("analyze", "project"))
            wait_for(lambda: d.metrics().get(("wtwind_jobs_total", (("outcome", "refused"),))) == 1,
                     120, 0.2, "mallory refused")
            doc = json.loads(http_get(f"{d.url}/api/runs/mallory")[1])
            assert "a.weight" not in json.dumps(doc)
            assert not (tmp_path / "alice" / "model.wwpgd.pt").exists()
            with connect(d.ipc, run="alice") as emit:
                emit.checkpoint(1, str(ckpt), want=("analyze",))
            wait_for(lambda: d.metrics().get(("wtwind_jobs_total", (("outcome", "ok"),))) == 1,
                     120, 0.2, "alice analysed")
