"""Download-once cache for public data files.

Files are fetched with the standard library (``urllib``) into ``~/.cache/ndvm`` or the folder
named by ``NDVM_CACHE_DIR``, written to a temporary name first and renamed only when complete, so
an interrupted download never leaves a truncated file that a later run would trust.
"""
from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .errors import DataNotFoundError, DownloadError

CACHE_ENV = "NDVM_CACHE_DIR"
OFFLINE_ENV = "NDVM_OFFLINE"  # set to 1 to forbid downloads (the cache and local files still work)
USER_AGENT = "ndvm-discovery (dataset loader; https://github.com)"


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``override``, else ``$NDVM_CACHE_DIR``, else ``~/.cache/ndvm``."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ndvm"


def cached_path(filename: str, *, subdir: str = "", cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / subdir / filename


def fetch(
    url: str,
    filename: str,
    *,
    subdir: str = "",
    cache: str | os.PathLike | None = None,
    refresh: bool = False,
    timeout: float = 30.0,
) -> Path:
    """Return the cached copy of ``url``, downloading it first when absent (or when ``refresh``)."""
    target = cached_path(filename, subdir=subdir, cache=cache)
    if target.is_file() and target.stat().st_size > 0 and not refresh:
        return target
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0", "false", "False"):
        raise DataNotFoundError(
            f"{filename} is not in the cache ({target}) and downloads are disabled ({OFFLINE_ENV} is set); "
            f"download {url} yourself and pass its path, or put it at {target}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise DownloadError(
            f"download of {url} failed ({exc}); with no network, download the file elsewhere and pass "
            f"its path (or place it at {target})"
        ) from exc
    if not body:
        raise DownloadError(f"download of {url} returned an empty body")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{filename}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
