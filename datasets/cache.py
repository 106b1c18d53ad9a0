"""Download-once cache for public data files: resumable, checksummed, never trusting a partial file.

Files are fetched with the standard library (``urllib``) into ``~/.cache/ndvm`` or the folder
named by ``NDVM_CACHE_DIR``:

- The body streams into ``.NAME.part`` beside the target and is renamed to ``NAME`` only when it
  is complete, so no later run ever reads a truncated file as if it were whole.
- A download that stops early (a connection dropped, fewer bytes than the server announced)
  raises :class:`DownloadError` naming the bytes received; the ``.part`` file is kept and the next
  fetch asks the server for the rest with an HTTP ``Range`` request (large originals, such as the
  3 GB Severson batch files, survive a flaky network).
- Every cached file has a SHA-256 sidecar ``NAME.sha256`` (``sha256sum -c`` format), written when
  the file is complete and checked whenever the cache answers: a file changed or damaged after its
  download is fetched again (or, offline, reported). When the caller knows the published digest
  or size, the download is checked against it too.
- A progress bar (rich) is drawn on an interactive terminal; ``progress=`` takes a callback instead.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .errors import DataNotFoundError, DownloadError

CACHE_ENV = "NDVM_CACHE_DIR"
OFFLINE_ENV = "NDVM_OFFLINE"  # set to 1 to forbid downloads (the cache and local files still work)
USER_AGENT = "ndvm-discovery (dataset loader; https://github.com)"
CHUNK = 1 << 20

Progress = Callable[[int, "int | None"], None]  # (bytes so far, total or None)


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``override``, else ``$NDVM_CACHE_DIR``, else ``~/.cache/ndvm``."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ndvm"


def cached_path(filename: str, *, subdir: str = "", cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / subdir / filename


def checksum_path(target: Path) -> Path:
    """The SHA-256 sidecar of a cached file."""
    return target.with_name(target.name + ".sha256")


def partial_path(target: Path) -> Path:
    """Where an unfinished download of ``target`` is kept until it is complete."""
    return target.with_name(f".{target.name}.part")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_checksum(target: Path) -> str | None:
    """The digest in ``target``'s sidecar, or None when it has none."""
    side = checksum_path(target)
    if not side.is_file():
        return None
    text = side.read_text().split()
    return text[0].lower() if text else None


def _write_checksum(target: Path, digest: str) -> None:
    tmp = checksum_path(target).with_suffix(".sha256.tmp")
    tmp.write_text(f"{digest}  {target.name}\n")
    os.replace(tmp, checksum_path(target))


def verify_cached(target: Path, sha256: str | None = None) -> str | None:
    """None when ``target`` matches its sidecar (and ``sha256`` when given), else what is wrong.

    A file without a sidecar (placed there by hand, or cached by an older version) is accepted and
    its digest recorded, unless it contradicts a given ``sha256``.
    """
    actual = sha256_file(target)
    if sha256 and actual != sha256.lower():
        return f"its SHA-256 is {actual}, the published one is {sha256.lower()}"
    recorded = recorded_checksum(target)
    if recorded is None:
        _write_checksum(target, actual)
        return None
    if recorded != actual:
        return f"its SHA-256 is {actual}, but {recorded} was recorded when it was downloaded"
    return None


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0", "false", "False")


