"""`run_stream.py models list|verify|fetch|pin`: the user's view of the model directory.

Tables and verdicts are the commands' output and go to stdout; progress goes to stderr, diagnostics to
the log. Failures raise (run_stream.py turns them into exit codes), except `verify`, whose job is to
report every file and exit 1 if any failed.
"""

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from gpu_ops.errors import InvalidInputError
from models.downloader import (
    DEFAULT_DOWNLOAD_CONFIG,
    DownloadConfig,
    DownloadResult,
    ProgressBar,
    download_file,
)
from models.errors import ModelDownloadError
from models.model_files import FileCheck, ModelStore, read_pin, resolve_models_dir, sidecar_path, write_pin

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
_LICENCE_WIDTH = 48


def _format_size(size_bytes: int | None) -> str:
    if size_bytes is None:
        return "?"
    return f"{size_bytes / 1e6:.1f} MB" if size_bytes >= 1e5 else f"{size_bytes / 1e3:.0f} KB"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _write_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    out.writelines(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n" for row in rows
    )


def list_models(store: ModelStore, out: TextIO) -> int:
    """Table of every registry model, the state of its file (present files are verified) and where it was
    found: the models directory, the bundled folder (models/bundled/) or nowhere ("-")."""
    rows = [("name", "role", "file", "size", "commercial", "licence", "status", "found in")]
    for name in store.names():
        spec = store.spec(name)
        verdict = store.check(name)
        status = "ok (pinned)" if verdict.ok and verdict.pinned else verdict.state
        rows.append(
            (
                name,
                spec.role,
                spec.file_name,
                _format_size(spec.size_bytes),
                "yes" if spec.commercial_use else "no",
                _shorten(spec.licence, _LICENCE_WIDTH),
                status,
                store.location(name),
            )
        )
    out.write(f"models directory: {store.models_dir}\n")
    if store.bundled_dir is not None:
        out.write(f"bundled models:   {store.bundled_dir} (used when the models directory lacks them)\n")
    _write_table(rows, out)
    return EXIT_OK


def _write_verdict(verdict: FileCheck, out: TextIO) -> None:
    out.write(f"{'OK' if verdict.ok else 'FAIL':4}  {verdict.name}: {verdict.detail}\n")


def verify_models(store: ModelStore, names: Sequence[str], out: TextIO) -> int:
    """OK/FAIL per file (default: every present file); EXIT_FAILED if any failed."""
    chosen = list(names) or [name for name in store.names() if store.file_path(name).is_file()]
    if not chosen:
        out.write(f"no model files in {store.models_dir}\n")
        return EXIT_OK
    verdicts = [store.check(name) for name in chosen]
    for verdict in verdicts:
        _write_verdict(verdict, out)
    return EXIT_OK if all(verdict.ok for verdict in verdicts) else EXIT_FAILED


def fetch_model(
    store: ModelStore,
    name: str,
    *,
    url: str | None = None,
    config: DownloadConfig = DEFAULT_DOWNLOAD_CONFIG,
    progress_stream: TextIO | None = None,
) -> DownloadResult | None:
    """Download one model unless a verified copy is present (then None); pin hash-less models.

    A hash-less model is verified against an existing pin when there is one, else pinned to what
    arrived (trust on first use: the pin guards against later corruption or substitution).
    """
    spec = store.spec(name)
    verdict = store.check(name)
    if verdict.ok:
        logger.info("%s already present and verified: %s", name, verdict.path)
        return None
    destination = store.file_path(name)
    existing_pin = read_pin(destination) if spec.sha256 is None else None
    expected_sha256 = spec.sha256 if spec.sha256 is not None else existing_pin
    urls = [url] if url else list(spec.urls)
    progress = ProgressBar(spec.file_name, progress_stream if progress_stream is not None else sys.stderr)
    download = download_file(
        urls,
        destination,
        expected_sha256=expected_sha256,
        expected_size=spec.size_bytes,
        config=config,
        progress=progress,
    )
    try:
        result = asyncio.run(download)
    except ModelDownloadError as error:
        if existing_pin is None:
            raise
        raise ModelDownloadError(
            f"{error} (checked against the pin in {sidecar_path(destination).name}: delete it to accept "
            "a different upstream file)"
        ) from error
    if spec.sha256 is None and existing_pin is None:
        sidecar = write_pin(destination, result.sha256)
        logger.info(
            "%s has no registered sha256: pinned it to %s in %s on first download; later loads must match",
            name,
            result.sha256,
            sidecar,
        )
    return result


def pin_model(store: ModelStore, name: str, out: TextIO) -> int:
    """Write the sidecar for a hash-less model the user copied in."""
    sidecar = store.pin(name)
    out.write(f"pinned {name}: {sidecar}\n")
    return EXIT_OK


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Dispatch `models <list|verify|fetch|pin>`."""
    output = out if out is not None else sys.stdout
    command = args.models_command
    # fetch creates the directory it downloads into; every other command reads an existing one
    store = ModelStore(resolve_models_dir(getattr(args, "models_dir", None), must_exist=command != "fetch"))
    if command == "list":
        return list_models(store, output)
    if command == "verify":
        return verify_models(store, args.names, output)
    if command == "pin":
        for name in args.names:
            pin_model(store, name, output)
        return EXIT_OK
    if command == "fetch":
        url = getattr(args, "url", None)
        if url and len(args.names) != 1:
            raise InvalidInputError("--url names one file: fetch one model at a time with it")
        stall_timeout_s = getattr(args, "stall_timeout", None)
        config = (
            DownloadConfig(stall_timeout_s=stall_timeout_s) if stall_timeout_s else DEFAULT_DOWNLOAD_CONFIG
        )
        for name in args.names:
            result = fetch_model(store, name, url=url, config=config)
            where = result.path if result is not None else store.file_path(name)
            output.write(f"{name}: {where} ok\n")
        return EXIT_OK
    raise InvalidInputError(f"unknown models command {command!r}")
