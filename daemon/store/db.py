"""Opening the SQLite database: ownership lock, integrity, schema version, migrations.

Every failure at open is a ``ConfigError`` that names the file and what to do, and
nothing is written before the checks pass: a locked, corrupt, newer or unwritable
database is left exactly as it was. One daemon owns a database at a time (an
exclusive ``flock`` on ``<path>.lock``); the CLI reads it freely while the daemon
runs and takes the lock only for commands that write.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

from ..errors import ConfigError

SCHEMA_VERSION = 3

# index i migrates user_version i -> i + 1; never edit a shipped entry, append one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        run TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        preset TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '{}',
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        step INTEGER,
        snapshot BLOB,
        updated_at REAL NOT NULL
    );
    CREATE INDEX runs_last_seen ON runs(last_seen);
    CREATE TABLE alerts (
        key TEXT PRIMARY KEY,
        run TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        severity TEXT NOT NULL,
        step INTEGER NOT NULL,
        body TEXT NOT NULL,
        created_at REAL NOT NULL,
        routed INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX alerts_run ON alerts(run);
    CREATE INDEX alerts_unrouted ON alerts(routed) WHERE routed = 0;
    CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL,
        sink TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_error TEXT NOT NULL DEFAULT '',
        UNIQUE (sink, key)
    );
    CREATE INDEX deliveries_state ON deliveries(state, sink, id);
    """,
    # 2: an alert is committed with its outbox rows: nothing is left unrouted
    """
    DROP INDEX alerts_unrouted;
    ALTER TABLE alerts DROP COLUMN routed;
    """,
    # 3: a run's whole history as min/max buckets, kept with the run (series_rows.py)
    """
    CREATE TABLE series (
        id INTEGER PRIMARY KEY,
        run TEXT NOT NULL,
        kind TEXT NOT NULL,
        lo REAL NOT NULL,
        n INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    CREATE INDEX series_run ON series(run, kind, lo);
    """,
)


def connect(path: str, *, busy_timeout_s: float = 2.0, readonly: bool = False) -> sqlite3.Connection:
    """A connection in WAL mode, autocommit (transactions are explicit)."""
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}?mode=rwc"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise ConfigError(f"state.path: cannot open {path}: {exc}") from None
    return conn


class Lock:
    """An exclusive, non-blocking ``flock`` on ``<db>.lock``: one daemon per database."""

    def __init__(self, db_path: str) -> None:
        self.path = db_path + ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"state.path: cannot create lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"state.path: {self.path[:-5]} is locked by another process "
                              "(is another wtwind running on it?)") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def prepare_dir(path: str) -> None:
    parent = Path(path).resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(f"state.path: cannot create directory {parent}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"state.path: {path} is not writable by this user")


def check_and_migrate(conn: sqlite3.Connection, path: str) -> int:
    """Integrity check, refuse newer schemas, then migrate in one transaction."""
    try:
        ok = conn.execute("PRAGMA quick_check").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"state.path: {path} is not a readable wtwind database ({exc}); "
                          "move it aside to start with empty state") from None
    if ok != "ok":
        raise ConfigError(f"state.path: {path} is corrupt (integrity check: {ok}); "
                          "move it aside or restore a backup")
    if version > SCHEMA_VERSION:
        raise ConfigError(f"state.path: {path} has schema version {version}, written by a newer "
                          f"wtwind; this one understands up to {SCHEMA_VERSION}. Upgrade wtwind.")
    if version == SCHEMA_VERSION:
        return version
    try:
        conn.execute("BEGIN IMMEDIATE")
        for i in range(version, SCHEMA_VERSION):
            for stmt in MIGRATIONS[i].split(";"):
                if stmt.strip():
                    conn.execute(stmt)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise _classify(exc, path) from None
    return SCHEMA_VERSION


def _classify(exc: sqlite3.Error, path: str) -> ConfigError:
    msg = str(exc)
    if "locked" in msg or "busy" in msg:
        return ConfigError(f"state.path: {path} is locked by another process ({msg})")
    if "full" in msg:
        return ConfigError(f"state.path: {path}: disk full ({msg})")
    if "disk I/O error" in msg:
        return ConfigError(f"state.path: {path}: disk I/O error (disk full, over quota or failing?)")
    if "readonly" in msg or "read-only" in msg:
        return ConfigError(f"state.path: {path} is read-only ({msg})")
    return ConfigError(f"state.path: {path}: {msg}")


def open_db(path: str, *, busy_timeout_s: float = 2.0, lock: bool = True) -> tuple[sqlite3.Connection, Lock | None]:
    """Open for the daemon (or a writing CLI command): lock, check, migrate, WAL."""
    prepare_dir(path)
    owner = Lock(path) if lock else None
    if owner is not None:
        owner.acquire()
    try:
        conn = connect(path, busy_timeout_s=busy_timeout_s)
        check_and_migrate(conn, path)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.Error as exc:
            raise _classify(exc, path) from None
        if mode != "wal":
            raise ConfigError(f"state.path: {path}: cannot switch to WAL mode (got {mode})")
        conn.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        if owner is not None:
            owner.release()
        raise
    return conn, owner


def open_readonly(path: str) -> sqlite3.Connection:
    if not Path(path).exists():
        raise ConfigError(f"state.path: {path} does not exist (has wtwind run with this config?)")
    conn = connect(path, readonly=True)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise ConfigError(f"state.path: {path} has schema version {version}, newer than {SCHEMA_VERSION}")
    return conn
