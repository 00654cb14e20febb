"""Browser-test fixtures: a y4m "camera" made from a real photo, the real daemon on loopback, headless
Chromium driven by selenium.

Chromium's fake capture device plays the y4m file in a loop, so what the page sends is known exactly.
The daemon offers only 127.0.0.1 as ICE candidate; Chromium's own candidates are this machine's addresses,
so no media leaves the host.
"""

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from bench.clients.daemon_process import DaemonProcess
from gpu_ops.errors import LivefuseError

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CAMERA_SIZE = (640, 480)
CAMERA_FPS = 30
CAMERA_SECONDS = 3
DAEMON_READY_TIMEOUT_S = 45.0

# fr_obama.jpg (910x1137): YuNet finds the face at [371,85,607,421] (shared/models MANIFEST). The camera
# frame is the 720x540 crop at (129, 20) scaled to 640x480, which puts that face at CAMERA_FACE_BOX.
CAMERA_PHOTO = "fr_obama.jpg"
_CROP_X, _CROP_Y, _CROP_W, _CROP_H = 129, 20, 720, 540
_SCALE = CAMERA_SIZE[0] / _CROP_W
CAMERA_FACE_BOX = tuple(
    round(v * _SCALE) for v in (371 - _CROP_X, 85 - _CROP_Y, 607 - _CROP_X, 421 - _CROP_Y)
)  # x1, y1, x2, y2 in camera px


def _browser_binaries() -> tuple[Path, Path]:
    chromium = CHROMIUM if CHROMIUM.exists() else Path(shutil.which("chromium") or CHROMIUM)
    driver = CHROMEDRIVER if CHROMEDRIVER.exists() else Path(shutil.which("chromedriver") or CHROMEDRIVER)
    if not chromium.exists() or not driver.exists():
        pytest.skip("chromium and chromedriver not installed (apt-get install chromium chromium-driver)")
    return chromium, driver


def write_y4m(path: Path, frame_rgb: np.ndarray, frame_count: int, fps: int) -> None:
    """A yuv420p y4m of `frame_count` copies of `frame_rgb` (BT.601 limited range, as browsers assume)."""
    height, width = frame_rgb.shape[:2]
    i420 = cv2.cvtColor(frame_rgb, cv2.COLOR_RGB2YUV_I420).tobytes()
    with path.open("wb") as file:
        file.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode("ascii"))
        for _ in range(frame_count):
            file.write(b"FRAME\n")
            file.write(i420)


def camera_frame(media_dir: Path) -> np.ndarray:
    """The still frame the fake camera shows: CAMERA_PHOTO cropped to 4:3 around the face, RGB."""
    photo = cv2.imread(str(media_dir / CAMERA_PHOTO), cv2.IMREAD_COLOR)
    if photo is None:
        pytest.fail(f"cannot read {media_dir / CAMERA_PHOTO}")
    crop = photo[_CROP_Y : _CROP_Y + _CROP_H, _CROP_X : _CROP_X + _CROP_W]
    scaled = cv2.resize(crop, CAMERA_SIZE, interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(cv2.cvtColor(scaled, cv2.COLOR_BGR2RGB))


@pytest.fixture(scope="module")
def camera_y4m(tmp_path_factory: pytest.TempPathFactory, media_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("camera") / "camera.y4m"
    write_y4m(path, camera_frame(media_dir), CAMERA_FPS * CAMERA_SECONDS, CAMERA_FPS)
    return path


def http_json(url: str, method: str = "GET") -> tuple[int, object]:
    """Status and parsed JSON body (None when empty) of a loopback request; HTTP errors are returned."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, json.loads(body) if body else None


@pytest.fixture(scope="module")
def daemon_url(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real daemon (`run_stream.py serve`) on a free loopback port, with the real models."""
    log_path = tmp_path_factory.mktemp("daemon") / "daemon.log"
    try:
        daemon = DaemonProcess(models_dir, log_path, ready_timeout_s=DAEMON_READY_TIMEOUT_S)
        daemon.start()
    except LivefuseError as error:
        pytest.fail(f"the daemon did not start: {error}")
    try:
        yield daemon.url
    finally:
        daemon.close()


def start_chromium(
    profile_dir: Path,
    camera_y4m: Path | None,
    *,
    camera_allowed: bool = True,
    extra_flags: tuple[str, ...] = (),
) -> WebDriver:
    """Headless Chromium with the flags of DESIGN.md section 7, whose camera plays `camera_y4m`.

    With camera_y4m=None the camera is Chromium's own generated picture, which, unlike a file, takes the
    size the page asks for. With camera_allowed=False the permission prompt is denied instead of
    auto-accepted. `extra_flags` go on the command line too (e.g. a host resolver rule).
    """
    chromium, driver_path = _browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    permission_flag = "--use-fake-ui-for-media-stream" if camera_allowed else "--deny-permission-prompts"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        permission_flag, "--use-fake-device-for-media-stream",
        *([f"--use-file-for-fake-video-capture={camera_y4m}"] if camera_y4m is not None else []),
        "--autoplay-policy=no-user-gesture-required", "--allow-loopback-in-peer-connection",
        "--disable-features=WebRtcHideLocalIpsWithMdns",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        f"--user-data-dir={profile_dir}", "--window-size=1400,900", *extra_flags,
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console output, for script errors
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(driver_path)))
    driver.set_script_timeout(20)
    return driver


@pytest.fixture(scope="module")
def browser(camera_y4m: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"), camera_y4m)
    try:
        yield driver
    finally:
        driver.quit()
