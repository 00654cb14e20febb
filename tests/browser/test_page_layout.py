"""The page lays out at any width: during a real call, at 1280 and 800 px, with the longest values the
stats panel shows, no element's content is wider than its box and the page has no horizontal scrollbar.
The swap-rate line reads plainly."""

import re
import time
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.browser

WIDTHS = (1280, 800)

# the longest values the panel holds: a call far into an overload, counters in the millions
_LONG_VALUES_JS = """
return (async () => {
  const stats = await import(new URL('/static/stats.js', document.baseURI).href);
  const set = (id, text) => { document.getElementById(id).textContent = text; };
  set('stat-cadence', stats.formatCadence({ swap_share: '1/4', frames_shed: 12345678, worker_busy: 0.97,
                                            reason: 'load: 29 of 120 frames swapped in 1.0 s, worker 97% busy' }));
  set('stat-server-frames', '12345678 / 12345678 / 12345678');
  set('stat-processing', stats.formatProcessing({ last: 1234.56, p50: 1234.56 }));
  set('stat-bitrate', '123456 / 123456 kbit/s');
  return document.getElementById('stat-cadence').textContent;
})();
"""

# every rendered element whose content is wider than its box, and the page's own scroll width
_OVERFLOW_JS = """
const offenders = [];
for (const element of document.querySelectorAll('body *')) {
  if (element.closest('[hidden]') || element.clientWidth === 0) continue;
  if (element.scrollWidth > element.clientWidth + 1) {
    offenders.push(`${element.tagName.toLowerCase()}#${element.id || ''}.${element.className || ''}: `
                   + `scrollWidth ${element.scrollWidth} > clientWidth ${element.clientWidth}`);
  }
}
const page = document.documentElement;
return { offenders, scrollWidth: page.scrollWidth, clientWidth: page.clientWidth };
"""


def _poll(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last value {last!r})")


def _viewport_width(browser: WebDriver) -> int:
    return int(browser.execute_script("return window.innerWidth;"))


def _set_viewport_width(browser: WebDriver, width: int) -> None:
    """Resize the window until the page's viewport is `width` px wide (window chrome varies)."""
    browser.set_window_size(width, 900)
    extra = width - _viewport_width(browser)
    if extra:
        browser.set_window_size(width + extra, 900)
    _poll(lambda: _viewport_width(browser) == width, 5, f"a {width} px viewport")


def test_the_swap_rate_reads_plainly(browser: WebDriver, daemon_url: str) -> None:
    browser.get(f"{daemon_url}/")
    texts = browser.execute_script(
        """return (async () => {
          const stats = await import(new URL('/static/stats.js', document.baseURI).href);
          return [
            stats.formatCadence({ swap_share: '2/5', frames_shed: 166, worker_busy: 0.95,
                                  reason: 'headroom: worker 16% busy' }),
            stats.formatCadence({ swap_share: '3/3', frames_shed: 0, reason: 'swapping every frame' }),
            stats.formatCadence({ swap_share: '1/2', frames_shed: 3 }),
          ];
        })();"""
    )
    assert texts == [
        "2 of 5 frames swapped, 166 skipped (worker 95% busy)",
        "every frame",
        "1 of 2 frames swapped, 3 skipped",
    ]


def test_nothing_overflows_at_1280_and_800_px(browser: WebDriver, daemon_url: str) -> None:
    _set_viewport_width(browser, WIDTHS[0])
    browser.get(f"{daemon_url}/")
    browser.find_element(By.ID, "start-button").click()
    _poll(
        lambda: re.fullmatch(r"\d+ / \d+ / \d+", browser.find_element(By.ID, "stat-server-frames").text),
        25,
        "the server's counters in the stats panel",
    )
    try:
        for width in WIDTHS:
            _set_viewport_width(browser, width)
            # the stats refresh each second; keep writing the long values until the layout is checked
            cadence = browser.execute_script(_LONG_VALUES_JS)
            assert "skipped" in cadence and "headroom" not in cadence
            layout = browser.execute_script(_OVERFLOW_JS)
            assert layout["offenders"] == [], (width, layout["offenders"])
            assert layout["scrollWidth"] <= layout["clientWidth"], (width, layout)
            panel = browser.find_element(By.CSS_SELECTOR, ".stats").rect
            for cell in browser.find_elements(By.CSS_SELECTOR, ".stats td, .stats th"):
                right = cell.rect["x"] + cell.rect["width"]
                assert right <= panel["x"] + panel["width"] + 1, (width, cell.get_attribute("id"), cell.rect)
    finally:
        browser.find_element(By.ID, "stop-button").click()
        _set_viewport_width(browser, 1400)
