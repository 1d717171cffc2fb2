"""Load a checkpoint's tensors safely: torch ``state_dict`` files and safetensors.

torch files are read with ``weights_only=True`` (no pickled code runs) and mapped to
CPU; a file of the common ``{"model": state_dict, "optimizer": ...}`` shape is
unwrapped. Everything that can go wrong (missing, unreadable, over the size limit,
not a checkpoint, no tensors) raises ``CheckpointError`` with a message meant for an
operator: it becomes the job's failure, never a dead worker. Messages name the path and
the kind of failure but never quote the loader's own error text: the run page shows
them, and torch's text once leaked a file's first byte ("Unsupported operand 118").

Before any math, each tensor's claimed size (elements x element size) is checked
against the storage that backs it: a stride-0 ``expand()`` of a 1-element storage
would otherwise pass as a tensor of millions of elements (a worker bomb).
"""

from __future__ import annotations

from typing import Any

from .checkpoint_error import CheckpointError
from .safe_open import open_checkpoint

FORMATS = ("torch", "safetensors")
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "weights")


def infer_format(path: str, fmt: str | None = None) -> str:
    """A ``.safetensors`` file is safetensors whatever the event says (the emitter's
    ``format`` defaults to torch); otherwise the event's format, else torch."""
    if fmt is not None and fmt not in FORMATS:
        raise CheckpointError("bad_format", f"format must be one of {FORMATS}, got {fmt!r}")
    if path.endswith(".safetensors"):
        return "safetensors"
    return fmt or "torch"


def load_state_dict(path: str, fmt: str | None = None, *, max_bytes: int | None = None,
                    roots: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Name -> tensor (CPU torch tensors) of the checkpoint at ``path``.

    ``roots`` (resolved ``[jobs] checkpoint_roots``): checked again, and the file opened
    from its root with no symlink followed (``safe_open.py``)."""
    with open_checkpoint(path, roots) as ck:
        return load_opened(ck, fmt, max_bytes=max_bytes)


def load_opened(ck, fmt: str | None = None, *, max_bytes: int | None = None) -> dict[str, Any]:
    """The tensors of an open checkpoint (``safe_open.Opened``), read through its descriptor."""
    fmt = infer_format(ck.path, fmt)
    if max_bytes is not None and ck.st.st_size > max_bytes:
        raise CheckpointError("too_large", f"{ck.path} is {ck.st.st_size} bytes, limit is {max_bytes}")
    tensors = (_load_safetensors(ck.read_path, ck.path) if fmt == "safetensors"
               else _load_torch(ck.read_path, ck.path))
    if not tensors:
        raise CheckpointError("no_tensors", f"{ck.path} holds no tensors")
    check_sizes(tensors, ck.path, max_bytes)
    return tensors


def check_sizes(tensors: dict[str, Any], path: str, max_bytes: int | None) -> None:
    """Every tensor's claimed bytes fit in its storage; all of them in ``max_bytes``."""
    total = 0
    for name, t in tensors.items():
        claimed = t.numel() * t.element_size()
        storage = t.untyped_storage().nbytes()
        if claimed > storage - t.storage_offset() * t.element_size():
            raise CheckpointError("bad_tensor", f"{path}: tensor {name[:100]!r} claims {claimed} bytes "
                                  f"over a storage of {storage} (an expanded or strided view)")
        total += claimed
    if max_bytes is not None and total > max_bytes:
        raise CheckpointError("too_large", f"{path}: tensors claim {total} bytes, limit is {max_bytes}")


def _load_safetensors(path: str, name: str) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError("not_a_checkpoint",
                              f"{name} is not a readable safetensors file ({type(exc).__name__})") from None


def _load_torch(path: str, name: str) -> dict[str, Any]:
    import pickle

    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=_is_zip(path))
    except pickle.UnpicklingError:
        raise CheckpointError("unsafe", f"{name} needs code to unpickle (weights_only refused it)") from None
    except Exception as exc:  # torch.load on arbitrary bytes raises anything (IndexError, KeyError...)
        raise CheckpointError("not_a_checkpoint",
                              f"{name} is not a torch checkpoint ({type(exc).__name__})") from None
    return _tensors(obj, torch, name)


def _tensors(obj: Any, torch: Any, path: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise CheckpointError("not_a_state_dict", f"{path} holds a {type(obj).__name__}, not a state_dict")
    flat = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    if flat:
        return flat
    for key in _WRAPPER_KEYS:
        inner = obj.get(key)
        if isinstance(inner, dict):
            found = {k: v for k, v in inner.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
            if found:
                return found
    return {}


def _is_zip(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PK\x03\x04"
