"""The system's Chromium driven by Playwright, for the dashboard's browser tests: the
executable and its flags, where screenshots go, and a page on a link that fails the test on any
page error or console error (a CSP violation or a failed request shows as one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("SQUADD_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts") / "dashboard"
WAIT_MS = 30_000


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]' brings it)"
    if not CHROMIUM.exists():
        return (f"{CHROMIUM} is missing: 'apt-get install -y chromium' (scripts/test does it "
                "under CI or as root)")
    return None


@contextmanager
def browser_page(link: str) -> Iterator[Any]:
    """A Chromium page on `link` (the test is skipped where Chromium is missing); no page or
    console error may have happened by the end."""
    missing = chromium_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                         headless=True)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.set_default_timeout(WAIT_MS)
            problems: list[str] = []
            tab.on("pageerror", lambda error: problems.append(str(error)))
            tab.on("console", lambda message: problems.append(message.text)
                   if message.type == "error" else None)
            tab.goto(link)
            yield tab
            assert problems == [], problems
        finally:
            browser.close()
