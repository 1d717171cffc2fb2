"""torch-facing wrappers, imported lazily: ``from wtwin.emitters.torch import WWPGD``.

Importing this module does not import torch; each name is resolved on first access
from the module that defines it (module ``__getattr__``, PEP 562). Other optimizer
wrappers and callbacks register here the same way: add a line to ``_LAZY``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "WWPGD": "wtwin.emitters.wwpgd",
    "project_weight": "wtwin.emitters.projection",
    "WTwinAdamW": "wtwin.emitters.optim",
    "WTwinSGD": "wtwin.emitters.optim",
    "WTwinLion": "wtwin.emitters.optim",
    "Lion": "wtwin.emitters.optim",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