def fetch(
    url: str,
    filename: str,
    *,
    subdir: str = "",
    cache: str | os.PathLike | None = None,
    refresh: bool = False,
    timeout: float = 30.0,
    sha256: str | None = None,
    size: int | None = None,
    progress: bool | Progress | None = None,
) -> Path:
    """Return the cached copy of ``url``, downloading it first when absent (or when ``refresh``).

    ``sha256`` / ``size``: the published digest / byte count, checked when known. ``progress``:
    None draws a bar on an interactive terminal, False nothing, a callable gets (done, total).
    Raises :class:`DownloadError` (network, HTTP, truncated or mismatching body) or
    :class:`DataNotFoundError` (not cached and downloads disabled by ``$NDVM_OFFLINE``).
    """
    target = cached_path(filename, subdir=subdir, cache=cache)
    part = partial_path(target)
    if refresh:
        part.unlink(missing_ok=True)  # a refresh starts over, never resumes an old partial file
    elif target.is_file() and target.stat().st_size > 0:
        problem = verify_cached(target, sha256)
        if problem is None:
            return target
        if _offline():
            raise DownloadError(
                f"the cached {target} is damaged ({problem}) and downloads are disabled "
                f"({OFFLINE_ENV} is set); delete it or fetch it again with the network"
            )
        print(f"ndvm: cached {target} is damaged ({problem}); downloading it again", file=sys.stderr)
        part.unlink(missing_ok=True)
    if _offline():
        raise DataNotFoundError(
            f"{filename} is not in the cache ({target}) and downloads are disabled ({OFFLINE_ENV} is set); "
            f"download {url} yourself and pass its path, or put it at {target}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _download(url, target, part, timeout=timeout, sha256=sha256, size=size, progress=progress)
    return target


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def _download(
    url: str,
    target: Path,
    part: Path,
    *,
    timeout: float,
    sha256: str | None,
    size: int | None,
    progress: bool | Progress | None,
) -> None:
    offset = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # the partial file does not fit the server's file: start over
            part.unlink(missing_ok=True)
            return _download(url, target, part, timeout=timeout, sha256=sha256, size=size, progress=progress)
        raise DownloadError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise DownloadError(
            f"download of {url} failed ({exc}); with no network, download the file elsewhere and pass "
            f"its path (or place it at {target})"
        ) from exc
    with response:
        total: int | None = None
        if response.status == 206 and offset:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:
                raise DownloadError(
                    f"download of {url}: the server answered the resume request from byte "
                    f"{offset} with Content-Range {response.headers.get('Content-Range')!r}"
                )
            total = int(match.group(3)) if match.group(3) != "*" else None
            mode = "ab"
        else:  # 200: the whole body (a server without Range support, or a fresh download)
            offset, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if total is None and size is not None:
            total = size
        done = offset
        report = _progress_reporter(progress, target.name, total)
        try:
            with open(part, mode) as handle:
                report(done)
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    handle.write(block)
                    done += len(block)
                    report(done)
        except (http.client.IncompleteRead, OSError, TimeoutError) as exc:
            raise DownloadError(_truncated(url, done, total, part, f"the connection broke: {exc}")) from exc
        finally:
            report(None)
    if done == 0:
        part.unlink(missing_ok=True)
        raise DownloadError(f"download of {url} returned an empty body")
    if total is not None and done < total:
        raise DownloadError(_truncated(url, done, total, part, "the server closed the connection early"))
    if size is not None and done != size:
        part.unlink(missing_ok=True)
        raise DownloadError(f"download of {url} has {done:,} bytes, the published file has {size:,}")
    digest = sha256_file(part)
    if sha256 and digest != sha256.lower():
        part.unlink(missing_ok=True)
        raise DownloadError(f"download of {url} has SHA-256 {digest}, the published one is {sha256.lower()}")
    os.replace(part, target)
    _write_checksum(target, digest)


def _truncated(url: str, done: int, total: int | None, part: Path, why: str) -> str:
    of = f" of {total:,}" if total is not None else ""
    return (
        f"download of {url} is truncated: {done:,}{of} bytes received ({why}). The partial file is kept "
        f"at {part}; fetching again resumes from there"
    )


def _progress_reporter(progress: bool | Progress | None, name: str, total: int | None) -> Callable[[int | None], None]:
    """A function taking bytes done (None: finished) that updates the chosen progress display."""
    if callable(progress):
        return lambda done: None if done is None else progress(done, total)
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return lambda done: None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        "[bold]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    task = bar.add_task(name, total=total)
    bar.start()

    def report(done: int | None) -> None:
        if done is None:
            bar.stop()
        else:
            bar.update(task, completed=done)

    return report
