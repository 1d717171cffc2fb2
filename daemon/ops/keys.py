"""``wtwind keys generate``: a CURVE key pair for the ROUTER socket (``zmq_auth.py``)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    ky = sub.add_parser("keys", help="CURVE keys: generate a key pair (public 0644, secret 0600)")
    ky.add_argument("action", choices=("generate",))
    ky.add_argument("--dir", default=".", help="where to write NAME.key and NAME.key_secret")
    ky.add_argument("--name", default="wtwind", help="file name stem")


def run(args) -> int:
    from ..zmq_auth import generate_keys

    try:
        public, secret = generate_keys(args.dir, args.name)
    except OSError as exc:
        print(f"wtwind keys: cannot write keys in {args.dir}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"public key file: {public}\nsecret key file: {secret} (mode 0600; keep it private)")
    return 0
