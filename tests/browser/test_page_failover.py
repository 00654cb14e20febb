"""Issue 21 item 3: the page survives the death of the daemon serving its call. Two daemons (real models)
behind the shipped HAProxy (deploy/haproxy/haproxy.cfg, as tests/deploy/test_proxy.py runs it), the page
loaded from the proxy's shared name; the daemon holding the call is killed (SIGKILL: no goodbye) mid-call.
The page notices, opens a new call through the proxy, which reaches the other daemon, sends its source
photo and settings again, and the swapped video resumes.

Chromium resolves *.livefuse.test to 127.0.0.1 (a host resolver rule), as wildcard DNS would send those
names to the proxy.
"""

import logging
import os
import shutil
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from bench.clients.daemon_process import DaemonProcess, free_loopback_port
from tests.browser.conftest import DAEMON_READY_TIMEOUT_S, http_json, start_chromium
from tests.browser.test_page import SOURCE_PHOTO, _frames_decoded, _page_error, _poll
from tests.deploy.test_proxy import DAEMONS, DOMAIN, resolve_test_names, start_haproxy

pytestmark = pytest.mark.browser
logger = logging.getLogger(__name__)

NOTICE_BOUND_S = 3.0  # issue 21: the page notices a dead daemon within 3 s


def daemon_args(name: str, port: int) -> tuple[str, ...]:
    entry = f"http://{DOMAIN}:{port}"
    return (
        "--public-url", f"http://{name}.{DOMAIN}:{port}", "--cors-origin", entry,
        "--trusted-proxies", "127.0.0.1", "--engine", "mesh", "--execution-provider", "cpu",
    )  # fmt: skip


@pytest.fixture(scope="module")
def proxied(
    models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(proxy port, daemons by name) with HAProxy in front."""
    if shutil.which("haproxy") is None:
        pytest.skip("Debian haproxy is not installed (apt-get install haproxy; .ci/run installs it)")
    workdir = tmp_path_factory.mktemp("failover")
    port = free_loopback_port()
    daemons = {
        name: DaemonProcess(
            models_dir,
            workdir / f"{name}.log",
            extra_args=daemon_args(name, port),
            ready_timeout_s=DAEMON_READY_TIMEOUT_S,
        )
        for name in DAEMONS
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", resolve_test_names(socket.getaddrinfo))
        haproxy = None
        try:
            with ThreadPoolExecutor(len(daemons)) as pool:
                list(pool.map(DaemonProcess.start, daemons.values()))
            haproxy = start_haproxy(port, daemons, workdir)
            yield port, daemons
        finally:
            if haproxy is not None:
                haproxy.terminate()
                haproxy.wait(timeout=10)
            for daemon in daemons.values():
                daemon.close()


@pytest.fixture(scope="module")
def resolving_browser(
    camera_y4m: Path, tmp_path_factory: pytest.TempPathFactory, proxied: tuple[int, dict[str, Any]]
) -> Iterator[WebDriver]:
    """Chromium that resolves the test names, and takes the proxy's http origin as secure (the camera
    needs a secure origin; deployments serve https)."""
    rule = f"--host-resolver-rules=MAP {DOMAIN} 127.0.0.1, MAP *.{DOMAIN} 127.0.0.1"
    secure = f"--unsafely-treat-insecure-origin-as-secure=http://{DOMAIN}:{proxied[0]}"
    profile = tmp_path_factory.mktemp("chromium-failover")
    driver = start_chromium(profile, camera_y4m, extra_flags=(rule, secure))
    try:
        yield driver
    finally:
        driver.quit()


def _holder(daemons: dict[str, DaemonProcess], session_id: str) -> str | None:
    """Which daemon holds `session_id` (asked directly, not through the proxy)."""
    for name, daemon in daemons.items():
        if daemon.pid is not None and http_json(f"{daemon.url}/api/sessions/{session_id}")[0] == 200:
            return name
    return None


def test_the_page_calls_again_through_the_proxy_when_its_daemon_dies(
    resolving_browser: WebDriver, proxied: tuple[int, dict[str, DaemonProcess]], media_dir: Path
) -> None:
    browser = resolving_browser
    port, daemons = proxied
    browser.get(f"http://{DOMAIN}:{port}/")
    browser.find_element(By.NAME, "mouth_mask").click()  # a setting the new call must get again
    browser.find_element(By.ID, "start-button").click()

    def decoding() -> bool:
        error = _page_error(browser)
        if error:
            pytest.fail(f"page shows an error while connecting: {error}")
        return _frames_decoded(browser) > 10

    _poll(decoding, 40, "the first call's video")
    browser.find_element(By.ID, "source-input").send_keys(str(media_dir / SOURCE_PHOTO))
    _poll(
        lambda: browser.find_element(By.ID, "source-status").get_attribute("data-state") == "set",
        20,
        "the source upload",
    )
    first = browser.execute_script("return window.livefuse.sessionId;")
    holder = _holder(daemons, first)
    assert holder is not None, "no daemon holds the call"
    other = next(name for name in daemons if name != holder)

    os.kill(daemons[holder].pid or 0, signal.SIGKILL)  # mid-call, no goodbye
    killed_at_ms = browser.execute_script("return performance.now();")
    daemons[holder].close()  # reaps it; the pid is gone from here on

    failover = _poll(
        lambda: browser.execute_script("const f = window.livefuse.failovers; return f.length ? f[0] : null;"),
        15,
        "the page to notice the dead daemon",
    )
    noticed_s = (failover["at"] - killed_at_ms) / 1000.0
    assert failover["from"] == first
    second = _poll(
        lambda: browser.execute_script(
            "const s = window.livefuse.sessionId; return s && s !== arguments[0] ? s : null;", first
        ),
        30,
        "a new call",
    )
    assert _holder(daemons, second) == other
    decoded_before = _frames_decoded(browser)
    _poll(lambda: _frames_decoded(browser) > decoded_before + 10, 30, "the video to resume")

    def resent() -> dict[str, Any] | None:
        status, stats = http_json(f"{daemons[other].url}/api/sessions/{second}")
        assert status == 200 and isinstance(stats, dict), (status, stats)
        return stats if stats["has_source"] and stats["settings"]["mouth_mask"] is False else None

    _poll(resent, 20, "the source photo and the changed setting to be sent again")
    assert browser.find_element(By.ID, "call-state").text in ("connected", "connecting"), _page_error(browser)
    resumed_ms = browser.execute_script("return window.livefuse.failovers[0].resumedAt || null;")
    logger.info(
        "failover: noticed %.1f s after the kill, new call set up %.1f s after it",
        noticed_s,
        (resumed_ms - killed_at_ms) / 1000.0 if resumed_ms else float("nan"),
    )
    # the bound is the issue's, with a little room for a loaded machine; the figure goes in the message
    assert noticed_s < NOTICE_BOUND_S + 1.0, f"noticed {noticed_s:.1f} s after the kill"
