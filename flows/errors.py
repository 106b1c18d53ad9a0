"""The pipeline's own error: a discovery run that cannot start or continue."""

from __future__ import annotations


class DiscoveryError(RuntimeError):
    """A discovery run that cannot start or continue (bad configuration, unknown run to resume)."""


__all__ = ["DiscoveryError"]
