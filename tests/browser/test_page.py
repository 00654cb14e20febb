"""The page in real headless Chromium against the real daemon: stamps agree with the server's, a call
comes up, a source photo uploaded through the file input visibly swaps the face, and latency is shown.
"""

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH, read_stamp, write_stamp
from tests.browser.conftest import CAMERA_FACE_BOX, http_json, start_chromium

pytestmark = pytest.mark.browser

SOURCE_PHOTO = "fr_biden2.jpg"
STAMP_VALUES = (0, 1, 0xDEADBEEF, 0xFFFFFFFF, 123456789)
# The face is compared as 8x8-block means (codec noise averages out, a different face does not).
# Measured on this page with no source: received vs camera differs by ~5.3 levels, nearly all of it a
# uniform colour shift of the browser's canvas-capture/VP8 path (the same with a plain aiortc echo), and
# the received face differs from itself one second later by < 1 level. The mesh swap of fr_biden2 moved
# the face by ~15 levels against both. So a swap must (1) move the received face by SWAP_LEVELS and by
# SWAP_FACTOR times its own passthrough jitter, and (2) widen the camera-vs-received gap by SWAP_LEVELS.
DIFFERENCE_BLOCK = 8
SWAP_LEVELS = 5.0
SWAP_FACTOR = 4.0


def _with_stamp_module(body: str) -> str:
    """A script running `body` with the page's stamp.js module bound to `stamp` (WebDriver awaits it)."""
    module_url = "new URL('/static/stamp.js', document.baseURI).href"
    return f"return (async () => {{ const stamp = await import({module_url}); {body} }})();"


_READ_STAMP_JS = _with_stamp_module("return stamp.readStamp(new Uint8ClampedArray(arguments[0]));")

# the stamp (or null) in the top-left strip of a received video, drawn at the sent size (640x480)
_STAMP_OF_VIDEO_JS = """
const video = document.getElementById(VIDEO_ID);
if (!video.videoWidth) return 'not playing';
const canvas = document.createElement('canvas');
canvas.width = 640;
canvas.height = 480;
const context = canvas.getContext('2d', { willReadFrequently: true });
context.drawImage(video, 0, 0, 640, 480);
return stamp.readStamp(context.getImageData(0, 0, stamp.STAMP_WIDTH, stamp.STAMP_BLOCK).data);
"""
_REMOTE_STAMP_JS = _with_stamp_module(_STAMP_OF_VIDEO_JS.replace("VIDEO_ID", "'remote-video'"))
_VIEWER_STAMP_JS = _with_stamp_module(_STAMP_OF_VIDEO_JS.replace("VIDEO_ID", "'viewer-video'"))

_FACE_BLOCKS_JS = """
const [x1, y1, x2, y2] = arguments[0];
const block = arguments[1];
const local = document.getElementById('local-video');
const remote = document.getElementById('remote-video');
if (!local.videoWidth || !remote.videoWidth) return null;
const canvas = document.createElement('canvas');
canvas.width = 640;
canvas.height = 480;
const context = canvas.getContext('2d', { willReadFrequently: true });
const blockMeans = (video) => {
  context.drawImage(video, 0, 0, 640, 480);
  const width = x2 - x1;
  const height = y2 - y1;
  const pixels = context.getImageData(x1, y1, width, height).data;
  const columns = Math.floor(width / block);
  const rows = Math.floor(height / block);
  const means = new Float64Array(rows * columns * 3);
  for (let y = 0; y < rows * block; y++) {
    for (let x = 0; x < columns * block; x++) {
      const cell = (Math.floor(y / block) * columns + Math.floor(x / block)) * 3;
      const offset = (y * width + x) * 4;
      for (let c = 0; c < 3; c++) means[cell + c] += pixels[offset + c] / (block * block);
    }
  }
  return means;
};
return [Array.from(blockMeans(local)), Array.from(blockMeans(remote))];
"""


