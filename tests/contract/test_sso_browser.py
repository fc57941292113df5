"""Contract: a real browser (Debian's headless Chromium over WebDriver) signs in on the real portal behind
the real Traefik edge: the login form, the TOTP step, then two apps with the one session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pyotp
import pytest

from tests.contract.edge_support import Edge, program
from tests.contract.sso_support import PASSWORDS, client, sign_in

pytestmark = pytest.mark.real

CLOUD, STUDIO, PORTAL = "cloud.example.com", "rstudio.example.com", "auth.example.com"


SSO_EDGE = "traefik"  # the edge kind the module's `edge` (tests/contract/conftest.py) runs


@pytest.fixture(scope="module")
def totp(edge: Edge) -> pyotp.TOTP:
    """dave's authenticator: enrolled on the portal over HTTP (what the portal's page does with its script)."""
    portal = f"https://{PORTAL}:{edge.https_port}"
    headers = {"X-CSRF-Check": "1", "Accept": "application/json"}
    with client(edge.ca_file) as http:
        sign_in(http, f"{portal}/", "dave", PASSWORDS["dave"])
        key = http.post(f"{portal}/2fregisters/totp/getkey", headers=headers).json()
        authenticator = pyotp.TOTP(key["secret"], digits=key["digits"], interval=key["interval"])
        data = {"token": key["token"], "code": authenticator.now(), "TOTPName": "phone"}
        assert http.post(f"{portal}/2fregisters/totp/verify", headers=headers, data=data).json() == {"result": 1}
    return authenticator


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = program("chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in CI: Chromium's sandbox refuses to start as root
        "--disable-dev-shm-usage",
        "--window-size=1100,900",
        "--host-resolver-rules=MAP *.example.com 127.0.0.1",  # every name reaches the edge on loopback
        "--ignore-certificate-errors",  # the test CA; TLS itself is the edge tests' subject
        "--disable-background-networking",  # nothing but the pages asked for (no updates, no lookups)
        "--disable-component-update",
        "--no-first-run",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(program("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def test_login_totp_and_two_apps_with_one_session(edge: Edge, totp: pyotp.TOTP, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as until
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 15)
    asked = f"https://{CLOUD}:{edge.https_port}/apps/files/?dir=/Photos"
    browser.get(asked)
    wait.until(until.presence_of_element_located((By.NAME, "password")))
    assert urlsplit(browser.current_url).hostname == PORTAL
    browser.save_screenshot(str(tmp_path / "sso-portal.png"))
    browser.find_element(By.NAME, "user").send_keys("dave")
    browser.find_element(By.NAME, "password").send_keys(PASSWORDS["dave"])
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()

    wait.until(until.presence_of_element_located((By.NAME, "code")))
    browser.save_screenshot(str(tmp_path / "sso-totp.png"))
    browser.find_element(By.NAME, "code").send_keys(totp.now())
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()

    wait.until(lambda b: urlsplit(b.current_url).hostname == CLOUD)
    assert browser.current_url == asked
    assert "nextcloud GET /apps/files/?dir=/Photos 0 https" in browser.page_source
    # the cookie is not for scripts (HttpOnly): the page's own script cannot read the session
    assert "homelab_sso" not in browser.execute_script("return document.cookie")

    browser.get(f"https://{STUDIO}:{edge.https_port}/session")  # the second app: no portal on the way
    assert urlsplit(browser.current_url).hostname == STUDIO
    assert "rstudio GET /session 0 https" in browser.page_source
    for name in ("sso-portal.png", "sso-totp.png"):  # what docs/sso.md shows
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
