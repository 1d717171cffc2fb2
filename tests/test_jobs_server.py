"""End to end: a real wtwind, a real emitter, checkpoints analysed and projected by the job pool."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from helpers import Daemon, wait_for  # noqa: E402
from wtwin.emitters import Emitter  # noqa: E402


def _checkpoint(path, seed):
    g = torch.Generator().manual_seed(seed)
    torch.save({"a.weight": torch.randn(128, 64, generator=g), "b.weight": torch.randn(64, 64, generator=g),
                "a.bias": torch.zeros(128)}, path)
    return str(path)


class TestSpectralInTheDaemon:
    @pytest.mark.slow  # 16 s on 2 busy cores (make test-all, CI)
    def test_checkpoints_become_metrics_alerts_and_projections(self, tmp_path):
        """analyze -> per-run alpha gauges and job metrics; two out-of-band checkpoints -> a spectral
        alert back at the trainer; project -> <name>.wwpgd.pt written and projection_ready received."""
        env = {"WTWIND_JOBS__ALPHA_MAX": "2.5", "WTWIND_JOBS__TIMEOUT_S": "120"}
        alerts, projections = [], []
        with Daemon(extra_env=env, tmpdir=str(tmp_path)) as d:
            em = Emitter(d.tcp, "spec-run", on_alert=alerts.append, on_projection=projections.append)
            try:
                em.checkpoint(100, _checkpoint(tmp_path / "c100.pt", 1), want=("analyze",))

                def analysed(n):
                    m = d.metrics()
                    return m.get(("wtwind_jobs_total", (("outcome", "ok"),)), 0) >= n and m

                m = wait_for(lambda: analysed(1), 90, 0.2, "first analysis")
                labels = (("run", "spec-run"),)
                assert m[("wtwind_run_spectral_step", labels)] == 100
                assert m[("wtwind_run_spectral_layers", labels)] == 2
                assert m[("wtwind_run_spectral_alpha_mean", labels)] > 1
                assert ("wtwind_run_spectral_layer_alpha", (("layer", "a"), ("run", "spec-run"))) in m
                assert m[("wtwind_job_duration_seconds_count", ())] >= 1
                assert ("wtwind_jobs_queue_depth", ()) in m

                em.checkpoint(200, _checkpoint(tmp_path / "c200.pt", 2), want=("analyze", "project"))
                wait_for(lambda: (em.poll(), projections and any(a["kind"] == "spectral" for a in alerts))[1],
                         90, 0.2, "projection_ready and the spectral alert")
            finally:
                em.close()
        (proj,) = projections
        assert proj["step"] == 200 and proj["path"] == str(tmp_path / "c200.wwpgd.pt")
        assert os.path.exists(proj["path"])
        projected = torch.load(proj["path"], weights_only=True)
        assert set(projected) == {"a.weight", "b.weight", "a.bias"}
        spectral = [a for a in alerts if a["kind"] == "spectral"]
        assert spectral[0]["status"] == "firing" and "outside" in spectral[0]["message"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:     # field 4 of stat: the parent pid
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to find the workers")
class TestWorkersDoNotOutliveTheDaemon:
    @pytest.mark.slow  # 22 s on 2 busy cores (make test-all, CI)
    def test_sigkilled_daemon_leaves_no_worker_behind(self, tmp_path):
        """A SIGKILLed daemon cannot shut its pool down: its workers notice and exit."""
        d = Daemon(extra_env={"WTWIND_JOBS__WORKERS": "2"}, tmpdir=str(tmp_path)).start()
        try:
            em = Emitter(d.tcp, "orphans")
            try:
                em.checkpoint(1, _checkpoint(tmp_path / "c1.pt", 1), want=("analyze",))
                wait_for(lambda: d.metrics().get(("wtwind_jobs_total", (("outcome", "ok"),)), 0) >= 1,
                         90, 0.2, "the analysis")
            finally:
                em.close()
            workers = [p for p in _children(d.proc.pid) if "multiprocessing" in
                       open(f"/proc/{p}/cmdline").read()]
            assert len(workers) >= 2, "the pool's workers should be running"
            d.kill()                          # SIGKILL: no shutdown, no pool.shutdown()
            wait_for(lambda: not any(_alive(p) for p in workers), 15, 0.2, "workers gone")
        finally:
            d.kill()
