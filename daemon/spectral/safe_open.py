"""Open a checkpoint so that a symlink swapped in while the job waited cannot redirect it.

The path is resolved and checked against the roots (``roots.py``), then opened one folder
at a time from the root's own descriptor, each step with ``O_NOFOLLOW``: if any folder on
the way, or the file, has become a symbolic link since the check, the open fails
(``swapped``) instead of reading, or later writing a projection, outside the roots. The
checkpoint is then read through ``/proc/self/fd`` (the very file opened), and a projection
is written beside it through the folder's descriptor (``jobs/project.py``).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from .checkpoint_error import CheckpointError
from .roots import refusal, root_of

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass
class Opened:
    """An open checkpoint: its descriptor, its folder's, its stat and a path that reads it."""

    path: str
    fd: int
    dir_fd: int
    st: os.stat_result

    @property
    def read_path(self) -> str:
        """A name for the open file itself (loaders that want a path)."""
        return f"/proc/self/fd/{self.fd}" if os.path.isdir("/proc/self/fd") else self.path

    def close(self) -> None:
        for fd in (self.fd, self.dir_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "Opened":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_checkpoint(path: str, roots: tuple[str, ...] | None) -> Opened:
    """Open ``path`` for reading: from its root with no symlink followed on the way (or,
    without roots, from its own folder). Raises CheckpointError in words."""
    if roots is not None:
        refused = refusal(path, tuple(roots))
        if refused is not None:
            raise CheckpointError("outside_roots", refused)
        real = os.path.realpath(path)
        base = root_of(path, tuple(roots))
        parts = [p for p in os.path.relpath(real, base).split(os.sep) if p not in ("", ".")]
    else:
        base, parts = os.path.dirname(os.path.abspath(path)), [os.path.basename(path)]
    return open_under(base, parts, path)


def open_under(base: str, parts: list[str], path: str) -> Opened:
    """Open ``base/parts...`` one name at a time, following no symlink below ``base``."""
    if not parts:
        raise CheckpointError("not_a_file", f"{path} is not a regular file")
    dir_fd = _open(base, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0), path)
    try:
        for part in parts[:-1]:
            nxt = _open(part, _DIR, path, dir_fd)
            os.close(dir_fd)
            dir_fd = nxt
        fd = _open(parts[-1], _FILE, path, dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        os.close(dir_fd)
        raise CheckpointError("not_a_file", f"{path} is not a regular file")
    return Opened(path, fd, dir_fd, st)


def _open(name: str, flags: int, path: str, dir_fd: int | None = None) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise CheckpointError("missing", f"{path} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(name, dir_fd):
            raise CheckpointError("swapped", f"{path}: a folder on its way, or the file, became a "
                                  "symbolic link after it was checked; not opened") from None
        if exc.errno == errno.ENOTDIR:
            raise CheckpointError("missing", f"{path}: a folder on its way is not a folder") from None
        raise CheckpointError("unreadable", f"{path}: {exc.strerror}") from None


def _is_link(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
