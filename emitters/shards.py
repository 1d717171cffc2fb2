"""Which of several wtwind daemons ("shards") a run goes to: rendezvous hashing.

Each shard is a full ``wtwind`` with its own store; nothing is shared between them and
nothing coordinates them. What makes them one service is that every trainer picks the
same shard for the same run name, from the same endpoint list:

    WTWIN_ENDPOINT="tcp://wtwind-0.wtwind:5557,tcp://wtwind-1.wtwind:5557"

The list is separated by commas and/or whitespace (neither occurs in a ``tcp://``
endpoint; an ``ipc://`` path that holds one cannot be listed). A single endpoint is a
list of one: no hashing, as before.

The pick is rendezvous (highest-random-weight) hashing: each endpoint gets the weight
``blake2b(endpoint + "\\n" + run)`` (8 bytes, big-endian), and the run goes to the
endpoint with the highest weight. It is a fixed function of the two strings: the same in
every process, every Python version and every machine (never Python's ``hash``, which is
salted per process). The order of the list does not matter. Adding an endpoint moves
only the runs that now weigh most on it (about 1/(N+1) of them), all to the new one;
removing one moves only its own runs, spread over the rest (docs/SHARDING.md). The
weight hashes the endpoint's *text*: every trainer must write the list the same way
(``wtwind-0.wtwind`` and ``wtwind-0.wtwind.ns.svc.cluster.local`` are two shards to it),
so keep it in one place, the environment of the jobs.

The pick is made once, when the emitter is built: ``emit.loss()`` never sees the list.

    python -m wtwin.emitters shard RUN [ENDPOINTS]   # which shard holds RUN
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from typing import Iterable

_SEPARATORS = re.compile(r"[,\s]+")


def parse(endpoints: str | Iterable[str]) -> tuple[str, ...]:
    """The endpoints named by a comma/whitespace separated string or a list of strings
    (each of which may itself hold several), in order, duplicates removed."""
    items = [endpoints] if isinstance(endpoints, str) else list(endpoints)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"an endpoint must be a string, not {type(item).__name__}: {item!r}")
        for ep in _SEPARATORS.split(item.strip()):
            if ep and ep not in out:
                out.append(ep)
    if not out:
        raise ValueError("no wtwind endpoint given (an empty endpoint list)")
    return tuple(out)


def weight(endpoint: str, run: str) -> int:
    """The run's weight on one endpoint: a fixed 64-bit hash of both names."""
    digest = hashlib.blake2b(f"{endpoint}\n{run}".encode("utf-8", "surrogatepass"),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick(run: str, endpoints: tuple[str, ...] | list[str]) -> str:
    """The endpoint that ``run`` goes to: the one where it weighs most (a tie, which needs
    a 64-bit collision, goes to the greater endpoint text, so the answer is still fixed)."""
    if len(endpoints) == 1:
        return endpoints[0]
    return max(endpoints, key=lambda ep: (weight(ep, run), ep))


USAGE = ("usage: python -m wtwin.emitters shard RUN [ENDPOINTS]\n"
         "prints the endpoint RUN goes to (ENDPOINTS: default $WTWIN_ENDPOINT)")


def main(argv: list[str]) -> int:
    """``shard RUN [ENDPOINTS]`` (``emitters/__main__.py``)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(argv) < 2 or argv[0] != "shard":
        print(USAGE, file=sys.stderr)
        return 2
    args = argv[1:]
    listed = " ".join(args[1:]) or os.environ.get("WTWIN_ENDPOINT", "")
    try:
        print(pick(args[0], parse(listed)))
    except ValueError as exc:
        print(f"wtwin: {exc}; pass the list or set WTWIN_ENDPOINT", file=sys.stderr)
        return 2
    return 0
