"""The table of registered datasets: name -> definition.

Kept apart from :mod:`datasets.registry` (which registers the built-in datasets and so imports
their loaders) so that a loader can look up its own definition without importing the registry:
the loaders import this module, the registry imports the loaders, and nothing imports back.
"""

from __future__ import annotations

from .errors import UnknownDatasetError
from .schema import DatasetDefinition

_REGISTRY: dict[str, DatasetDefinition] = {}


def register(defn: DatasetDefinition) -> DatasetDefinition:
    """Add a dataset (a later registration of the same name replaces the earlier one)."""
    _REGISTRY[defn.name] = defn
    return defn


def definition(name: str) -> DatasetDefinition:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownDatasetError(
            f"unknown dataset {name!r}; registered: {', '.join(sorted(_REGISTRY))} (or give a .csv/.parquet path)"
        ) from None


def registered(name: str) -> DatasetDefinition | None:
    """The definition of ``name``, or None when it is not registered."""
    return _REGISTRY.get(name)


def definitions() -> list[DatasetDefinition]:
    """Every registered definition, by name."""
    return sorted(_REGISTRY.values(), key=lambda d: d.name)
