"""The camera size the page asks for: 1280x720 unless the "Camera" setting says 480p or 1080p, also during a
call; the daemon's session stats say what it receives and sends, and the page shows both. Chromium's own
generated camera (no y4m file) takes the size it is asked for, so what arrives is what was asked."""

import time
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import start_chromium

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def generated_camera_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-generated-camera"), None)
    try:
        yield driver
    finally:
        driver.quit()


def _poll(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last value {last!r})")


def _server_sizes(browser: WebDriver) -> tuple[str, str] | None:
    """The daemon's resolution_in and resolution_out as WxH, from the stats the page last fetched."""
    server = browser.execute_script("return window.livefuse.server;")
    if not server or not server.get("resolution_in") or not server.get("resolution_out"):
        return None
    size_in, size_out = server["resolution_in"], server["resolution_out"]
    return f"{size_in['width']}x{size_in['height']}", f"{size_out['width']}x{size_out['height']}"


def _wait_for_size(browser: WebDriver, size: str) -> None:
    _poll(lambda: _server_sizes(browser) == (size, size), 20, f"the daemon to receive and send {size}")
    _poll(
        lambda: browser.find_element(By.ID, "stat-resolution").text == f"{size} / {size}",
        5,
        f"the page to show {size} in and out",
    )
    _poll(
        lambda: browser.find_element(By.ID, "stat-camera").text.startswith(f"{size} (asked "),
        5,
        f"the page to show the camera at {size}",
    )


def test_the_page_asks_for_720p_by_default(generated_camera_browser: WebDriver, daemon_url: str) -> None:
    browser = generated_camera_browser
    browser.get(f"{daemon_url}/")
    choice = Select(browser.find_element(By.NAME, "camera_resolution"))
    assert choice.first_selected_option.get_attribute("value") == "1280x720"
    assert [option.get_attribute("value") for option in choice.options] == [
        "640x480",
        "1280x720",
        "1920x1080",
    ]
    browser.find_element(By.ID, "start-button").click()
    try:
        _wait_for_size(browser, "1280x720")
        assert browser.find_element(By.ID, "stat-camera").text == "1280x720 (asked 1280x720)"
    finally:
        browser.find_element(By.ID, "stop-button").click()


def test_the_camera_setting_chooses_the_size_before_and_during_a_call(
    generated_camera_browser: WebDriver, daemon_url: str
) -> None:
    browser = generated_camera_browser
    browser.get(f"{daemon_url}/")
    choice = Select(browser.find_element(By.NAME, "camera_resolution"))
    choice.select_by_value("640x480")
    browser.find_element(By.ID, "start-button").click()
    try:
        _wait_for_size(browser, "640x480")
        choice.select_by_value("1920x1080")  # mid-call: the same call, the camera asked again
        session_id = browser.execute_script("return window.livefuse.sessionId;")
        _wait_for_size(browser, "1920x1080")
        assert browser.execute_script("return window.livefuse.sessionId;") == session_id
        assert browser.find_element(By.ID, "error-banner").get_attribute("hidden") is not None
    finally:
        browser.find_element(By.ID, "stop-button").click()