def _poll(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    """The first truthy value of `condition()` within `timeout_s`, else a failure naming `what`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last value {last!r})")


def _page_error(browser: WebDriver) -> str | None:
    banner = browser.find_element(By.ID, "error-banner")
    return None if banner.get_attribute("hidden") is not None else banner.text


def _face_blocks(browser: WebDriver) -> tuple[np.ndarray, np.ndarray] | None:
    """8x8-block means of the face box in the camera and the received video, or None before both play."""
    blocks = browser.execute_script(_FACE_BLOCKS_JS, list(CAMERA_FACE_BOX), DIFFERENCE_BLOCK)
    return None if blocks is None else (np.asarray(blocks[0]), np.asarray(blocks[1]))


def _levels(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a - b)))


def _script_errors(browser: WebDriver) -> list[str]:
    """Uncaught exceptions and console.error lines since the last call (the log is drained on read)."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")  # type: ignore[attr-defined]  # Chromium's driver has it
        if entry["level"] == "SEVERE" and entry.get("source") in ("javascript", "console-api")
    ]


def _frames_decoded(browser: WebDriver) -> int:
    return int(browser.execute_script("return window.livefuse.stats.framesDecoded || 0;"))


def test_page_stamps_match_the_server_format(browser: WebDriver, daemon_url: str) -> None:
    browser.get(f"{daemon_url}/")
    for value in STAMP_VALUES:
        painted = browser.execute_script(
            _with_stamp_module(
                """const canvas = document.createElement('canvas');
            canvas.width = 640; canvas.height = 32;
            const context = canvas.getContext('2d');
            context.fillStyle = '#808080'; context.fillRect(0, 0, 640, 32);
            stamp.writeStamp(context, arguments[0]);
            return Array.from(context.getImageData(0, 0, 640, 32).data);"""
            ),
            value,
        )
        rgba = np.asarray(painted, dtype=np.uint8).reshape(32, 640, 4)
        assert read_stamp(np.ascontiguousarray(rgba[..., :3])) == value

        strip = np.full((STAMP_HEIGHT, STAMP_WIDTH, 3), 128, np.uint8)
        write_stamp(strip, value)
        rgba = np.concatenate([strip, np.full((STAMP_HEIGHT, STAMP_WIDTH, 1), 255, np.uint8)], axis=2)
        read_back = browser.execute_script(_READ_STAMP_JS, rgba.ravel().tolist())
        assert read_back == value

    grey = np.full((STAMP_HEIGHT, STAMP_WIDTH, 4), 128, np.uint8)
    assert read_stamp(np.ascontiguousarray(grey[..., :3])) is None
    assert browser.execute_script(_READ_STAMP_JS, grey.ravel().tolist()) is None


