"""The page behind a proxy, in real headless Chromium: it takes its ICE servers from the daemon, and it
follows the Location a new session was given to another origin (a daemon's --public-url) for every later
request of that session, with the bearer token and CORS, instead of assuming its own origin.

The page is loaded from http://127.0.0.1:PORT and the daemon says its public URL is http://localhost:PORT:
the same daemon, another origin (only --cors-origin lets the page talk to it). A wrapper around the
page's fetch records where each request went.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from bench.clients.daemon_process import DaemonProcess, free_loopback_port
from gpu_ops.errors import LivefuseError
from tests.browser.conftest import DAEMON_READY_TIMEOUT_S
from tests.browser.test_page import SOURCE_PHOTO, _frames_decoded, _page_error, _poll, _script_errors
from tests.loopback_ice import stun_server_thread

pytestmark = pytest.mark.browser

TOKEN = "page-routing-token"
RECORD_FETCHES_JS = """
window.fetched = [];
const pageFetch = window.fetch.bind(window);
window.fetch = (url, init = {}) => {
  window.fetched.push([init.method || 'GET', String(url)]);
  return pageFetch(url, init);
};
"""


class RoutedDaemon:
    def __init__(self, daemon: DaemonProcess, stun_url: str) -> None:
        self.daemon = daemon
        self.page_origin = f"http://127.0.0.1:{daemon.port}"
        self.public_url = f"http://localhost:{daemon.port}"
        self.stun_url = stun_url


@pytest.fixture(scope="module")
def routed_daemon(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedDaemon]:
    port = free_loopback_port()
    with stun_server_thread() as stun_port:
        stun_url = f"stun:127.0.0.1:{stun_port}"
        arguments: tuple[str, ...] = ("--public-url", f"http://localhost:{port}")
        arguments += ("--cors-origin", f"http://127.0.0.1:{port}")
        arguments += ("--token", TOKEN, "--ice-servers", stun_url)
        daemon = DaemonProcess(
            models_dir,
            tmp_path_factory.mktemp("daemon") / "daemon.log",
            extra_args=arguments,
            ready_timeout_s=DAEMON_READY_TIMEOUT_S,
            port=port,
        )
        try:
            daemon.start()
        except LivefuseError as error:
            pytest.fail(f"the daemon did not start: {error}")
        try:
            yield RoutedDaemon(daemon, stun_url)
        finally:
            daemon.close()


def test_the_page_uses_the_daemons_ice_servers_and_follows_the_session_location(
    browser: WebDriver, routed_daemon: RoutedDaemon, media_dir: Path
) -> None:
    browser.get(f"{routed_daemon.page_origin}/?token={TOKEN}")
    _script_errors(browser)  # drain what earlier tests left
    browser.execute_script(RECORD_FETCHES_JS)
    browser.find_element(By.ID, "start-button").click()

    def decoding() -> bool:
        error = _page_error(browser)
        if error:
            pytest.fail(f"page shows an error while connecting: {error}")
        return _frames_decoded(browser) > 10

    _poll(decoding, 25, "framesDecoded to grow")
    session_id = browser.execute_script("return window.livefuse.sessionId;")
    configured = browser.execute_script("return window.livefuse.iceServers;")
    assert [server["urls"] for server in configured] == [[routed_daemon.stun_url]]

    browser.find_element(By.ID, "source-input").send_keys(str(media_dir / SOURCE_PHOTO))
    _poll(
        lambda: browser.find_element(By.ID, "source-status").get_attribute("data-state") == "set",
        15,
        "the source upload (cross-origin, to the session's Location) to be accepted",
    )
    _poll(lambda: browser.execute_script("return window.livefuse.server;"), 10, "server stats of the session")
    browser.find_element(By.ID, "stop-button").click()
    _poll(lambda: browser.find_element(By.ID, "call-state").text == "idle", 5, "the call to stop")

    fetched = [tuple(entry) for entry in browser.execute_script("return window.fetched;")]
    session_url = f"{routed_daemon.public_url}/api/sessions/{session_id}"
    assert fetched[:2] == [("GET", "/api/ice-servers"), ("POST", "/api/sessions")], fetched
    later = fetched[2:]
    assert ("PUT", f"{session_url}/source") in later
    assert ("GET", session_url) in later
    assert ("DELETE", session_url) in later
    assert all(url.startswith(session_url) for _, url in later), "every later request went to the Location"
    assert _page_error(browser) is None
    assert _script_errors(browser) == []
