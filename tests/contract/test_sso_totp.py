"""Contract: the TOTP second factor of a user with `totp: true`, on the real portal behind the real NGINX
edge. Codes are computed by pyotp (RFC 6238) from the secret the portal hands out at enrolment."""

from __future__ import annotations

from urllib.parse import urlsplit

import pyotp
import pytest

from tests.contract.edge_support import Edge
from tests.contract.sso_support import PASSWORDS, Portal, client, form, sign_in

pytestmark = pytest.mark.real

CLOUD, PORTAL = "cloud.example.com", "auth.example.com"
JSON = {"X-CSRF-Check": "1", "Accept": "application/json"}


SSO_EDGE = "nginx"  # the edge kind the module's `edge` (tests/contract/conftest.py) runs


def wrong(code: str) -> str:
    return f"{(int(code) + 500000) % 1000000:06d}"


def test_enrol_then_sign_in_with_the_second_factor(edge: Edge, llng: Portal) -> None:
    portal = f"https://{PORTAL}:{edge.https_port}"
    asked = f"https://{CLOUD}:{edge.https_port}/apps/calendar/?view=week"
    with client(edge.ca_file) as http:
        page = sign_in(http, asked, "carol", PASSWORDS["carol"])
        assert page.status_code == 200 and urlsplit(str(page.url)).path == "/2fregisters/", (page.url, llng.log())
        # password alone, before enrolment: no app
        assert urlsplit(str(http.get(asked).url)).hostname == PORTAL
        key = http.post(f"{portal}/2fregisters/totp/getkey", headers=JSON).json()
        totp = pyotp.TOTP(key["secret"], digits=key["digits"], interval=key["interval"])
        refused = http.post(
            f"{portal}/2fregisters/totp/verify",
            headers=JSON,
            data={"token": key["token"], "code": wrong(totp.now()), "TOTPName": "phone"},
        )
        assert "badCode" in refused.text
        key = http.post(f"{portal}/2fregisters/totp/getkey", headers=JSON).json()
        totp = pyotp.TOTP(key["secret"], digits=key["digits"], interval=key["interval"])
        enrolled = http.post(
            f"{portal}/2fregisters/totp/verify",
            headers=JSON,
            data={"token": key["token"], "code": totp.now(), "TOTPName": "phone"},
        )
        assert enrolled.json() == {"result": 1}, enrolled.text

    with client(edge.ca_file) as http:  # a new browser: password, then the code
        second = sign_in(http, asked, "carol", PASSWORDS["carol"])
        action, fields = form(second.text)
        assert action == "/totp2fcheck" and "code" in fields, second.text[:500]
        assert urlsplit(str(http.get(asked).url)).hostname == PORTAL  # the password alone opens nothing
        second = sign_in(http, asked, "carol", PASSWORDS["carol"])
        action, fields = form(second.text)
        fields["code"] = wrong(totp.now())
        bad = http.post(second.url.join(action), data=fields)
        assert urlsplit(str(bad.url)).hostname == PORTAL and "rstudio" not in bad.text
        assert urlsplit(str(http.get(asked).url)).hostname == PORTAL

        second = sign_in(http, asked, "carol", PASSWORDS["carol"])
        action, fields = form(second.text)
        fields["code"] = totp.now()
        done = http.post(second.url.join(action), data=fields)
        assert done.status_code == 200, (done.status_code, done.url, llng.log())
        assert str(done.url) == asked
        assert done.text == "nextcloud GET /apps/calendar/?view=week 0 https\n"
