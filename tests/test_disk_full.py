"""A page survives a full disk (issue 24): a real wtwind whose store sits on a small
tmpfs that is filled up; the critical raised meanwhile waits in memory and reaches a
real webhook once space is back. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import Daemon, wait_for
from wtwin.emitters import connect
from http_recorder import ThreadedRecorder


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk) -> None:
    with open(disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def nonfinite_pages(hook: ThreadedRecorder, run: str) -> list:
    return [a for r in hook.requests("/hook") for a in r.json()["alerts"]
            if a["labels"]["run"] == run and a["labels"]["kind"] == "nonfinite"]


def test_a_critical_raised_on_a_full_disk_is_delivered_once_space_returns(tmp_path, small_disk):
    hook = ThreadedRecorder()
    cfg = tmp_path / "wtwind.toml"
    cfg.write_text(f'[[sinks]]\ntype = "webhook"\nname = "hook"\nurl = "{hook.rec.url}"\n'
                   '[delivery.retry]\nbase_s = 0.05\ncap_s = 0.5\n')
    try:
        with Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path),
                    extra_env={"WTWIND_STATE__PATH": str(small_disk / "wtwind.db")}) as d:
            em = connect(d.tcp, run="full", heartbeat_s=3600, secret_dir=tmp_path)
            em.loss(1, 2.0)
            assert em.flush(20)
            fill(small_disk)
            em.loss(2, float("nan"))
            wait_for(lambda: d.metrics().get(("wtwind_alerts_held", ()), 0) >= 1, 60, 0.1, "the page held")
            assert not nonfinite_pages(hook, "full")  # not delivered while the disk is full
            (small_disk / "filler").unlink()
            wait_for(lambda: nonfinite_pages(hook, "full"), 90, 0.1, "the held page at the webhook")
            m = d.metrics()
            assert m[("wtwind_alerts_recovered_total", ())] >= 1
            assert m[("wtwind_alerts_dropped_total", ())] == 0
            assert m[("wtwind_alerts_held", ())] == 0
            assert "alert_lost" not in d.log()
            em.close()
    finally:
        hook.close()
