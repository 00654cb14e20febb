"""Resumable, verified model downloads: the final file name only ever holds a complete, checked file.

Bytes go to `<file>.part`; an interrupted download resumes from it with an HTTP Range request (a server
that ignores Range is detected by its 200 and the file restarts from zero). The sha256 is computed while
writing, so a 554 MB file is read once. Only a file whose size and hash check out is renamed (atomically)
to its final name; a complete body with the wrong hash is deleted, a cut-off one is kept for resume.
A stalled server fails after `stall_timeout_s` without data; a failed attempt that may succeed again is
retried on the same URL after an exponential backoff (1 s, 2 s, 4 s ... up to `backoff_max_s`: a server
that just dropped us is not hit again at once), then every other URL of the spec is tried in turn.
"""

import asyncio
import hashlib
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import aiohttp

from models.errors import ModelDownloadError

logger = logging.getLogger(__name__)

PART_SUFFIX = ".part"
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)")


@dataclass(frozen=True)
class DownloadConfig:
    """Timeouts and retry policy. There is no total timeout: a large file on a slow link may take an hour."""

    connect_timeout_s: float = 20.0
    stall_timeout_s: float = 30.0  # no bytes for this long: give this attempt up
    attempts_per_url: int = 3  # an attempt cut off midway resumes in the next one
    chunk_bytes: int = 1 << 16
    backoff_s: float = 1.0  # wait before the 2nd attempt on a URL; doubled before each further one
    backoff_max_s: float = 30.0

    def backoff_before(self, attempt: int) -> float:
        """Seconds to wait before attempt `attempt` (2, 3, ...) on the same URL."""
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** (attempt - 2))


DEFAULT_DOWNLOAD_CONFIG = DownloadConfig()


@dataclass(frozen=True)
class DownloadResult:
    """A verified file now under its final name."""

    path: Path
    url: str
    sha256: str
    size_bytes: int
    resumed_from: int  # bytes reused from an earlier .part by the attempt that finished


class ProgressBar:
    """Progress on a stream (stderr): on a terminal a bar redrawn in place, else a plain line now and then.

    On a terminal: `label [##########----------]  50.0% 111/222 frames 29.8 frames/s, 4 s left`; elsewhere
    (a log file, a pipe, CI) the same numbers without the bar, one line per `interval_s`. No dependency: the
    project installs no progress library.

    :param interval_s: least time between redraws; default 0.5 s on a terminal, 5 s otherwise
    :param unit: what is counted ("MB" shows bytes in megabytes; "frames" counts items as they are)
    """

    BAR_WIDTH = 24

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        unit: str = "MB",
    ) -> None:
        self.label = label
        self.unit = unit
        self._scale = 1e6 if unit == "MB" else 1.0
        self._stream = stream if stream is not None else sys.stderr
        self._is_terminal = self._stream.isatty()
        self._interval_s = interval_s if interval_s is not None else (0.5 if self._is_terminal else 5.0)
        self._clock = clock
        self._started_at = clock()
        self._started_bytes = 0
        self._last_drawn_at: float | None = None
        self._drawn_width = 0  # of the bar last drawn in place, so a shorter one blanks its tail

    def begin(self, done: int) -> None:
        """Start measuring the rate from here (a resumed attempt starts with `done` bytes)."""
        self._started_at = self._clock()
        self._started_bytes = done

    def update(self, done: int, total: int | None) -> None:
        now = self._clock()
        if self._last_drawn_at is not None and now - self._last_drawn_at < self._interval_s:
            return
        self._last_drawn_at = now
        self._draw(done, total, now, final=False)

    def finish(self, done: int, total: int | None) -> None:
        self._draw(done, total, self._clock(), final=True)

    def _draw(self, done: int, total: int | None, now: float, *, final: bool) -> None:
        elapsed = max(now - self._started_at, 1e-6)
        rate = (done - self._started_bytes) / elapsed / self._scale
        digits = 1 if self._scale > 1 else 0
        shown = f"{done / self._scale:.{digits}f}"
        if not self._is_terminal:
            if total:
                text = f"{self.label}: {100.0 * done / total:5.1f}% {shown}/{total / self._scale:.{digits}f} {self.unit}"
            else:
                text = f"{self.label}: {shown} {self.unit}"
            self._stream.write(f"{text} {rate:.1f} {self.unit}/s\n")
            self._stream.flush()
            return
        if total:
            filled = min(self.BAR_WIDTH, round(self.BAR_WIDTH * done / total))
            bar = "#" * filled + "-" * (self.BAR_WIDTH - filled)
            text = f"{self.label} [{bar}] {100.0 * done / total:5.1f}% {shown}/{total / self._scale:.{digits}f} {self.unit}"
            if not final and rate > 0 and done < total:
                text += f" {rate:.1f} {self.unit}/s, {(total - done) / self._scale / rate:.0f} s left"
            else:
                text += f" {rate:.1f} {self.unit}/s"
        else:
            text = f"{self.label} {shown} {self.unit} {rate:.1f} {self.unit}/s"
        padding = " " * max(0, self._drawn_width - len(text))
        self._drawn_width = 0 if final else len(text)
        end = "\n" if final else ""
        self._stream.write(f"\r{text}{padding}{end}")
        self._stream.flush()


