"""The page offers only what the daemon can run: with the shared model set (no inswapper, no GFPGAN) the
inswapper engine and the enhancer are disabled with the daemon's reason shown; a refused change (a stale
page that still asks for inswapper) shows the 409 and the call goes on; a call the server ends shows as
ended, not "connected"."""

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import http_json
from tests.browser.test_page import _page_error, _poll

# a stale page: the option enabled again and chosen, as a page loaded before the daemon lost the files
_CHOOSE_INSWAPPER_JS = """
const select = document.querySelector('select[name=engine]');
const option = [...select.options].find((o) => o.value === 'inswapper');
option.disabled = false;
select.value = 'inswapper';
select.dispatchEvent(new Event('change', { bubbles: true }));
"""


def _capabilities_applied(browser: WebDriver) -> bool:
    return bool(browser.execute_script("return window.livefuse.capabilities !== null;"))


def test_unavailable_engine_and_enhancer_are_disabled_with_the_reason(
    browser: WebDriver, daemon_url: str, models_dir: Path
) -> None:
    assert not (models_dir / "inswapper_128.onnx").exists(), "this test needs a model set without inswapper"
    browser.get(f"{daemon_url}/")
    _poll(lambda: _capabilities_applied(browser), 30, "the page to read /api/capabilities")
    inswapper = browser.find_element(By.CSS_SELECTOR, "select[name=engine] option[value=inswapper]")
    assert not inswapper.is_enabled()
    assert "inswapper_128" in (inswapper.get_attribute("title") or "")
    assert "models fetch inswapper_128" in (inswapper.get_attribute("title") or "")
    mesh = browser.find_element(By.CSS_SELECTOR, "select[name=engine] option[value=mesh]")
    assert mesh.is_enabled() and not mesh.get_attribute("title")
    auto = browser.find_element(By.CSS_SELECTOR, "select[name=engine] option[value=auto]")
    assert auto.text == "auto (mesh)"
    enhancer = browser.find_element(By.CSS_SELECTOR, "input[name=enhancer]")
    assert not enhancer.is_enabled() and "enhancer" in (enhancer.get_attribute("title") or "")
    hint = browser.find_element(By.ID, "capabilities-status")
    assert hint.is_displayed() and "engine inswapper" in hint.text and "enhancer" in hint.text
    reference = browser.find_element(By.CSS_SELECTOR, "select[name=face_selector] option[value=reference]")
    assert reference.is_enabled()  # the shared set has the dlib embedder


def test_a_refused_engine_shows_409_and_the_call_goes_on(browser: WebDriver, daemon_url: str) -> None:
    browser.get(f"{daemon_url}/")
    browser.find_element(By.ID, "start-button").click()
    session_id = _poll(lambda: browser.execute_script("return window.livefuse.sessionId;"), 20, "a session")
    _poll(lambda: browser.find_element(By.ID, "call-state").text == "connected", 20, "the call to connect")
    browser.execute_script(_CHOOSE_INSWAPPER_JS)
    message = _poll(lambda: _page_error(browser), 10, "the error banner")
    assert "409" in message and "inswapper" in message
    engine = browser.find_element(By.CSS_SELECTOR, "select[name=engine]")
    _poll(lambda: engine.get_attribute("value") == "auto", 5, "the form to show the engine in effect")
    status, stats = http_json(f"{daemon_url}/api/sessions/{session_id}")
    assert status == 200 and isinstance(stats, dict) and stats["settings"]["engine"] == "auto"
    assert browser.find_element(By.ID, "call-state").text == "connected"
    frames = int(browser.execute_script("return window.livefuse.stats.framesDecoded || 0;"))
    _poll(
        lambda: int(browser.execute_script("return window.livefuse.stats.framesDecoded || 0;")) > frames,
        10,
        "video to keep coming after the refusal",
    )
    browser.find_element(By.ID, "stop-button").click()


def test_a_call_the_server_ends_shows_as_ended(browser: WebDriver, daemon_url: str) -> None:
    browser.get(f"{daemon_url}/")
    browser.find_element(By.ID, "start-button").click()
    session_id = _poll(lambda: browser.execute_script("return window.livefuse.sessionId;"), 20, "a session")
    _poll(lambda: browser.find_element(By.ID, "call-state").text == "connected", 20, "the call to connect")
    assert http_json(f"{daemon_url}/api/sessions/{session_id}", method="DELETE")[0] == 204
    _poll(lambda: browser.find_element(By.ID, "call-state").text == "ended", 10, "the page to say ended")
    message = _page_error(browser) or ""
    assert "ended this call" in message and session_id in message
    assert browser.find_element(By.ID, "start-button").is_enabled()
    assert not browser.find_element(By.ID, "stop-button").is_enabled()
