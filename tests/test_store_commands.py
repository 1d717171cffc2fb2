"""`wtwind state` and `wtwind alerts` on a store: what they read and write, and what they
refuse while a daemon owns it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from helpers import Daemon
from wtwin.daemon.run_state import RunState
from wtwin.daemon.store import codec
from wtwin.daemon.store.db import open_db
from wtwin.daemon.store.deliveries import SqliteOutbox
from wtwin.detect.alert import Alert


def cli(db, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", *args],
                          env=dict(os.environ, WTWIND_STATE__PATH=str(db)), capture_output=True,
                          text=True, timeout=60)


class TestOperatorCommands:
    @pytest.mark.slow  # 31 s on 2 busy cores (make test-all, CI)
    def test_state_and_alerts_commands_on_a_stopped_daemon_store(self, tmp_path):
        """ls/show read; forget, redeliver and purge write; each says what it did."""
        import json

        db = tmp_path / "s.db"
        alert = Alert(run="r1", kind="drift", severity="warning", status="firing", step=3, started_at=9.0)

        async def fill():
            box = SqliteOutbox(db)
            a, b = await box.put(alert, ["hook", "slack"], now=1.0)
            await box.record(a.id, state="dead", attempts=8, next_attempt_at=1.0, error="HTTP 500", now=2.0)
            await box.record(b.id, state="delivered", attempts=1, next_attempt_at=1.0, error="", now=2.0)
            await box.aclose()
            return a.id

        dead_id = asyncio.run(fill())
        run = RunState("r1", preset="pretraining", cooldown_s=0.0, now=1.0)
        run.observe({"type": "loss", "step": 3, "loss": 2.0}, 1.0)
        conn, lock = open_db(str(db))
        conn.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)", (*codec.encode(run), 1.0))
        conn.close()
        lock.release()
        assert "r1\trunning" in cli(db, "state", "ls").stdout
        assert json.loads(cli(db, "state", "show", "r1", "--json").stdout)["step"] == 3
        dead = json.loads(cli(db, "alerts", "dead", "--json").stdout)
        assert [(r["id"], r["sink"], r["last_error"]) for r in dead] == [(dead_id, "hook", "HTTP 500")]
        out = cli(db, "alerts", "redeliver", str(dead_id))
        assert out.returncode == 0 and "redelivered 1" in out.stdout
        assert json.loads(cli(db, "alerts", "dead", "--json").stdout) == []
        assert "purged 1" in cli(db, "alerts", "purge").stdout
        assert cli(db, "state", "forget", "r1").returncode == 0
        assert cli(db, "state", "show", "r1").returncode == 1

    @pytest.mark.slow  # 23 s on 2 busy cores (make test-all, CI)
    def test_writing_commands_refuse_while_a_daemon_owns_the_store(self, tmp_path):
        """forget needs the owner lock: a clear refusal, nothing changed."""
        db = tmp_path / "s.db"
        (tmp_path / "d").mkdir()
        with Daemon(extra_env={"WTWIND_STATE__PATH": str(db)}, tmpdir=str(tmp_path / "d")):
            out = cli(db, "state", "forget", "anything")
            assert out.returncode == 1 and "stop wtwind first" in out.stderr
            assert cli(db, "state", "ls").returncode == 0  # reading works meanwhile