def test_call_swaps_the_face_and_shows_latency(
    browser: WebDriver, daemon_url: str, media_dir: Path, tmp_path: Path
) -> None:
    browser.get(f"{daemon_url}/")
    _script_errors(browser)  # drain what earlier tests left
    browser.find_element(By.NAME, "latency_stamp").click()  # the stamp is opt-in: this test measures
    browser.find_element(By.ID, "start-button").click()

    def decoding() -> bool:
        error = _page_error(browser)
        if error:
            pytest.fail(f"page shows an error while connecting: {error}")
        return _frames_decoded(browser) > 15

    _poll(decoding, 25, "framesDecoded to grow")
    session_id = browser.execute_script("return window.livefuse.sessionId;")
    assert session_id

    time.sleep(1.0)  # let the sender's bitrate ramp up before taking the passthrough reference
    camera, reference = _poll(lambda: _face_blocks(browser), 5, "both videos playing")
    time.sleep(1.0)
    _, later = _poll(lambda: _face_blocks(browser), 5, "both videos playing")
    jitter = _levels(reference, later)
    camera_gap = _levels(camera, reference)
    swap_needs = max(SWAP_LEVELS, SWAP_FACTOR * jitter)

    browser.find_element(By.ID, "source-input").send_keys(str(media_dir / SOURCE_PHOTO))

    def source_accepted() -> bool:
        status = browser.find_element(By.ID, "source-status")
        if status.get_attribute("data-state") == "rejected":
            pytest.fail(f"source upload rejected: {_page_error(browser)}")
        return status.get_attribute("data-state") == "set"

    _poll(source_accepted, 15, "the source upload to be accepted")

    def swapped_face() -> tuple[float, float] | None:
        blocks = _face_blocks(browser)
        if blocks is None or _levels(blocks[1], reference) <= swap_needs:
            return None
        return _levels(blocks[1], reference), _levels(blocks[0], blocks[1])

    moved, swapped_gap = _poll(
        swapped_face, 15, f"the received face to change by > {swap_needs:.1f} levels (jitter {jitter:.2f})"
    )
    assert moved > swap_needs
    assert swapped_gap > camera_gap + SWAP_LEVELS, (camera_gap, swapped_gap)
    assert browser.find_element(By.ID, "source-thumb").get_attribute("hidden") is None
    browser.save_screenshot(str(tmp_path / "swapped.png"))

    latency_text = _poll(
        lambda: re.fullmatch(r"(\d+) / (\d+) ms", browser.find_element(By.ID, "stat-latency").text),
        10,
        "the latency stat to show p50 / p95",
    )
    p50_ms, p95_ms = int(latency_text.group(1)), int(latency_text.group(2))
    assert 0 < p50_ms <= p95_ms < 10_000
    server_frames = _poll(
        lambda: re.fullmatch(
            r"(\d+) / (\d+) / (\d+)", browser.find_element(By.ID, "stat-server-frames").text
        ),
        5,
        "server frame counters",
    )
    assert int(server_frames.group(2)) > 0
    cadence = browser.find_element(By.ID, "stat-cadence").text  # what the daemon says of its load
    assert re.fullmatch(
        r"every frame|\d of \d frames swapped, \d+ skipped( \(worker \d+% busy\))?", cadence
    ), cadence
    sending = _poll(  # the daemon's encoder: its bitrate (the browser's REMB estimate once it came), size
        lambda: re.fullmatch(
            r"(\d+) kbit/s \((estimate|start)\), (\d+)x(\d+)",
            browser.find_element(By.ID, "stat-server-sending").text,
        ),
        10,
        "the daemon's sending bitrate",
    )
    assert 300 <= int(sending.group(1)) <= 2500  # within the encoder's bounds
    assert _page_error(browser) is None
    assert _script_errors(browser) == []

    browser.find_element(By.ID, "stop-button").click()
    _poll(
        lambda: http_json(f"{daemon_url}/api/sessions/{session_id}")[0] == 404, 5, "the session to be deleted"
    )
    assert browser.find_element(By.ID, "call-state").text == "idle"


def test_latency_stamp_is_off_unless_asked(browser: WebDriver, daemon_url: str) -> None:
    browser.get(f"{daemon_url}/")
    _script_errors(browser)
    toggle = browser.find_element(By.NAME, "latency_stamp")
    assert not toggle.is_selected()
    browser.find_element(By.ID, "start-button").click()
    _poll(lambda: _frames_decoded(browser) > 15, 25, "framesDecoded to grow")
    session_id = browser.execute_script("return window.livefuse.sessionId;")

    def session_settings() -> dict[str, Any]:
        status, body = http_json(f"{daemon_url}/api/sessions/{session_id}")
        assert status == 200 and isinstance(body, dict), (status, body)
        return dict(body["settings"])

    # off: several received frames, none carries a stamp, the session says so, the stat says how to turn it on
    readings = [browser.execute_script(_REMOTE_STAMP_JS) for _ in range(10)]
    assert readings == [None] * 10, readings
    assert session_settings()["latency_stamp"] is False
    _poll(lambda: "off" in browser.find_element(By.ID, "stat-latency").text, 5, "the latency stat to say off")

    # on, mid-call: the session setting follows, stamps come back and latency is shown
    toggle.click()
    _poll(lambda: session_settings()["latency_stamp"], 5, "the session's latency_stamp setting")
    _poll(
        lambda: isinstance(browser.execute_script(_REMOTE_STAMP_JS), int), 10, "a stamp in the received video"
    )
    _poll(
        lambda: re.fullmatch(r"\d+ / \d+ ms", browser.find_element(By.ID, "stat-latency").text),
        10,
        "the latency stat",
    )

    # a viewer of this call (/view, a WHEP client) sees the picture without the stamp
    page = browser.current_window_handle
    browser.switch_to.new_window("window")
    try:
        browser.get(f"{daemon_url}/view/{session_id}")
        _poll(lambda: browser.execute_script(_VIEWER_STAMP_JS) != "not playing", 15, "the viewer to play")
        viewer_readings = [browser.execute_script(_VIEWER_STAMP_JS) for _ in range(10)]
        assert viewer_readings == [None] * 10, viewer_readings
    finally:
        browser.close()
        browser.switch_to.window(page)
    assert isinstance(browser.execute_script(_REMOTE_STAMP_JS), int)  # the caller still gets its stamps
    assert _script_errors(browser) == []
    browser.find_element(By.ID, "stop-button").click()


