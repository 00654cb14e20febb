"""Hostile input against the running daemon: every case answers 4xx with a clear JSON message, and
afterwards /health answers and a normal session still swaps. Settings are validated by the real
pipeline's rules (`settings_with`); frames go through the fake pipeline (no models needed)."""

import json
import struct
import zlib
from pathlib import Path

import aiohttp
import cv2
import numpy as np

from bench.clients.peer_client import PeerClient
from streamer.pipeline.frame_pipeline import wants_swap
from streamer.pipeline.pipeline_settings import SwapSettings, settings_with
from streamer.realtime.pipeline_binding import PipelineBinding
from tests.fakes_pipeline import FakeFrameJob, FakePipeline, face_box, source_colour
from tests.integration.daemon_harness import LOOPBACK, camera_frame, decoded_photo, running_daemon
from web.daemon_config import DaemonConfig

MAX_UPLOAD_BYTES = 2 * 1024 * 1024
OFFER_HEAD = "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"


def _binding() -> PipelineBinding:
    return PipelineBinding(
        pipeline=FakePipeline(),
        make_job=FakeFrameJob,
        default_settings=SwapSettings(),
        update_settings=settings_with,
        wants_swap=wants_swap,
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _decompression_bomb() -> bytes:
    """A valid little PNG declaring 60000 x 60000 pixels (10 GB decoded): refused from its header."""
    header = struct.pack(">IIBBBBB", 60_000, 60_000, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + 3 * 60_000) * 4, 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", rows)
        + _png_chunk(b"IEND", b"")
    )


def _multipart(name: str, data: bytes, field: str = "image") -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field(field, data, filename=name, content_type="image/jpeg")
    return form