def part_path(destination: Path) -> Path:
    """Where the bytes of an unfinished download of `destination` are kept."""
    return destination.with_name(destination.name + PART_SUFFIX)


class _AttemptFailed(Exception):
    """One attempt failed. `try_again`: another attempt on the same URL may succeed (resume)."""

    def __init__(self, reason: str, *, try_again: bool) -> None:
        super().__init__(reason)
        self.try_again = try_again


@dataclass(frozen=True)
class _Body:
    sha256: str
    size_bytes: int
    resumed_from: int


def _hash_file(path: Path) -> "hashlib._Hash":
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest


def _parse_content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a Content-Range header; None where absent or `*`."""
    match = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    if match is None:
        return None, None
    first, total = match.groups()
    return (int(first) if first else None), (int(total) if total != "*" else None)


async def _fetch_body(
    session: aiohttp.ClientSession,
    url: str,
    part: Path,
    expected_size: int | None,
    config: DownloadConfig,
    progress: ProgressBar | None,
) -> _Body:
    """One HTTP attempt: append to (or restart) the .part; return the hash and size of the whole body."""
    offset = part.stat().st_size if part.exists() else 0
    if expected_size is not None and offset > expected_size:
        logger.info("%s is longer than the expected %d bytes; starting over", part.name, expected_size)
        part.unlink()
        offset = 0
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    async with session.get(url, headers=headers) as response:
        first, total = _parse_content_range(response.headers.get("Content-Range"))
        if response.status == 416 and offset:
            if total == offset:  # the .part already holds the whole file
                digest = await asyncio.to_thread(_hash_file, part)
                return _Body(digest.hexdigest(), offset, offset)
            part.unlink()
            raise _AttemptFailed(f"server refused resuming at byte {offset}; .part discarded", try_again=True)
        if response.status >= 400:
            raise _AttemptFailed(
                f"HTTP {response.status} {response.reason}", try_again=response.status >= 500
            )
        if response.status == 206 and offset and first == offset:
            digest = await asyncio.to_thread(_hash_file, part)
            mode = "ab"
            logger.info("resuming %s at byte %d", url, offset)
        elif response.status == 200:
            if offset:
                logger.info("%s ignored the Range request; restarting %s from zero", url, part.name)
            offset, total, digest, mode = 0, response.content_length, hashlib.sha256(), "wb"
        else:  # a 206 for a range we did not ask for: the .part cannot be trusted to line up
            part.unlink(missing_ok=True)
            raise _AttemptFailed(
                f"server answered the resume at byte {offset} with {first}; restarting", try_again=True
            )
        if expected_size is not None and total is not None and total != expected_size:
            raise _AttemptFailed(f"server offers {total} bytes, expected {expected_size}", try_again=False)
        done = offset
        if progress is not None:
            progress.begin(done)
        with part.open(mode) as output:
            try:
                async for chunk in response.content.iter_chunked(config.chunk_bytes):
                    output.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress.update(done, total)
            except aiohttp.ClientPayloadError as error:
                raise _AttemptFailed(
                    f"connection closed after {done} of {total} bytes ({error}); .part kept for resume",
                    try_again=True,
                ) from error
            finally:
                output.flush()
                os.fsync(output.fileno())
                if progress is not None:
                    progress.finish(done, total)
        if total is not None and done != total:
            raise _AttemptFailed(f"got {done} of {total} bytes; .part kept for resume", try_again=True)
        return _Body(digest.hexdigest(), done, offset)


def _mismatch(body: _Body, expected_sha256: str | None, expected_size: int | None) -> str:
    """Why a complete body is the wrong file, or '' when it is the right one."""
    if expected_size is not None and body.size_bytes != expected_size:
        return f"got {body.size_bytes} bytes, expected {expected_size}; download discarded"
    if expected_sha256 is not None and body.sha256 != expected_sha256:
        return f"sha256 {body.sha256}, expected {expected_sha256}; download discarded"
    return ""


def _describe_timeout(error: BaseException, config: DownloadConfig) -> str:
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return f"could not connect within {config.connect_timeout_s:g} s"
    return f"stalled: no data for {config.stall_timeout_s:g} s; .part kept for resume"


async def download_file(
    urls: Sequence[str],
    destination: Path,
    *,
    expected_sha256: str | None = None,
    expected_size: int | None = None,
    config: DownloadConfig = DEFAULT_DOWNLOAD_CONFIG,
    progress: ProgressBar | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> DownloadResult:
    """Download to `destination` via its .part, trying each URL in turn; ModelDownloadError if none works.

    With `expected_sha256=None` any complete body is accepted (the caller pins what arrived). `sleep`
    waits out the backoff between attempts (tests pass one that records instead of waiting).
    """
    if not urls:
        raise ModelDownloadError(f"no download URL for {destination.name}; copy the file to {destination}")
    destination.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(destination)
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=config.connect_timeout_s,
        sock_connect=config.connect_timeout_s,
        sock_read=config.stall_timeout_s,
    )
    failures: list[str] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            for attempt in range(1, config.attempts_per_url + 1):
                if attempt > 1:
                    await sleep(config.backoff_before(attempt))
                try:
                    body = await _fetch_body(session, url, part, expected_size, config, progress)
                except _AttemptFailed as error:
                    reason, try_again = str(error), error.try_again
                except TimeoutError as error:  # aiohttp's timeouts derive from it
                    reason, try_again = _describe_timeout(error, config), True
                except aiohttp.ClientError as error:
                    reason, try_again = f"{type(error).__name__}: {error}", True
                else:
                    reason = _mismatch(body, expected_sha256, expected_size)
                    if reason:
                        part.unlink()  # complete and proven wrong: nothing worth resuming
                        failures.append(f"{url}: {reason}")
                        logger.warning("download of %s from %s: %s", destination.name, url, reason)
                        break
                    os.replace(part, destination)
                    logger.info(
                        "downloaded %s from %s: %d bytes, sha256 %s",
                        destination.name,
                        url,
                        body.size_bytes,
                        body.sha256,
                    )
                    return DownloadResult(destination, url, body.sha256, body.size_bytes, body.resumed_from)
                failures.append(f"{url} (attempt {attempt}): {reason}")
                logger.warning(
                    "download of %s from %s, attempt %d: %s", destination.name, url, attempt, reason
                )
                if not try_again:
                    break
    kept = f" ({part.stat().st_size} bytes kept in {part.name}; run again to resume)" if part.exists() else ""
    raise ModelDownloadError(f"could not download {destination.name}: {'; '.join(failures)}{kept}")
