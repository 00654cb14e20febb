"""The viewer page in headless Chromium: FFmpeg's whip muxer publishes a panned photo to the real daemon
(started with `--source`), the page at /view/latest plays the swapped stream through WHEP, and after the
publisher stops and a new one starts it reconnects on its own.
"""

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from bench.clients.daemon_process import DaemonProcess
from gpu_ops.errors import LivefuseError
from tests.browser.conftest import DAEMON_READY_TIMEOUT_S

pytestmark = pytest.mark.browser

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SOURCE = "fr_biden2.jpg"
BLOCK = 8  # compared as 8x8-block means: codec noise averages out, a different face does not
FACE_BLOCKS = (slice(190 // BLOCK, 330 // BLOCK), slice(250 // BLOCK, 390 // BLOCK))
BACKGROUND_BLOCKS = (slice(0, 100 // BLOCK), slice(None))

_BLOCK_MEANS_JS = """
const video = document.getElementById('viewer-video');
if (!video.videoWidth || video.readyState < 2) return null;
const canvas = document.createElement('canvas');
canvas.width = 640;
canvas.height = 480;
const context = canvas.getContext('2d', { willReadFrequently: true });
context.drawImage(video, 0, 0, 640, 480);
const pixels = context.getImageData(0, 0, 640, 480).data;
const block = arguments[0];
const columns = 640 / block, rows = 480 / block;
const means = new Array(rows * columns * 3).fill(0);
for (let y = 0; y < 480; y++) {
  for (let x = 0; x < 640; x++) {
    const source = (y * 640 + x) * 4;
    const target = (Math.floor(y / block) * columns + Math.floor(x / block)) * 3;
    for (let c = 0; c < 3; c++) means[target + c] += pixels[source + c] / (block * block);
  }
}
return {width: video.videoWidth, height: video.videoHeight, means};
"""


@pytest.fixture(scope="module")
def source_daemon(
    models_dir: Path, media_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The real daemon with `--source fr_biden2.jpg`: every WHIP stream is swapped without a REST call."""
    log_path = tmp_path_factory.mktemp("daemon") / "daemon.log"
    daemon = DaemonProcess(
        models_dir,
        log_path,
        extra_args=("--source", str(media_dir / SOURCE)),
        ready_timeout_s=DAEMON_READY_TIMEOUT_S,
    )
    try:
        daemon.start()
    except LivefuseError as error:
        pytest.fail(f"the daemon did not start: {error}")
    try:
        yield daemon.url
    finally:
        daemon.close()


def start_publisher(url: str, media_dir: Path, seconds: float, frames_out: Path) -> subprocess.Popen[bytes]:
    """FFmpeg's whip muxer in its own process, publishing the panned fr_obama.jpg to `url`/whip."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "tests.integration.whip_publisher", "--url", f"{url}/whip",
            "--media-dir", str(media_dir), "--photo", "fr_obama.jpg", "--seconds", str(seconds),
            "--frames-out", str(frames_out),
        ],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_publisher(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()  # the muxer closes: DELETE on the WHIP resource
    output, _ = process.communicate(timeout=15)
    assert process.returncode == 0, output.decode(errors="replace")[-2000:]


def block_means(frame: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    return cv2.resize(
        frame.astype(np.float32), (width // BLOCK, height // BLOCK), interpolation=cv2.INTER_AREA
    )


def closest_error(received: np.ndarray, published: list[np.ndarray], region: tuple[slice, slice]) -> float:
    return min(float(np.abs(received[region] - frame[region]).mean()) for frame in published)


def viewer_status(browser: WebDriver) -> dict[str, Any]:
    return dict(browser.execute_script("return Object.assign({}, window.livefuseViewer || {});"))


def wait_playing(browser: WebDriver, connects: int, timeout: float = 25.0) -> np.ndarray:
    """Block means of the page's video once it plays its `connects`-th connection."""
    WebDriverWait(browser, timeout).until(
        lambda driver: (
            (status := viewer_status(driver)).get("state") == "playing"
            and status.get("connects", 0) >= connects
        ),
        message=f"the viewer never played: {viewer_status(browser)}",
    )
    found: dict[str, Any] = {}

    def frame_shown(driver: WebDriver) -> bool:
        result = driver.execute_script(_BLOCK_MEANS_JS, BLOCK)
        if result:
            found.update(result)
        return bool(result)

    WebDriverWait(browser, timeout).until(frame_shown, message="the viewer shows no video")
    assert (found["width"], found["height"]) == (640, 480)
    return np.asarray(found["means"], dtype=np.float32).reshape(480 // BLOCK, 640 // BLOCK, 3)


def test_viewer_page_plays_the_swapped_whip_stream_and_reconnects(
    source_daemon: str, browser: WebDriver, media_dir: Path, tmp_path: Path
) -> None:
    frames_out = tmp_path / "published.npy"
    publisher = start_publisher(source_daemon, media_dir, 30, frames_out)
    try:
        browser.get(f"{source_daemon}/view/latest")
        shown = wait_playing(browser, connects=1)
        time.sleep(1.0)  # the swap is set with the stream; let a few swapped frames through
        shown = wait_playing(browser, connects=1)
    finally:
        stop_publisher(publisher)
    published = [block_means(frame) for frame in np.load(frames_out)]
    background_error = closest_error(shown, published, BACKGROUND_BLOCKS)
    face_error = closest_error(shown, published, FACE_BLOCKS)
    assert background_error < 10, f"the page does not show this stream (background {background_error:.1f})"
    assert face_error > max(12.0, 3 * background_error), f"the face was not swapped ({face_error:.1f})"

    # the publisher left (DELETE): the page notices, and plays the next WHIP stream on its own
    WebDriverWait(browser, 15).until(
        lambda driver: viewer_status(driver).get("state") != "playing",
        message="the page did not notice the end of the stream",
    )
    second = start_publisher(source_daemon, media_dir, 20, tmp_path / "second.npy")
    try:
        wait_playing(browser, connects=2, timeout=20)
    finally:
        stop_publisher(second)
    errors = [
        entry["message"]
        for entry in browser.get_log("browser")  # type: ignore[attr-defined]  # Chrome's driver has it
        if entry["level"] == "SEVERE" and entry.get("source") in ("javascript", "console-api")
    ]
    assert errors == [], f"the viewer page logged errors: {errors}"
