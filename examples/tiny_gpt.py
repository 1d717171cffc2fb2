"""A tiny GPT trained on CPU in plain PyTorch, watched by wtwind with one line.

    wtwind &                                   # or: make demo, systemd, docker compose
    python examples/tiny_gpt.py                # a healthy run, ~10 s on one laptop CPU core
    python examples/tiny_gpt.py --blowup-at 200  # a schedule bug multiplies the LR by 1000
    python examples/tiny_gpt.py --with-daemon --blowup-at 300   # starts a private wtwind itself

The one line is ``wtwin.emitters.connect(run=..., on_alert=...)``; ``emit.loss(step,
loss, lr=lr, grad_norm=norm)`` in the loop. Alerts from the daemon come back on this thread at the next
``emit.loss``: here they save a checkpoint (warning and up) and stop training
(critical, or ``--stop-on warning``). The data are random token sequences following a
learnable rule (each token is the previous one plus a per-sequence stride), so the loss
falls like a real language model's. The loss is read with ``.item()`` only every
``--log-every`` steps (one device sync, nothing queued per step on a GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch
import torch.nn as nn
import torch.nn.functional as F

import wtwin.emitters
from wtwin.emitters.actions import SaveCheckpoint, StopTraining, chain


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 64, seq: int = 32, d: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def batch(gen: torch.Generator, n: int, seq: int, vocab: int) -> torch.Tensor:
    start = torch.randint(0, vocab, (n, 1), generator=gen)
    stride = torch.randint(1, 5, (n, 1), generator=gen)
    return (start + stride * torch.arange(seq + 1)) % vocab


def lr_at(step: int, args) -> float:
    warm = min(1.0, step / 50)
    cosine = 0.5 * (1 + math.cos(math.pi * min(step, args.steps) / args.steps))
    lr = args.lr * warm * (0.1 + 0.9 * cosine)
    return lr * 1000 if args.blowup_at and step >= args.blowup_at else lr


@contextlib.contextmanager
def private_daemon():
    """A wtwind child process on a private ipc socket, free HTTP port and temp state."""
    tmp = tempfile.mkdtemp(prefix="tiny-gpt-wtwind-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"ipc://{tmp}/wtwind.sock"
    env = dict(os.environ, WTWIND_LISTEN__ENDPOINTS=endpoint, WTWIND_HTTP__PORT=str(port),
               WTWIND_STATE__PATH=f"{tmp}/wtwind.db", WTWIND_LOG__FORMAT="console")
    with open(f"{tmp}/wtwind.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "wtwin.daemon.cli"], env=env, stderr=log,
                                stdout=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise SystemExit(f"wtwind did not start; see {tmp}/wtwind.log")
    print(f"wtwind up: {endpoint}, http://127.0.0.1:{port}/ (log {tmp}/wtwind.log)", flush=True)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tiny GPT on CPU, watched by wtwind")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--blowup-at", type=int, default=0, help="multiply the LR by 1000 from this step")
    p.add_argument("--run", default=None, help="run id (default: generated and printed)")
    p.add_argument("--endpoint", default=None, help="daemon endpoint (default: $WTWIN_ENDPOINT or the local wtwind socket)")
    p.add_argument("--stop-on", default="critical", choices=("info", "warning", "critical"))
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--out", default=None, help="where alert checkpoints go (default: a temp dir)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for a model this small)")
    p.add_argument("--with-daemon", action="store_true", help="start a private wtwind for this run")
    args = p.parse_args(argv)
    if args.with_daemon:
        with private_daemon() as endpoint:
            args.endpoint = endpoint
            return train(args)
    return train(args)


def train(args) -> int:
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    vocab, seq = 64, 32
    model = TinyGPT(vocab, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    out = args.out or tempfile.mkdtemp(prefix="tiny-gpt-")

    def save(alert: dict) -> str:
        path = os.path.join(out, f"alert-{alert['kind']}-step{alert['step']}.pt")
        torch.save({"model": model.state_dict(), "alert": alert}, path)
        print(f"saved {path}", flush=True)
        return path

    stop = StopTraining(min_severity=args.stop_on)
    log = lambda a: print(f"alert {a['status']} {a['kind']} ({a['severity']}) at step {a['step']}: "
                          f"{a.get('message', '')}", flush=True)
    # --- the one line ----------------------------------------------------------------
    emit = wtwin.emitters.connect(args.endpoint, run=args.run, preset="pretraining",
                                  config={"model": "tiny-gpt", "lr": args.lr, "batch": args.batch},
                                  on_alert=chain(log, SaveCheckpoint(save), stop))
    # ---------------------------------------------------------------------------------
    gen = torch.Generator().manual_seed(1)
    pending: list[tuple[int, torch.Tensor, torch.Tensor, float]] = []
    step = 0
    for step in range(1, args.steps + 1):
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        ids = batch(gen, args.batch, seq, vocab)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # before clipping
        opt.step()
        pending.append((step, loss.detach(), grad_norm.detach(), lr))
        if len(pending) >= args.log_every:
            values = torch.stack([x for p in pending for x in p[1:3]]).tolist()   # one sync
            for i, (s, _, _, r) in enumerate(pending):
                emit.loss(s, values[2 * i], lr=r, grad_norm=values[2 * i + 1])
            pending.clear()
        if step % 250 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e}", flush=True)
        if stop:
            print(f"stopped at step {step}: {stop.alert['kind']} alert", flush=True)
            break
    emit.close("stopped" if stop else "completed")
    print(f"done: {step} steps, emitter stats {emit.stats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