def _offer_cases(real_offer: str) -> list[tuple[str, int, dict[str, object]]]:
    half = real_offer[: len(real_offer) // 2]
    sdp = {"Content-Type": "application/sdp"}
    return [
        ("garbage SDP", 400, {"data": b"\x00\xffnot an sdp at all", "headers": sdp}),
        ("truncated SDP", 400, {"data": half.encode(), "headers": sdp}),
        ("truncated SDP in JSON", 400, {"json": {"type": "offer", "sdp": half}}),
        ("SDP with 10k lines", 400, {"data": (OFFER_HEAD + "a=x\r\n" * 10_000).encode(), "headers": sdp}),
        (
            "SDP with 10k long lines",
            413,
            {"data": (OFFER_HEAD + "a=" + "x" * 60 + "\r\n") * 10_000, "headers": sdp},
        ),
        ("huge JSON", 413, {"data": json.dumps({"type": "offer", "sdp": "x" * 3_000_000})}),
        (
            "malformed JSON",
            400,
            {"data": b'{"type": "offer", "sdp": ', "headers": {"Content-Type": "application/json"}},
        ),
        ("nested JSON bomb", 400, {"data": b"[" * 50_000, "headers": {"Content-Type": "application/json"}}),
        ("JSON array", 400, {"json": ["offer"]}),
        ("answer instead of offer", 400, {"json": {"type": "answer", "sdp": real_offer}}),
        ("SDP as a number", 400, {"json": {"type": "offer", "sdp": 12}}),
        ("non-UTF-8 SDP", 400, {"data": b"v=0\r\n\xff\xfe\xfd", "headers": sdp}),
    ]


async def _expect_clear_4xx(response: aiohttp.ClientResponse, case: str, status: int | None = None) -> None:
    assert 400 <= response.status < 500, (case, response.status, await response.text())
    assert status is None or response.status == status, (case, response.status, await response.text())
    assert response.content_type == "application/json", (case, await response.text())
    message = (await response.json())["error"]
    assert isinstance(message, str) and len(message) >= 8, (case, message)


async def test_hostile_inputs_get_clear_4xx_and_the_daemon_keeps_working(media_dir: Path) -> None:
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=3.0, max_upload_bytes=MAX_UPLOAD_BYTES)
    frame = camera_frame(media_dir)
    jpeg = (media_dir / "fr_biden2.jpg").read_bytes()
    ok, png = cv2.imencode(".png", np.full((64, 64, 3), 128, np.uint8))
    assert ok
    async with (
        running_daemon(_binding(), config) as (url, engine),
        PeerClient(url, frame) as victim,
        aiohttp.ClientSession() as http,
    ):
        real_offer = await _fresh_offer()
        for case, status, request in _offer_cases(real_offer):
            async with http.post(f"{url}/api/sessions", **request) as response:  # type: ignore[arg-type]
                await _expect_clear_4xx(response, case, status)

        settings_url = f"{url}/api/sessions/{victim.session_id}/settings"
        for changes in (
            {"swap_enabled": "yes"},
            {"reference_distance": "far"},
            {"reference_distance": True},
            {"reference_distance": 1e308},
            {"engine": 5},
            {"face_selector": ["many"]},
            {"no_such_setting": 1},
            {"__class__": "x"},
            ["swap_enabled", True],
            "swap_enabled",
            None,
        ):
            async with http.patch(settings_url, json=changes) as response:
                await _expect_clear_4xx(response, f"settings {changes!r}")

        source_url = f"{url}/api/sessions/{victim.session_id}/source"
        upload_cases: list[tuple[str, int, dict[str, object]]] = [
            ("truncated JPEG", 422, {"data": jpeg[: len(jpeg) // 2]}),
            ("JPEG header only", 422, {"data": jpeg[:20]}),
            ("truncated PNG", 422, {"data": png.tobytes()[:40]}),
            ("decompression bomb", 413, {"data": _decompression_bomb()}),
            ("SVG posing as JPEG", 415, {"data": b'<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>'}),
            ("HTML posing as PNG", 415, {"data": b"<!doctype html><img src=x onerror=alert(1)>"}),
            ("empty body", 415, {"data": b""}),
            ("over the size cap", 413, {"data": jpeg + b"\x00" * MAX_UPLOAD_BYTES}),
            ("path-like name", 422, {"data": _multipart("../../etc/passwd.jpg", jpeg)}),
            ("windows path name", 422, {"data": _multipart("..\\..\\boot.ini", jpeg)}),
            ("multipart without image", 415, {"data": _multipart("face.jpg", jpeg, field="other")}),
            ("uniform picture (no face)", 422, {"data": png.tobytes()}),
        ]
        for case, status, request in upload_cases:
            async with http.put(source_url, headers=_image_header(request), **request) as response:  # type: ignore[arg-type]
                await _expect_clear_4xx(response, case, status)

        for method, path in (
            ("GET", "/no/such/route"),
            ("GET", "/api/sessions/../../etc/passwd"),
            ("GET", "/api/sessions/nonexistent"),
            ("PUT", "/health"),
            ("DELETE", "/api/sessions"),
            ("PROPFIND", "/api/sessions"),
            ("POST", "/metrics"),
        ):
            async with http.request(method, url + path) as response:
                await _expect_clear_4xx(response, f"{method} {path}")

        async with http.request("BREW", f"{url}/api/sessions") as response:
            assert response.status == 400  # refused by the HTTP parser itself, before any route
        async with http.get(f"{url}/health") as response:
            assert response.status == 200 and (await response.json()) == {"status": "ok"}
        assert engine.worker is not None and engine.worker.running and engine.worker.error is None
        # the session that was the target of it all still works, and so does a new one
        await victim.upload_source(jpeg)
        async with PeerClient(url, frame, keep_frames=3) as newcomer:
            await newcomer.upload_source(jpeg)
            await newcomer.wait_for_frames(45, timeout=15)
            _, swapped = newcomer.frames[-1]
        x1, y1, x2, y2 = face_box(swapped)
        painted = np.median(swapped[y1 + 8 : y2 - 8, x1 + 8 : x2 - 8].reshape(-1, 3), axis=0)
        expected = np.array(source_colour(decoded_photo(media_dir, "fr_biden2.jpg")))
        assert np.abs(painted - expected).max() < 12


def _image_header(request: dict[str, object]) -> dict[str, str]:
    return {} if isinstance(request["data"], aiohttp.FormData) else {"Content-Type": "image/jpeg"}


async def _fresh_offer() -> str:
    """A real browser-like offer (aiortc), so truncating it gives a plausible half SDP."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    from streamer.transport.ice_addresses import restrict_ice_addresses

    restrict_ice_addresses([LOOPBACK])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no default STUN: loopback only
    try:
        pc.addTransceiver("video", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        return str(pc.localDescription.sdp)
    finally:
        await pc.close()
