"""JobRunner with executor = "dask" against a real distributed LocalCluster."""

from __future__ import annotations

import asyncio
import time

import pytest

torch = pytest.importorskip("torch")
distributed = pytest.importorskip("distributed")

from wtwin.daemon.jobs import JobRunner, JobsConfig  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as lc:
        yield lc


async def _until(pred, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.05)


class TestDaskExecutor:
    @pytest.mark.slow  # 23 s on 2 busy cores (make test-all, CI)
    def test_analysis_runs_on_the_cluster(self, cluster, tmp_path):
        """Two runs' checkpoints are analysed by the cluster's worker, bad input fails clearly."""
        g = torch.Generator().manual_seed(1)
        path = tmp_path / "m.pt"
        torch.save({"fc.weight": torch.randn(96, 40, generator=g)}, path)
        results = {}

        async def main():
            cfg = JobsConfig(checkpoint_roots=("/",), executor="dask", dask_address=cluster.scheduler_address, timeout_s=120)
            runner = JobRunner(cfg, lambda r: results.__setitem__(r.run, r))
            runner.submit("a", {"step": 5, "path": str(path)})
            runner.submit("b", {"step": 6, "path": str(tmp_path / "missing.pt")})
            await _until(lambda: len(results) == 2)
            await runner.aclose()

        asyncio.run(main())
        assert results["a"].ok and results["a"].layers[0].name == "fc"
        assert results["a"].layers[0].num_evals == 40
        assert results["b"].outcome == "failed" and results["b"].reason == "missing"
