"""The downloader against a real aiohttp file server on 127.0.0.1 (random port), misbehaving on request.

Each scenario checks the one promise that matters: the final name holds the verified file or nothing.
"""

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from aiohttp import web

import run_stream
from models.downloader import DownloadConfig, ProgressBar, download_file, part_path
from models.errors import ModelDownloadError
from models.model_files import read_pin, write_pin
from models.registry import MODELS, ModelSpec, TensorSpec

PAYLOAD = bytes(range(256)) * 1024  # 256 KiB
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
HALF = len(PAYLOAD) // 2
QUICK = DownloadConfig(connect_timeout_s=2.0, stall_timeout_s=2.0, attempts_per_url=1, chunk_bytes=8192)

Behaviour = Literal["good", "truncate", "truncate_once", "ignore_range", "stall"]


@dataclass
class FileServer:
    """Serves PAYLOAD at /model.onnx as told by `behaviour`; records each request's Range header."""

    base_url: str = ""
    behaviour: Behaviour = "good"
    range_headers: list[str | None] = field(default_factory=list)
    release_stalled: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        requested = request.headers.get("Range")
        self.range_headers.append(requested)
        start, status, headers = 0, 200, {}
        match = re.fullmatch(r"bytes=(\d+)-", requested or "")
        if match and self.behaviour != "ignore_range":
            start = int(match.group(1))
            if start >= len(PAYLOAD):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(PAYLOAD)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}"
        body = PAYLOAD[start:]
        headers["Content-Length"] = str(len(body))
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        if self.behaviour in ("truncate", "truncate_once"):
            if self.behaviour == "truncate_once":
                self.behaviour = "good"
            await response.write(body[: HALF - start])
            assert request.transport is not None
            request.transport.close()  # the connection drops mid-body
            return response
        if self.behaviour == "stall":
            await response.write(body[:1000])
            await self.release_stalled.wait()  # until teardown; the client gives up first
            return response
        await response.write(body)
        await response.write_eof()
        return response


@pytest.fixture
async def server() -> AsyncIterator[FileServer]:
    file_server = FileServer()
    app = web.Application()
    app.router.add_get("/model.onnx", file_server.handle)
    app.router.add_get("/wrong.onnx", _serve_wrong_file)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    file_server.base_url = f"http://127.0.0.1:{port}"
    try:
        yield file_server
    finally:
        file_server.release_stalled.set()
        await runner.cleanup()


async def _serve_wrong_file(request: web.Request) -> web.Response:
    return web.Response(body=b"w" * len(PAYLOAD))


