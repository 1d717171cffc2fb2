"""Writing the ``runs`` rows, so that one row SQLite cannot take never blocks the others.

``write_runs`` upserts a batch of run snapshots with one fast ``executemany``; only when
that fails on a value (``POISON``) does it write each row under a savepoint and report
the rows that failed, for the caller to quarantine (``daemon/quarantine.py``). The
common case costs what it did.
"""

from __future__ import annotations

import sqlite3
import time

from . import series_rows

UPSERT_RUN = """INSERT INTO runs(run, status, preset, config, first_seen, last_seen, step,
    snapshot, updated_at) VALUES (?,?,?,?,?,?,?,?,?)
    ON CONFLICT(run) DO UPDATE SET status=excluded.status, preset=excluded.preset,
    config=excluded.config, last_seen=excluded.last_seen, step=excluded.step,
    snapshot=excluded.snapshot, updated_at=excluded.updated_at"""


# a value in the row is at fault (binding, constraint), not the database: quarantine the run;
# anything else (read-only, disk full, I/O) fails the transaction and is retried later
POISON = (OverflowError, ValueError, TypeError, sqlite3.InterfaceError, sqlite3.IntegrityError,
          sqlite3.DataError)


def write_runs(conn, rows) -> dict[str, str]:
    """Upsert the rows, and append each row's history chunks (``codec.Row.chunks``);
    returns ``{run: error}`` for rows that could not be written."""
    now = time.time()
    params = [(*row, now) for row in rows]
    conn.execute("SAVEPOINT runs")
    try:
        conn.executemany(UPSERT_RUN, params)
        for row in rows:
            _history(conn, row)
        conn.execute("RELEASE runs")
        return {}
    except POISON:  # one row is poisoned: find it, write the others
        conn.execute("ROLLBACK TO runs")
        conn.execute("RELEASE runs")
    failed = {}
    for row, p in zip(rows, params):
        conn.execute("SAVEPOINT one")
        try:
            conn.execute(UPSERT_RUN, p)
            _history(conn, row)
        except POISON as exc:
            conn.execute("ROLLBACK TO one")
            failed[p[0]] = f"{type(exc).__name__}: {exc}"
        conn.execute("RELEASE one")
    return failed


def _history(conn, row) -> None:
    for chunk in getattr(row, "chunks", ()):
        series_rows.write(conn, row[0], chunk)