def _thumb(browser: WebDriver) -> str | None:
    """The file the source thumbnail shows, None when it shows none."""
    thumb = browser.find_element(By.ID, "source-thumb")
    return None if thumb.get_attribute("hidden") is not None else thumb.get_attribute("data-file")


def _source_state(browser: WebDriver) -> str | None:
    return browser.find_element(By.ID, "source-status").get_attribute("data-state")


def test_upload_without_a_face_shows_the_server_error(
    browser: WebDriver, daemon_url: str, tmp_path: Path
) -> None:
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((240, 320, 3), 200, np.uint8))
    browser.get(f"{daemon_url}/")
    browser.find_element(By.ID, "start-button").click()
    _poll(lambda: browser.execute_script("return window.livefuse.sessionId;"), 20, "a session")
    browser.find_element(By.ID, "source-input").send_keys(str(blank))
    message = _poll(lambda: _page_error(browser), 10, "the error banner")
    assert "blank.png" in message and "422" in message
    assert _thumb(browser) is None  # nothing is swapped, so no thumbnail
    browser.find_element(By.ID, "stop-button").click()
    _poll(lambda: _page_error(browser) is None, 5, "Stop to clear the banner")


def test_a_rejected_upload_keeps_showing_the_swapped_source(
    browser: WebDriver, daemon_url: str, media_dir: Path, tmp_path: Path
) -> None:
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((240, 320, 3), 200, np.uint8))
    browser.get(f"{daemon_url}/")
    browser.find_element(By.ID, "start-button").click()
    session_id = _poll(lambda: browser.execute_script("return window.livefuse.sessionId;"), 20, "a session")
    source_input = browser.find_element(By.ID, "source-input")
    source_input.send_keys(str(media_dir / SOURCE_PHOTO))
    _poll(lambda: _source_state(browser) == "set", 15, "the source to be accepted")
    assert _thumb(browser) == SOURCE_PHOTO

    source_input.send_keys(str(blank))
    message = _poll(lambda: _page_error(browser), 10, "the error banner")
    assert "blank.png" in message
    assert _source_state(browser) == "rejected"
    # the daemon still swaps the first photo, and the page shows that one, saying so
    assert _thumb(browser) == SOURCE_PHOTO
    assert SOURCE_PHOTO in browser.find_element(By.ID, "source-status").text
    status, stats = http_json(f"{daemon_url}/api/sessions/{session_id}")
    assert status == 200 and isinstance(stats, dict) and stats["has_source"] is True

    # the next accepted upload clears the banner
    source_input.send_keys(str(media_dir / SOURCE_PHOTO))
    _poll(lambda: _page_error(browser) is None and _source_state(browser) == "set", 15, "the banner to clear")
    assert _thumb(browser) == SOURCE_PHOTO

    # and so does Stop after another rejection
    source_input.send_keys(str(blank))
    _poll(lambda: _page_error(browser), 10, "the error banner")
    browser.find_element(By.ID, "stop-button").click()
    _poll(lambda: _page_error(browser) is None, 5, "Stop to clear the banner")
    assert _thumb(browser) == SOURCE_PHOTO  # kept for the next call, which sends it at start


def test_denied_camera_permission_is_shown_to_the_user(
    daemon_url: str, camera_y4m: Path, tmp_path: Path
) -> None:
    driver = start_chromium(tmp_path / "profile", camera_y4m, camera_allowed=False)
    try:
        driver.get(f"{daemon_url}/")
        driver.find_element(By.ID, "start-button").click()
        message = _poll(lambda: _page_error(driver), 10, "the error banner")
        assert "permission" in message.lower()
        assert driver.find_element(By.ID, "call-state").text == "idle"
        assert driver.find_element(By.ID, "start-button").is_enabled()
    finally:
        driver.quit()
