"""Issue 15, attacks 6 and 7: checkpoint paths, error texts, projections, worker bombs.

Over real sockets against a real daemon: paths outside ``[jobs] checkpoint_roots`` are
refused before any job runs, and the run page shows no file content. In the worker's
own functions (the code a job runs): the loader's error text never reaches the page, a
stride-0 tensor is refused before any math, projections never replace a file they did
not write and keep the checkpoint's permissions, and the worker's memory is limited.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import http_get, sample, wait_for
from wtwin.daemon.spectral.checkpoint import CheckpointError, load_state_dict
from wtwin.emitters import connect

torch = pytest.importorskip("torch")


class TestRoots:
    def test_paths_outside_the_roots_are_refused_and_nothing_leaks(self, daemon, tmp_path):
        """/etc/shadow, /proc/self/environ, a relative path and a symlink out of the root:
        all refused (jobs outcome ``refused``), the page says why and shows no content."""
        os.symlink("/etc/passwd", tmp_path / "escape.pt")
        paths = ["/etc/shadow", "/proc/self/environ", "relative/model.pt", str(tmp_path / "escape.pt")]
        for i, path in enumerate(paths):
            with connect(daemon.ipc, run=f"probe{i}") as emit:
                emit.checkpoint(1, path, want=("analyze", "project"))
        wait_for(lambda: sample(daemon, "wtwind_jobs_total", outcome="refused") == len(paths),
                 what="every probe refused")
        for i in range(len(paths)):
            status, body = http_get(f"{daemon.url}/api/runs/probe{i}")
            doc = json.loads(body)
            text = json.dumps(doc.get("spectral"))
            assert status == 200 and ("outside" in text or "absolute" in text), text
            assert "root:" not in text and "PATH=" not in text
        assert sample(daemon, "wtwind_jobs_total", outcome="ok") == 0


class TestWorkerSide:
    def test_loader_errors_carry_no_file_content(self, tmp_path):
        bad = tmp_path / "x.pt"
        bad.write_bytes(b"v" + os.urandom(64))
        with pytest.raises(CheckpointError) as err:
            load_state_dict(str(bad), roots=(str(tmp_path),))
        assert err.value.reason in ("unsafe", "not_a_checkpoint")  # torch: "Unsupported operand 118"
        assert "118" not in str(err.value) and "operand" not in str(err.value).lower()

    def test_stride_zero_bomb_is_refused_before_any_math(self, tmp_path):
        bomb = tmp_path / "bomb.pt"
        torch.save({"w.weight": torch.zeros(1).expand(20000, 4000)}, bomb)
        assert bomb.stat().st_size < 4096
        with pytest.raises(CheckpointError) as err:
            load_state_dict(str(bomb), roots=(str(tmp_path),))
        assert err.value.reason == "bad_tensor"

    def test_roots_are_checked_again_in_the_worker(self, tmp_path):
        with pytest.raises(CheckpointError) as err:
            load_state_dict("/etc/passwd", roots=(str(tmp_path),))
        assert err.value.reason == "outside_roots"

    def test_projection_never_replaces_a_foreign_file_and_keeps_permissions(self, tmp_path):
        from wtwin.daemon.jobs.project import ours, project_checkpoint, projected_path

        src = tmp_path / "model.pt"
        g = torch.Generator().manual_seed(0)
        sd = {"a.weight": torch.randn(64, 32, generator=g)}
        torch.save(sd, src)
        os.chmod(src, 0o640)
        target = projected_path(str(src))
        with open(target, "wb") as f:
            f.write(b"someone else's file")
        with pytest.raises(CheckpointError) as err:
            project_checkpoint(sd, str(src), "torch", {})
        assert err.value.reason == "target_exists"
        assert open(target, "rb").read() == b"someone else's file"
        os.unlink(target)
        project_checkpoint(sd, str(src), "torch", {})
        assert ours(target) and os.stat(target).st_mode & 0o777 == 0o640
        project_checkpoint(sd, str(src), "torch", {})  # its own file: replaced
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".wwpgd-")]

    @pytest.mark.slow  # 30 s on 2 busy cores (make test-all, CI)
    def test_worker_memory_is_limited(self):
        code = ("from wtwin.daemon.jobs import worker\n"
                "worker.init_pool_worker('fast', 1, 2 << 30)\n"
                "try:\n    bytearray(3 << 30)\nexcept MemoryError:\n    print('limited')\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == "limited", out.stderr


class TestBombOverSockets:
    @pytest.mark.slow  # 21 s on 2 busy cores (make test-all, CI)
    def test_a_bomb_fails_fast_and_the_next_checkpoint_is_analysed(self, daemon, tmp_path):
        """Attack 7 end to end: the 2 KB stride-0 file fails with bad_tensor in the worker
        (no 117 s of CPU), and a legitimate checkpoint after it is analysed."""
        bomb = tmp_path / "bomb.pt"
        torch.save({"w.weight": torch.zeros(1).expand(20000, 4000)}, bomb)
        good = tmp_path / "good.pt"
        g = torch.Generator().manual_seed(1)
        torch.save({"a.weight": torch.randn(128, 64, generator=g)}, good)
        with connect(daemon.ipc, run="bomber") as emit:
            emit.checkpoint(1, str(bomb), want=("analyze",))
        wait_for(lambda: sample(daemon, "wtwind_jobs_total", outcome="failed") == 1, 120, 0.2, "bomb failed")
        doc = json.loads(http_get(f"{daemon.url}/api/runs/bomber")[1])
        assert "bad_tensor" in json.dumps(doc["spectral"]) or "expanded" in json.dumps(doc["spectral"])
        with connect(daemon.ipc, run="honest") as emit:
            emit.checkpoint(1, str(good), want=("analyze",))
        wait_for(lambda: sample(daemon, "wtwind_jobs_total", outcome="ok") == 1, 120, 0.2, "analysed")
