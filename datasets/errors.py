"""Typed errors of the dataset layer.

Every failure to find, fetch or read data raises one of these with a message that says what was
wrong and what to do about it (which file, which column, where to get the data).
"""

from __future__ import annotations


class DatasetError(Exception):
    """Base class of every dataset error."""


class UnknownDatasetError(DatasetError, KeyError):
    """A name that is neither a registered dataset nor an existing file."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class DataNotFoundError(DatasetError, FileNotFoundError):
    """The data are not available locally (no file given, nothing in the cache)."""


class DownloadError(DatasetError):
    """A download failed (network error, HTTP error, empty body)."""


class DataFormatError(DatasetError, ValueError):
    """A file does not have the expected layout or columns."""


class SplitError(DatasetError, ValueError):
    """A train/test split cannot be made (too few points, an empty training part)."""


__all__ = [
    "DatasetError",
    "UnknownDatasetError",
    "DataNotFoundError",
    "DownloadError",
    "DataFormatError",
    "SplitError",
]
