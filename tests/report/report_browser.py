"""A real headless Chromium (Debian's chromium + chromedriver) driven by selenium, for the report page.

``open_page`` loads a file:// URL and returns what a reader would see: console errors, images
that decoded, table rows, horizontal overflow on a phone, and screenshots/PDF written next to
the page. ``browser_or_skip`` skips cleanly without a browser, or fails when
INFKIT_REQUIRE_BROWSER=1 (CI installs one in .ci/setup-browser.sh).
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import require_or_skip

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-color-profile=srgb")
DESKTOP = (1280, 900)
PHONE = (390, 844)


@dataclass(frozen=True)
class Browser:
    chromium: str
    chromedriver: str


@dataclass(frozen=True)
class PageCheck:
    console_errors: list[str]
    images: int
    images_decoded: int
    run_rows: int
    invalid_rows: int
    resources: list[str]  # URLs the page fetched (data: URIs are not fetches)
    phone_overflow_px: int  # how far the page is wider than a phone screen
    screenshot: Path
    phone_screenshot: Path
    pdf: Path
    pdf_pages: int
    text: str


def browser_or_skip() -> Browser:
    chromium = os.environ.get("INFKIT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("INFKIT_CHROMEDRIVER") or shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        require_or_skip("INFKIT_REQUIRE_BROWSER", "selenium is not installed (pip install -e '.[dev]')")
    if not (chromium and driver):
        require_or_skip(
            "INFKIT_REQUIRE_BROWSER", "no chromium + chromedriver here (.ci/setup-browser.sh installs them)"
        )
    return Browser(chromium, driver)


def _driver(browser: Browser, profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must never fetch a driver: Debian's is given
    options = webdriver.ChromeOptions()
    options.binary_location = browser.chromium
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=browser.chromedriver))


def _full_screenshot(driver, path: Path, width: int, height: int, mobile: bool) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": min(size["height"], 16000), "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def open_page(browser: Browser, page: Path) -> PageCheck:
    """Load ``page`` from file://, inspect it, and save screenshots and a print PDF beside it."""
    profile = tempfile.mkdtemp(prefix="infkit-chromium-")
    driver = _driver(browser, profile)
    try:
        driver.get(page.resolve().as_uri())
        facts = driver.execute_script("""
            const imgs = [...document.images];
            return {images: imgs.length,
                    decoded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
                    rows: document.querySelectorAll('table.runs tbody tr').length,
                    invalid: document.querySelectorAll('table.runs tbody tr.invalid').length,
                    resources: performance.getEntriesByType('resource').map(e => e.name),
                    text: document.body.innerText};""")
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        shot = page.with_name("screenshot.png")
        _full_screenshot(driver, shot, *DESKTOP, mobile=False)
        phone = page.with_name("screenshot-phone.png")
        _full_screenshot(driver, phone, *PHONE, mobile=True)
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth;")
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        pdf = page.with_name("print.pdf")
        pdf.write_bytes(base64.b64decode(driver.print_page()))
        errors += [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    pages = pdf.read_bytes().count(b"/Type /Page") - pdf.read_bytes().count(b"/Type /Pages")
    return PageCheck(
        errors,
        facts["images"],
        facts["decoded"],
        facts["rows"],
        facts["invalid"],
        facts["resources"],
        int(overflow),
        shot,
        phone,
        pdf,
        pages,
        facts["text"],
    )