async def test_good_file(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    result = await download_file(
        [f"{server.base_url}/model.onnx"],
        destination,
        expected_sha256=PAYLOAD_SHA256,
        expected_size=len(PAYLOAD),
        config=QUICK,
    )
    assert destination.read_bytes() == PAYLOAD
    assert (result.sha256, result.size_bytes, result.resumed_from) == (PAYLOAD_SHA256, len(PAYLOAD), 0)
    assert not part_path(destination).exists()
    assert server.range_headers == [None]


async def test_truncated_download_leaves_part_then_resumes(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    url = f"{server.base_url}/model.onnx"
    server.behaviour = "truncate"
    with pytest.raises(ModelDownloadError, match="run again to resume"):
        await download_file([url], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK)
    assert not destination.exists()
    assert part_path(destination).read_bytes() == PAYLOAD[:HALF]

    server.behaviour = "good"
    result = await download_file([url], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK)
    assert server.range_headers[-1] == f"bytes={HALF}-"
    assert result.resumed_from == HALF
    assert destination.read_bytes() == PAYLOAD
    assert not part_path(destination).exists()


class RecordedSleep:
    """Stands in for asyncio.sleep: records each backoff and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def test_cut_off_attempt_resumes_in_the_next_attempt(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    server.behaviour = "truncate_once"
    config = DownloadConfig(stall_timeout_s=2.0, attempts_per_url=2)
    sleep = RecordedSleep()
    result = await download_file(
        [f"{server.base_url}/model.onnx"],
        destination,
        expected_sha256=PAYLOAD_SHA256,
        config=config,
        sleep=sleep,
    )
    assert server.range_headers == [None, f"bytes={HALF}-"]
    assert result.resumed_from == HALF
    assert destination.read_bytes() == PAYLOAD
    assert sleep.waits == [1.0]  # backed off once before the resume


async def test_retries_back_off_exponentially_up_to_the_cap_and_not_between_urls(
    server: FileServer, tmp_path: Path
) -> None:
    destination = tmp_path / "model.onnx"
    config = DownloadConfig(stall_timeout_s=2.0, attempts_per_url=5, backoff_s=0.5, backoff_max_s=3.0)
    sleep = RecordedSleep()
    with pytest.raises(ModelDownloadError, match="attempt 5"):
        await download_file(
            ["http://127.0.0.1:9/model.onnx", f"{server.base_url}/missing.onnx"],
            destination,
            config=config,
            sleep=sleep,
        )
    # refused 5 times on the first URL (4 waits); the 404 of the second is final: tried once, no wait
    assert sleep.waits == [0.5, 1.0, 2.0, 3.0]


async def test_range_resume_of_an_existing_part(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    part_path(destination).write_bytes(PAYLOAD[:1000])
    result = await download_file(
        [f"{server.base_url}/model.onnx"], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK
    )
    assert server.range_headers == ["bytes=1000-"]
    assert result.resumed_from == 1000
    assert destination.read_bytes() == PAYLOAD


async def test_complete_part_is_only_verified(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    part_path(destination).write_bytes(PAYLOAD)
    result = await download_file(
        [f"{server.base_url}/model.onnx"], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK
    )
    assert result.resumed_from == len(PAYLOAD)
    assert destination.read_bytes() == PAYLOAD


async def test_server_ignoring_range_restarts_from_zero(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    part_path(destination).write_bytes(b"garbage that must not end up in the file")
    server.behaviour = "ignore_range"
    result = await download_file(
        [f"{server.base_url}/model.onnx"], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK
    )
    assert server.range_headers == ["bytes=40-"]
    assert result.resumed_from == 0
    assert destination.read_bytes() == PAYLOAD


async def test_wrong_hash_leaves_no_file(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    with pytest.raises(ModelDownloadError) as caught:
        await download_file(
            [f"{server.base_url}/wrong.onnx"], destination, expected_sha256=PAYLOAD_SHA256, config=QUICK
        )
    assert f"expected {PAYLOAD_SHA256}" in str(caught.value)
    assert hashlib.sha256(b"w" * len(PAYLOAD)).hexdigest() in str(caught.value)
    assert not destination.exists()
    assert not part_path(destination).exists()  # proven wrong: not kept for resume


async def test_wrong_size_announced_by_server_is_refused(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    with pytest.raises(ModelDownloadError, match=f"expected {len(PAYLOAD) + 1}"):
        await download_file(
            [f"{server.base_url}/model.onnx"], destination, expected_size=len(PAYLOAD) + 1, config=QUICK
        )
    assert not destination.exists()


async def test_not_found_is_a_clear_error(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    with pytest.raises(ModelDownloadError, match="HTTP 404 Not Found"):
        await download_file([f"{server.base_url}/missing.onnx"], destination, config=QUICK)
    assert not destination.exists()


async def test_next_url_is_tried_after_a_failure(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    urls = [
        f"{server.base_url}/missing.onnx",
        f"{server.base_url}/wrong.onnx",
        f"{server.base_url}/model.onnx",
    ]
    result = await download_file(urls, destination, expected_sha256=PAYLOAD_SHA256, config=QUICK)
    assert result.url == urls[2]
    assert destination.read_bytes() == PAYLOAD


async def test_stalled_server_times_out(server: FileServer, tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    server.behaviour = "stall"
    config = DownloadConfig(stall_timeout_s=0.3, attempts_per_url=1)
    with pytest.raises(ModelDownloadError, match=r"stalled: no data for 0\.3 s"):
        await download_file([f"{server.base_url}/model.onnx"], destination, config=config)
    assert not destination.exists()
    assert part_path(destination).read_bytes() == PAYLOAD[:1000]


async def test_refused_connection_is_reported(tmp_path: Path) -> None:
    destination = tmp_path / "model.onnx"
    with pytest.raises(ModelDownloadError, match="127.0.0.1:9/model.onnx"):
        await download_file(["http://127.0.0.1:9/model.onnx"], destination, config=QUICK)
    assert not destination.exists()


async def test_progress_is_drawn_on_the_stream(server: FileServer, tmp_path: Path) -> None:
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    progress = ProgressBar("model.onnx", Stream(), interval_s=3600.0)  # type: ignore[arg-type]
    await download_file(
        [f"{server.base_url}/model.onnx"], tmp_path / "model.onnx", config=QUICK, progress=progress
    )
    # one throttled line at the start, one final line: never one per chunk
    assert len(lines) == 2
    assert lines[-1].startswith("model.onnx: 100.0% 0.3/0.3 MB")
    assert lines[-1].endswith("\n")


# --- the `models fetch` command end to end -----------------------------------------------------------


def _spec(name: str, sha256: str | None) -> ModelSpec:
    return ModelSpec(
        name=name,
        role="detector",
        file_name=f"{name}.onnx",
        sha256=sha256,
        size_bytes=len(PAYLOAD) if sha256 else None,
        licence="test",
        description="served by the test server",
        inputs=(TensorSpec("input", (None, 3, None, None)),),
        outputs=(TensorSpec("output", (None, 1)),),
        urls=("http://127.0.0.1:9/unused.onnx",),
    )


async def test_fetch_command_pins_a_hashless_model(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(MODELS, "served_model", _spec("served_model", None))
    argv = [
        "models",
        "fetch",
        "served_model",
        "--url",
        f"{server.base_url}/model.onnx",
        "--models-dir",
        str(tmp_path),
    ]
    assert await asyncio.to_thread(run_stream.main, argv) == 0
    assert (tmp_path / "served_model.onnx").read_bytes() == PAYLOAD
    assert read_pin(tmp_path / "served_model.onnx") == PAYLOAD_SHA256
    verify = ["models", "verify", "served_model", "--models-dir", str(tmp_path)]
    assert await asyncio.to_thread(run_stream.main, verify) == 0


async def test_fetch_command_fails_on_wrong_hash(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(MODELS, "served_model", _spec("served_model", "0" * 64))
    argv = [
        "models",
        "fetch",
        "served_model",
        "--url",
        f"{server.base_url}/model.onnx",
        "--models-dir",
        str(tmp_path),
    ]
    assert await asyncio.to_thread(run_stream.main, argv) == 1
    assert "error: could not download served_model.onnx" in capsys.readouterr().err
    assert not (tmp_path / "served_model.onnx").exists()


async def test_fetch_command_checks_an_existing_pin(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(MODELS, "served_model", _spec("served_model", None))
    write_pin(tmp_path / "served_model.onnx", "1" * 64)
    argv = [
        "models",
        "fetch",
        "served_model",
        "--url",
        f"{server.base_url}/model.onnx",
        "--models-dir",
        str(tmp_path),
    ]
    assert await asyncio.to_thread(run_stream.main, argv) == 1
    error = capsys.readouterr().err
    assert f"expected {'1' * 64}" in error
    assert "the pin in served_model.onnx.sha256: delete it" in error
    assert not (tmp_path / "served_model.onnx").exists()
