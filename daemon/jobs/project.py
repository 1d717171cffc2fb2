"""Projection jobs: apply WW-PGD to a checkpoint and write ``<name>.wwpgd.<ext>``.

The projected checkpoint is written next to the input, to a temporary file in the
same directory, fsynced, then renamed over the target (atomic on POSIX), so a
trainer that sees ``projection_ready`` never reads a half-written file. Every name is
created and renamed through the descriptor of the folder the checkpoint was opened in
(``spectral/safe_open.py``), with no symlink followed: a folder swapped for a link while
the job ran cannot send the projection outside ``[jobs] checkpoint_roots``. A torch
checkpoint is written as the bare state_dict (optimizer state and other entries of
a wrapping dict are not carried over); a safetensors file stays safetensors.

A projection never overwrites a file it did not create (``want=["project"]`` on another
directory's ``model.pt`` must not replace that directory's ``model.wwpgd.pt``). Each file it
writes carries the extended attribute ``user.wtwin.projection``; an existing target
without it is left alone and the job fails with reason ``target_exists``. Where the
filesystem has no user xattrs, an existing target is never replaced. The new file gets
the checkpoint's permission bits and, when the daemon may (root), its owner and group.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import Any

from ..spectral.checkpoint import CheckpointError, infer_format
from ..spectral.layers import select_layers


def projected_path(path: str) -> str:
    """ckpt.pt -> ckpt.wwpgd.pt, model.safetensors -> model.wwpgd.safetensors."""
    head, tail = os.path.split(path)
    stem, dot, ext = tail.rpartition(".")
    name = f"{stem}.wwpgd.{ext}" if dot and stem else f"{tail}.wwpgd"
    return os.path.join(head, name)


def project_checkpoint(state_dict: dict[str, Any], path: str, fmt: str | None,
                       params: dict[str, Any], *, opened=None) -> tuple[str, dict[str, Any]]:
    """Project every selected layer of ``state_dict``; returns (written path, report).
    ``opened``: the ``safe_open.Opened`` it was read from (the daemon's jobs)."""
    from wtwin.emitters.projection import project_weight

    out = dict(state_dict)
    report: dict[str, Any] = {}
    for spec in select_layers(state_dict):
        new, info = project_weight(spec.tensor, spec.kind, q=params.get("q", 1.0), eta=params.get("eta", 0.5),
                                   beta=params.get("beta", 0.5), erg=params.get("erg", "preserve"))
        out[f"{spec.name}.weight"] = new.contiguous()
        report[spec.name] = {k: v for k, v in info.items() if k in ("projected", "alpha_before", "alpha_after")}
    target = projected_path(path)
    fmt = infer_format(path, fmt)
    if opened is not None:
        _atomic_save(out, opened.dir_fd, target, fmt, opened.st)
        return target, report
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        _atomic_save(out, dir_fd, target, fmt, os.stat(path))
    finally:
        os.close(dir_fd)
    return target, report


MARK = "user.wtwin.projection"
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def ours(target: str, dir_fd: int | None = None) -> bool:
    """Whether the file at ``target`` (its name in ``dir_fd``) is a projection this daemon wrote."""
    name = os.path.basename(target) if dir_fd is not None else target
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        return os.getxattr(fd, MARK) == b"1"
    except OSError:
        return False
    finally:
        os.close(fd)


def _place(tmp: str, target: str, dir_fd: int) -> None:
    """``tmp`` becomes ``target`` in ``dir_fd``: a new name, or over a projection of ours; never else."""
    name = os.path.basename(target)
    at = {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}
    try:
        os.link(tmp, name, follow_symlinks=False, **at)  # fails if anything exists there
        os.unlink(tmp, dir_fd=dir_fd)
        return
    except FileExistsError:
        pass
    except OSError as exc:  # a filesystem without hard links
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if not _exists(name, dir_fd):
            os.replace(tmp, name, **at)
            return
    if not ours(target, dir_fd):
        raise CheckpointError("target_exists", f"{target} exists and was not written by wtwind; "
                              "move it away to project this checkpoint")
    os.replace(tmp, name, **at)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _keep_access(fd: int, source: os.stat_result) -> None:
    os.fchmod(fd, stat.S_IMODE(source.st_mode) & 0o777)
    try:
        os.fchown(fd, source.st_uid, source.st_gid)
    except PermissionError:  # not root: the file stays the daemon user's
        pass
    try:
        os.setxattr(fd, MARK, b"1")
    except OSError as exc:  # no user xattrs here: this file will never be replaced
        if exc.errno not in (errno.ENOTSUP, errno.EPERM):
            raise


def _atomic_save(tensors: dict[str, Any], dir_fd: int, target: str, fmt: str, source: os.stat_result) -> None:
    tmp = f".wwpgd-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        _keep_access(fd, source)
        with os.fdopen(fd, "wb") as fh:
            if fmt == "safetensors":
                from safetensors.torch import save

                fh.write(save(tensors))
            else:
                import torch

                torch.save(tensors, fh)
            fh.flush()
            os.fsync(fh.fileno())
        _place(tmp, target, dir_fd)
    except BaseException:
        if _exists(tmp, dir_fd):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
