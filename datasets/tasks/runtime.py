"""Access to the NDVM runtime from the tasks (imported lazily: the data layer works without it)."""
from __future__ import annotations

from .errors import RuntimeUnavailableError


def require_ndvm():
    """The ``ndvm`` module, or a RuntimeUnavailableError saying what is missing."""
    try:
        import ndvm
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeUnavailableError(f"the NDVM runtime cannot be imported ({exc}); build it with `make build`") from exc
    missing = [name for name in ("compile", "calibrate") if not hasattr(ndvm, name)]
    if missing:
        raise RuntimeUnavailableError(f"the installed ndvm package lacks {missing}; build the runtime with `make build`")
    return ndvm


def ndvm_available() -> bool:
    try:
        require_ndvm()
        return True
    except RuntimeUnavailableError:
        return False
