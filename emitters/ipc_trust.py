"""Whether an ``ipc://`` endpoint can be trusted to be wtwind's before the emitter connects
(and sends its run's secret there).

Anyone who can create or replace the socket, or the folder it lives in, can receive a
trainer's events and secret and answer with forged acks and alerts (a critical alert can
stop training). So every folder from ``/`` down to the socket's must be owned by this user
or by root and be writable by nobody else, except a sticky folder such as ``/tmp``, where
others cannot remove or rename what they do not own. The socket's own folder may belong to
another user only when its parent is root's and closed to others: then only root made it
and handed it over (systemd's ``RuntimeDirectory=wtwind`` for a daemon running as
``wtwind``). The socket itself must belong to this user, root or the folder's owner.

The default folder ``/tmp/wtwind-<uid>`` is created here, 0700, when it is missing, so that
nobody else can take its name first.
"""

from __future__ import annotations

import os
import stat

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def ipc_path(endpoint: str) -> str | None:
    """The filesystem path of an ``ipc://`` endpoint, else None."""
    return endpoint[len("ipc://"):] if endpoint.startswith("ipc://") else None


def default_tmp_folder(uid: int | None = None) -> str:
    """The last-resort per-user folder when there is no ``/run/wtwind`` or runtime dir."""
    return f"/tmp/wtwind-{os.getuid() if uid is None else uid}"


def _prepare_default_folder(folder: str) -> None:
    """Create the per-user default folder 0700 if it is missing (never loosens one)."""
    try:
        os.mkdir(folder, 0o700)
    except OSError:
        pass  # it exists (judged below), or cannot be made: problem() says so in words


def problem(endpoint: str, uid: int | None = None) -> str | None:
    """Why ``endpoint`` cannot be trusted, in words, or None (tcp is not judged here)."""
    path = ipc_path(endpoint)
    if path is None or path.startswith("@"):  # tcp; or Linux's abstract namespace: no files
        return None
    uid = os.getuid() if uid is None else uid
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if folder == default_tmp_folder(uid):
        _prepare_default_folder(folder)
    chain = _ancestors(folder)
    for parent, child in zip([None, *chain], chain):
        why = _folder_problem(child, parent, uid, is_socket_folder=child == folder)
        if why:
            return why
        if not os.path.lexists(child):
            return None  # the rest is missing too, and only trusted users can create it
    return _socket_problem(path, folder, uid)


def _ancestors(folder: str) -> list[str]:
    """``/``, ``/a``, ``/a/b`` ... down to ``folder``."""
    parts = [p for p in folder.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def _folder_problem(folder: str, parent: str | None, uid: int, *, is_socket_folder: bool) -> str | None:
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        # zmq retries a missing path: whoever may create it there could answer later
        if parent and _others_may_write(parent):
            return (f"{folder} does not exist, and other users could create it in {parent} "
                    "and receive your run's events and secret")
        return None
    except OSError as exc:
        return f"cannot inspect {folder} ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(folder)
        if not is_socket_folder and st.st_uid in (uid, 0) and _ancestor_chain_ok(target, uid):
            return None  # a system link such as /var/run -> /run, into trusted folders
        return f"{folder} is a symbolic link"
    owner_ok = st.st_uid in (uid, 0)
    if not owner_ok and not (is_socket_folder and parent and _root_closed(parent)):
        return (f"{folder} belongs to uid {st.st_uid}, not to you (uid {uid}) or root: another user "
                "may have put it there to receive your run's events and secret")
    if st.st_mode & _OTHERS_WRITE and not (st.st_mode & stat.S_ISVTX and not is_socket_folder):
        return (f"{folder} is writable by other users (mode {st.st_mode & 0o7777:o}): they could "
                "replace wtwind's socket")
    return None


def _others_may_write(folder: str) -> bool:
    try:
        return bool(os.stat(folder).st_mode & _OTHERS_WRITE)
    except OSError:
        return True


def _ancestor_chain_ok(folder: str, uid: int) -> bool:
    chain = _ancestors(folder)
    return all(_folder_problem(c, p, uid, is_socket_folder=False) is None
               for p, c in zip([None, *chain], chain))


def _root_closed(folder: str) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return False
    return st.st_uid == 0 and not st.st_mode & _OTHERS_WRITE


def _socket_problem(path: str, folder: str, uid: int) -> str | None:
    try:
        st = os.lstat(path)
        owner = os.stat(folder).st_uid
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect {path} ({exc.strerror})"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if st.st_uid not in (uid, 0, owner):
        return f"{path} belongs to uid {st.st_uid}, not to you, root or the owner of {folder}"
    return None
