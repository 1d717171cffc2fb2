"""The CUDA paths on a real GPU: the fast spectral engine and WW-PGD's projection.

Skipped where torch sees no GPU (CI machines and the development VM have none); on a GPU
machine `python -m pytest tests/test_cuda.py` runs them (docs/SPECTRAL.md, "CUDA").
Each test compares the CUDA result with the CPU result of the same code on the same
weights, and where weightwatcher is installed, with weightwatcher itself.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

from wtwin.daemon.spectral import analyze, fast  # noqa: E402
from wtwin.daemon.spectral.layers import select_layers  # noqa: E402
from wtwin.emitters.projection import project_weight  # noqa: E402
from wtwin.emitters.wwpgd import WWPGD  # noqa: E402
from test_wwpgd import fit  # noqa: E402


def _student_t(shape, df, seed):
    torch.manual_seed(seed)
    return torch.distributions.StudentT(df).sample(shape).float()


def _state_dict():
    """Heavy-tailed dense layers of several shapes (two of one shape: one batched call),
    Conv2d kernels (the kernel-position slices) and a layer too small to fit well."""
    sd = {}
    for i, (shape, df) in enumerate([((768, 768), 2.5), ((768, 768), 3.0), ((3072, 768), 2.0),
                                     ((768, 3072), 4.0), ((400, 100), 1.5), ((1000, 40), 6.0)]):
        sd[f"d{i}.weight"] = _student_t(shape, df, seed=i)
    sd["conv.weight"] = _student_t((64, 32, 3, 3), 2.5, seed=10)
    sd["conv_wide.weight"] = _student_t((8, 24, 2, 2), 3.0, seed=11)
    sd["small.weight"] = _student_t((30, 12), 3.0, seed=12)
    return sd


def _assert_same(gpu, cpu, alpha_tol=1e-6):
    """Layer by layer: the same selection, tail and alpha (the eigensolvers differ in the
    last bits, which the power-law fit does not see)."""
    assert [r.name for r in gpu] == [r.name for r in cpu]
    for a, b in zip(gpu, cpu):
        assert a.status == b.status == "ok", a.name
        assert a.num_evals == b.num_evals and a.num_pl_spikes == b.num_pl_spikes, a.name
        assert a.alpha == pytest.approx(b.alpha, abs=alpha_tol), a.name
        assert a.xmin == pytest.approx(b.xmin, rel=1e-9), a.name
        assert a.lambda_max == pytest.approx(b.lambda_max, rel=1e-9), a.name
        assert a.stable_rank == pytest.approx(b.stable_rank, rel=1e-9), a.name


class TestFastEngineOnCuda:
    def test_auto_resolves_to_cuda(self):
        assert fast.resolve_device("auto") == "cuda"

    def test_eigenvalues_match_cpu(self):
        """Batched bmm + eigvalsh on the GPU against numpy SYRK + LAPACK syevd on the CPU."""
        specs = select_layers(_state_dict())
        gpu, cpu = fast.eigenvalues(specs, device="cuda"), fast.eigenvalues(specs, device="cpu")
        assert gpu.keys() == cpu.keys()
        for name in cpu:
            g, c = gpu[name], cpu[name]
            assert g.shape == c.shape, name
            top = float(c[-1])
            assert abs(g - c).max() <= 1e-10 * top, (name, float(abs(g - c).max()), top)

    def test_metrics_match_cpu(self):
        sd = _state_dict()
        _assert_same(analyze(sd, device="cuda"), analyze(sd, device="cpu"))

    def test_stored_dtype_goes_to_the_device_and_is_upcast_there(self):
        """bf16 and fp16 weights: moved in their own dtype, analysed in float64 on the GPU,
        the same numbers as the CPU path's upcast."""
        for dtype in (torch.bfloat16, torch.float16):
            sd = {k: v.to(dtype) for k, v in _state_dict().items()}
            _assert_same(analyze(sd, device="cuda"), analyze(sd, device="cpu"))

    def test_chunks_split_by_batch_bytes(self, monkeypatch):
        """Layers of one shape split over several batched calls give what one call gives."""
        sd = {f"l{i}.weight": _student_t((512, 256), 2.0 + 0.5 * i, seed=20 + i) for i in range(6)}
        whole = analyze(sd, device="cuda")
        monkeypatch.setattr(fast, "BATCH_BYTES", 2 * 512 * 256 * 8)   # two layers per call
        _assert_same(analyze(sd, device="cuda"), whole, alpha_tol=0.0)

    def test_matches_weightwatcher(self):
        pytest.importorskip("weightwatcher")
        sd = _state_dict()
        gpu, ref = analyze(sd, device="cuda"), analyze(sd, engine="weightwatcher")
        assert [r.name for r in gpu] == [r.name for r in ref]
        for a, b in zip(gpu, ref):
            assert a.num_evals == b.num_evals and a.num_pl_spikes == b.num_pl_spikes, a.name
            if b.alpha <= 6:
                assert abs(a.alpha - b.alpha) <= 1e-3, (a.name, a.alpha, b.alpha)


class TestWWPGDOnCuda:
    @pytest.mark.parametrize("kind,shape", [("dense", (512, 256)), ("conv2d", (64, 32, 3, 3))])
    def test_projection_matches_cpu(self, kind, shape):
        w = _student_t(shape, 2.5, seed=30)
        new_cpu, info_cpu = project_weight(w, kind, beta=0.5, erg="preserve")
        new_gpu, info_gpu = project_weight(w.cuda(), kind, beta=0.5, erg="preserve")
        assert info_cpu["projected"] and info_gpu["projected"]
        assert new_gpu.device.type == "cuda" and new_gpu.dtype == w.dtype
        assert info_gpu["num_pl_spikes"] == info_cpu["num_pl_spikes"]
        assert info_gpu["alpha_before"] == pytest.approx(info_cpu["alpha_before"], abs=1e-9)
        assert info_gpu["alpha_after"] == pytest.approx(info_cpu["alpha_after"], abs=1e-6)
        assert torch.allclose(new_gpu.cpu(), new_cpu, rtol=1e-5, atol=1e-6)

    def test_optimizer_trains_and_projects_a_cuda_model(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 10)).cuda()
        opt = WWPGD(model, torch.optim.AdamW(model.parameters(), lr=1e-3), warmup=0.0, ramp=0.0)
        x = torch.randn(1024, 256, device="cuda")
        y = torch.randint(0, 10, (1024,), device="cuda")
        losses = fit(model, opt, x, y, 50)
        report = opt.project(5, 10)
        assert losses[-1] < losses[0]
        assert report and all(p.device.type == "cuda" for p in model.parameters())
        assert all(torch.isfinite(p).all() for p in model.parameters())
