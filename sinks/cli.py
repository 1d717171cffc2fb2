"""``wtwind alerts dead|replay``: list or replay dead-lettered alerts of a running daemon.

Talks to the daemon's HTTP port (default http://127.0.0.1:9464), so it works with
any outbox implementation and never races the daemon for its store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import aiohttp


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wtwind alerts", description="dead-lettered alerts of a running wtwind")
    p.add_argument("action", choices=("dead", "replay"), help="list dead letters, or send them again")
    p.add_argument("--sink", help="only this sink")
    p.add_argument("--url", default="http://127.0.0.1:9464", help="wtwind's HTTP address")
    p.add_argument("--token-file", help="file holding the daemon's [http] token (for replay)")
    return p


async def _call(action: str, url: str, sink: str | None, token: str | None = None) -> tuple[int, dict]:
    params = {"sink": sink} if sink else {}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        method = s.get if action == "dead" else s.post
        async with method(f"{url.rstrip('/')}/api/alerts/{action}", params=params, headers=headers) as resp:
            return resp.status, await resp.json()


def main(argv: list[str] | None = None, token: str | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        token = open(args.token_file).read().strip() if args.token_file else token
        status, body = asyncio.run(_call(args.action, args.url, args.sink, token))
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        print(f"wtwind alerts: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"wtwind alerts: {body.get('error', status)}", file=sys.stderr)
        return 1
    if args.action == "replay":
        print(f"replayed {body['replayed']} dead alert(s)")
        return 0
    for row in body["dead"]:
        a = row["alert"]
        print(f"{row['id']}\t{row['sink']}\t{a['run']}\t{a['kind']}\t{a['status']}\tattempts={row['attempts']}"
              f"\t{row['last_error']}")
    if not body["dead"]:
        print("no dead alerts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
