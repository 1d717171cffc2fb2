"""Checkpoint loading, projection jobs' output files, the CPU/torch eigen paths, health findings."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wtwin.daemon.jobs import worker  # noqa: E402
from wtwin.daemon.jobs.project import projected_path  # noqa: E402
from wtwin.daemon.spectral import analyze, fast  # noqa: E402
from wtwin.daemon.spectral.checkpoint import CheckpointError, load_state_dict  # noqa: E402
from wtwin.daemon.spectral.health import SpectralWatch  # noqa: E402
from wtwin.daemon.spectral.layers import select_layers  # noqa: E402


def _sd(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"fc.weight": torch.randn(80, 40, generator=g), "fc.bias": torch.zeros(80),
            "conv.weight": torch.randn(16, 8, 3, 3, generator=g)}


class TestLoad:
    def test_torch_and_safetensors_give_the_same_tensors(self, tmp_path):
        """A torch state_dict, a wrapped {'model': ...} dict and safetensors all load to CPU tensors."""
        from safetensors.torch import save_file

        sd = _sd()
        torch.save(sd, tmp_path / "a.pt")
        torch.save({"model": sd, "optimizer": {"lr": 0.1}, "epoch": 3}, tmp_path / "wrapped.pt")
        save_file(sd, str(tmp_path / "a.safetensors"))
        for name in ("a.pt", "wrapped.pt", "a.safetensors"):
            got = load_state_dict(str(tmp_path / name))
            assert set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd), name

    def test_pickled_code_is_refused(self, tmp_path):
        """weights_only=True: a checkpoint that needs arbitrary classes is refused, not executed."""
        torch.save({"fc.weight": torch.zeros(8, 8), "obj": _Evil()}, tmp_path / "evil.pt")
        with pytest.raises(CheckpointError) as err:
            load_state_dict(str(tmp_path / "evil.pt"))
        assert err.value.reason == "unsafe"

    @pytest.mark.parametrize("content,fmt,reason", [
        (b"\x00" * 64, "safetensors", "not_a_checkpoint"),
        (b"PK\x03\x04garbage", "torch", "not_a_checkpoint"),
    ])
    def test_garbage_is_a_clear_error(self, tmp_path, content, fmt, reason):
        path = tmp_path / "x.bin"
        path.write_bytes(content)
        with pytest.raises(CheckpointError) as err:
            load_state_dict(str(path), fmt)
        assert err.value.reason == reason

    def test_not_a_state_dict_and_directories(self, tmp_path):
        torch.save([torch.zeros(3)], tmp_path / "list.pt")
        with pytest.raises(CheckpointError, match="not a state_dict"):
            load_state_dict(str(tmp_path / "list.pt"))
        with pytest.raises(CheckpointError) as err:
            load_state_dict(str(tmp_path))
        assert err.value.reason == "not_a_file"


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


class TestProjectionJob:
    def test_names(self):
        assert projected_path("/ck/step100.pt") == "/ck/step100.wwpgd.pt"
        assert projected_path("/ck/model.safetensors") == "/ck/model.wwpgd.safetensors"
        assert projected_path("/ck/ckpt") == "/ck/ckpt.wwpgd"

    @pytest.mark.parametrize("ext", ["pt", "safetensors"])
    def test_project_writes_next_to_input_atomically(self, tmp_path, ext):
        """want=project writes <name>.wwpgd.<ext> (no temp files left), same keys, changed weights."""
        sd = _sd(1)
        src = tmp_path / f"c.{ext}"
        if ext == "pt":
            torch.save(sd, src)
        else:
            from safetensors.torch import save_file

            save_file(sd, str(src))
        out = worker.run_job({"path": str(src), "want": ["analyze", "project"],
                              "projection": {"beta": 1.0, "eta": 1.0, "erg": "preserve"}})
        assert out["outcome"] == "ok" and out["projected_path"] == str(tmp_path / f"c.wwpgd.{ext}")
        assert sorted(os.listdir(tmp_path)) == sorted([f"c.{ext}", f"c.wwpgd.{ext}"])
        new = load_state_dict(out["projected_path"])
        assert set(new) == set(sd) and torch.equal(new["fc.bias"], sd["fc.bias"])
        assert not torch.equal(new["fc.weight"], sd["fc.weight"])
        assert out["projection"]["fc"]["projected"] and len(out["layers"]) == 2


class TestEigenPaths:
    def test_cpu_and_torch_batched_paths_agree(self):
        """The numpy CPU path and the torch batched path (the one CUDA runs) give the same eigenvalues."""
        sd = {**_sd(2), "fc2.weight": torch.randn(80, 40), "half.weight": torch.randn(40, 30).half()}
        specs = select_layers(sd)
        cpu = fast.eigenvalues(specs, device="cpu")
        solve = fast._torch_solver("cpu")
        for spec in specs:
            (ev,) = solve([spec])
            np.testing.assert_allclose(ev, cpu[spec.name], rtol=1e-9, atol=1e-9 * ev.max())

    def test_two_stage_solver_matches_syevd(self, monkeypatch):
        """Big Grams go to LAPACK's two-stage dsyevd (ctypes into numpy's OpenBLAS): same eigenvalues."""
        if fast._two_stage_solver() is None:
            pytest.skip("no OpenBLAS with LAPACKE_dsyevd_2stage loaded")
        g = torch.Generator().manual_seed(5)
        sd = {"w.weight": torch.distributions.StudentT(3.0).sample((300, 200)), "v.weight": torch.randn(90, 260, generator=g)}
        specs = select_layers(sd)
        want = fast.eigenvalues(specs)
        monkeypatch.setattr(fast, "TWO_STAGE_MIN", 64)
        got = fast.eigenvalues(specs)
        for spec in specs:
            np.testing.assert_allclose(got[spec.name], want[spec.name], rtol=1e-9, atol=1e-12 * want[spec.name].max())

    def test_layer_threads_give_the_sequential_results(self):
        """threads=2 (layers in parallel, one BLAS thread each) returns the same layers in the same order."""
        sd = {**_sd(3), "a.weight": torch.randn(120, 60), "b.weight": torch.randn(30, 70), "c.weight": torch.randn(64, 64)}
        specs = select_layers(sd)
        seq = fast.analyze_layers(specs, device="cpu", threads=1)
        par = fast.analyze_layers(specs, device="cpu", threads=2)
        assert [r.name for r in par] == [r.name for r in seq] == [s.name for s in specs]
        for a, b in zip(seq, par):
            assert a.num_pl_spikes == b.num_pl_spikes and a.detX_num == b.detX_num, a.name
            assert a.alpha == pytest.approx(b.alpha, rel=1e-9) and a.lambda_max == pytest.approx(b.lambda_max, rel=1e-12)

    def test_eigenvalues_are_squared_singular_values(self):
        w = torch.randn(50, 20, dtype=torch.float64)
        (res,) = analyze({"w.weight": w})
        assert res.lambda_max == pytest.approx(float(torch.linalg.svdvals(w)[0] ** 2), rel=1e-12)


class TestSpectralWatch:
    def test_band_needs_two_checkpoints_and_resolves(self):
        """Out of band once: quiet; twice: active; back in band: inactive."""
        sd_bad = {"w.weight": torch.randn(200, 100, dtype=torch.float64)}
        layers_bad = analyze(sd_bad)
        watch = SpectralWatch(alpha_min=2.0, alpha_max=layers_bad[0].alpha - 0.5)
        assert not watch.update(1, layers_bad)[1].active
        summary, finding = watch.update(2, layers_bad)
        assert finding.active and finding.kind == "spectral" and summary.frac_outside == 1.0
        watch2 = SpectralWatch(alpha_min=1.0, alpha_max=50.0)
        assert not watch2.update(3, layers_bad)[1].active

    def test_snapshot_restore_round_trip(self):
        """A restored watch gives the same findings as one that never stopped."""
        import json

        sd = [{"w.weight": torch.randn(200, 100, dtype=torch.float64) * (1 + i)} for i in range(5)]
        layers = [analyze(x) for x in sd]
        a = SpectralWatch(alpha_min=2.0, alpha_max=3.0, trend_checkpoints=2, trend_min_rise=0.0)
        for i in range(2):
            a.update(i, layers[i])
        b = SpectralWatch(alpha_min=2.0, alpha_max=3.0, trend_checkpoints=2, trend_min_rise=0.0)
        b.restore(json.loads(json.dumps(a.snapshot())))
        assert b.last == a.last
        for i in range(2, 5):
            assert a.update(i, layers[i]) == b.update(i, layers[i])
