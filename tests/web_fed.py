"""A real wtwind fed by real emitters with six runs, for the run pages' tests (`fed`), and
the helpers those tests share: the curves it was fed, the JSON API, uploads."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers import Daemon, http_get, wait_for
from wtwin.emitters import connect

NAN_LOG = "llmc__HectorFCardenas_gpt2_124M_job11672255_nan.csv"
CLEAN_LOG = "mng__2024-10-09_SOAP_5bdc3988.csv"
ODD_NAME = "team/exp 1 (β)"
SECRET_DIR = "/srv/secret-team-dir"


def curve(t: int) -> float:
    return 2.0 + 8.0 * (t + 50) ** -0.45 + 0.02 * math.sin(t * 1.7)


def spiky(t: int) -> float:
    """A loss over more than a decade (7.2 -> 0.34), with benign one-step spikes."""
    base = 0.3 + 60.0 * (t + 10) ** -0.9 + 0.004 * math.sin(t * 1.3)
    return base * (1.6 if t in SPIKES else 1.0)


SPIKES = (900, 1500, 2100, 2600)


def api(d, path: str):
    status, body = http_get(d.url + path, timeout=5)
    return status, json.loads(body)


def quoted(run: str) -> str:
    return urllib.parse.quote(run, safe="")


def post(url: str, body: bytes, content_type: str, **headers) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def multipart(filename: str, content: bytes, preset: str = "") -> tuple[bytes, str]:
    b = uuid.uuid4().hex
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="preset"\r\n\r\n{preset}\r\n'.encode(),
             f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
             f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n",
             f"--{b}--\r\n".encode()]
    return b"".join(parts), f"multipart/form-data; boundary={b}"


def _checkpoint(path: Path) -> str | None:
    try:
        import torch
    except ImportError:
        return None
    g = torch.Generator().manual_seed(0)
    torch.save({"h.0.weight": torch.randn(128, 64, generator=g),
                "h.1.weight": torch.randn(64, 64, generator=g)}, path)
    return str(path)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """wtwind with six runs: healthy (LR, evals, a checkpoint, tokens), diverging to NaN, an
    odd name, a finished one (it leaves memory 2 s after it ends: history from the store),
    Emitters stay open so alerts keep firing."""
    tmp = tmp_path_factory.mktemp("web")
    with Daemon(tmpdir=str(tmp), extra_env={"WTWIND_JOBS__TIMEOUT_S": "120",
                                            "WTWIND_RUNS__ENDED_TTL_S": "2",
                                            "WTWIND_DETECTION__COOLDOWN_S": "0"}) as d:
        config = {"lr": 3e-4, "model": "gpt2-124M", "data_dir": SECRET_DIR, "api_key": "hunter2"}
        healthy = connect(d.tcp, run="healthy", config=config)
        diverging = connect(d.tcp, run="diverging")
        odd = connect(d.tcp, run=ODD_NAME)
        done = connect(d.tcp, run="finished")
        few = connect(d.tcp, run="hf-few")
        spike = connect(d.tcp, run="spiky", config={"lr": 3e-4, "model": "tiny-llama", "batch": 256,
                                                      "warmup_steps": 100, "schedule": "cosine"})
        for t in range(1, 3001):
            healthy.loss(t, curve(t), lr=3e-4 * (0.1 + 0.9 * (1 - t / 3000)), tokens=t * 131072)
            spike.loss(t, spiky(t), lr=3e-5 + 2.7e-4 * 0.5 * (1 + math.cos(math.pi * t / 3000)),
                       grad_norm=0.8 + 4.0 * (t + 10) ** -0.5 + (3.0 if t in SPIKES else 0.0),
                       tokens=t * 262144)
            if t % 250 == 0:
                healthy.eval(t, val_loss=curve(t) + 0.04)
            if t <= 2500:
                diverging.loss(t, curve(t) if t < 2400 else float("nan"))
            if t <= 50:
                odd.loss(t, curve(t))
            if t <= 100:                         # an LR x100 step at 60: kept once stored
                done.loss(t, curve(t), lr=3e-4 * (100 if t == 60 else 1), grad_norm=1.0 + t / 100)
            if t % 10 == 0 and t <= 230:         # an HF run with logging_steps=10: 23 points
                few.loss(t, curve(t), lr=5e-5, grad_norm=1.5 + 0.01 * t)
        done.close("completed")
        ckpt = _checkpoint(tmp / "step_3000.pt")
        if ckpt:
            healthy.checkpoint(3000, ckpt, want=("analyze",))
        want = {"healthy": 3000, "diverging": 2500, ODD_NAME: 50, "finished": 100, "hf-few": 230,
                "spiky": 3000}

        def caught_up():
            runs = {r["run"]: r for r in api(d, "/api/runs")[1]["runs"]}
            return all(runs.get(k, {}).get("step") == v for k, v in want.items()) and runs
        wait_for(caught_up, 60, 0.1, "every event processed")
        wait_for(lambda: not caught_up()["finished"]["live"], 30, 0.1, "the finished run to leave memory")
        d.emitters = {"healthy": healthy, "diverging": diverging, ODD_NAME: odd, "hf-few": few,
                      "spiky": spike}
        d.checkpoint = ckpt
        yield d
        for e in d.emitters.values():
            e.close(timeout=1)
