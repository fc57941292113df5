"""The single sign-on stack as `homelab render` writes it (stacks/sso/compose.yaml, its files, its secrets),
started by the real Docker engine with the REAL LemonLDAP::NG: an image of the very files Debian's
packages installed on this bookworm host (the portal, handler and FastCGI server 2.16.1, nginx, perl and
every library they depend on; standins.add_debian_packages), laid out as the upstream image's Dockerfile
installs them (nginx lemonldap-ng wget dumb-init). No registry is reachable here, so the upstream image
itself is not run: what runs is its program at the version the configuration is written for.

Proves what only the container shows: the replaced entrypoint starts both servers, lmConf-1.json (a
secret) is read where the File backend looks, the users file and the Perl modules are found, the
session is written on the sso/data dataset, and the handler the edges ask answers on :8080."""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from standins import BOOKWORM_SLIM, IMAGE_PATH, PREFIX, Rootfs, add_debian_packages, docker

from homelab.project import render_project
from homelab.runtime import process
from tests.conftest import EXAMPLE
from tests.contract.sso_support import PASSWORDS, SSO_CONFIG, form, sso_config_folder

pytestmark = pytest.mark.docker

# what the upstream Dockerfile's apt-get installs (nginx lemonldap-ng ... wget dumb-init), as Debian names the
# parts this stack runs, and the TOTP/OIDC libraries (scripts/apt/sso.txt)
PACKAGES = (
    "nginx",
    "wget",
    "dumb-init",
    "lemonldap-ng-fastcgi-server",
    "liblemonldap-ng-portal-perl",
    "liblemonldap-ng-handler-perl",
    "libconvert-base32-perl",
    "libcrypt-openssl-bignum-perl",
    "libdigest-hmac-perl",
    "libstring-random-perl",
    "libio-string-perl",
)
CONTAINER = "homelab-sso-sso-1"  # compose project homelab-sso, service sso


def _image(workdir: Path) -> str:
    root = Rootfs(workdir / "lemonldap-ng.tar")
    # the packages' folders owned as the packages install them (www-data), read from this host; first, so
    # the packages' listing does not add them again as root's
    for folder in sorted(Path("/var/lib/lemonldap-ng").iterdir()):
        if folder.is_dir():
            stat = folder.stat()
            owner = f"{stat.st_uid}:{stat.st_gid}"
            root.dir(f"var/lib/lemonldap-ng/{folder.name}", stat.st_mode & 0o7777, owner)
    add_debian_packages(root, (*BOOKWORM_SLIM, *PACKAGES))
    root.link("var/log/nginx/access.log", "/dev/stdout")  # the Dockerfile's log links
    root.link("var/log/nginx/error.log", "/dev/stderr")
    return root.import_as(
        f"{PREFIX}/lemonldap-ng:2.16.1",
        f"ENV PATH={IMAGE_PATH}",
        'ENTRYPOINT ["dumb-init", "--", "/bin/sh", "/docker-entrypoint.sh"]',
    )


def _wget(*args: str) -> tuple[int, str, str]:
    """GNU wget inside the portal's container (its loopback): exit code, body, response headers."""
    proc = docker(
        "exec", CONTAINER, "wget", "-S", "-q", "-T", "5", "-t", "1", "-O", "-", *args, check=False, timeout=30
    )
    return proc.returncode, proc.stdout, proc.stderr


def _status(headers: str) -> int:
    codes = re.findall(r"HTTP/1\.\d (\d{3})", headers)
    return int(codes[-1]) if codes else 0


def _sign_in(user: str, password: str) -> str:
    """Post the portal's sign-in form: the session cookie it sets, else the response's headers."""
    rc, page, headers = _wget("--header", "Host: auth.example.com", "http://127.0.0.1/")
    assert rc == 0 and 'name="password"' in page, (rc, headers, page[:300])
    _, fields = form(page)
    fields.update(user=user, password=password)
    _, _, headers = _wget(
        "--max-redirect=0",
        "--header",
        "Host: auth.example.com",
        "--post-data",
        urllib.parse.urlencode(fields),
        "http://127.0.0.1/",
    )
    found = re.search(r"Set-Cookie: homelab_sso=([0-9a-f]{16,})", headers)
    return found.group(1) if found else headers


def test_the_rendered_sso_stack_runs_the_real_portal_in_the_engine(engine: dict[str, str], tmp_path: Path) -> None:
    image = _image(tmp_path)
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["sso"] = SSO_CONFIG
    data["storage"]["mountpoint"] = str(tmp_path / "srv")
    data["images"] = {"sso": image}
    loaded = sso_config_folder(tmp_path / "cfg", data)
    result = render_project(loaded)
    (dataset,) = [d for d in result.plan.datasets if d.key == "sso/data"]
    sessions = Path(dataset.path)
    sessions.mkdir(parents=True)
    os.chown(sessions, dataset.uid, dataset.gid)  # what `homelab up` (prepare_host) does with each dataset
    compose = [engine["HOMELAB_COMPOSE"], "-f", str(result.out / "sso" / "compose.yaml")]
    created = docker("network", "create", "homelab-proxy", check=False).returncode == 0
    try:
        process.run([*compose, "up", "-d"], cwd=result.out / "sso", timeout=180)
        deadline = time.monotonic() + 60
        while _wget("http://127.0.0.1/")[0] != 0:  # the stack's own healthcheck command
            assert time.monotonic() < deadline, docker("logs", CONTAINER, check=False).stderr[-3000:]
            time.sleep(1)
        refused = _sign_in("alice", "not-her-password")
        assert "Set-Cookie: homelab_sso=" not in refused and _status(refused) == 200, refused  # the form again
        cookie = _sign_in("alice", PASSWORDS["alice"])
        logs = docker("logs", CONTAINER, check=False)
        assert re.fullmatch(r"[0-9a-f]{16,}", cookie), (cookie, logs.stdout[-2000:], logs.stderr[-3000:])
        # the session is a file on the dataset (Apache::Session::File, owned by the FastCGI server's user)
        stored = sessions / "sessions" / cookie
        assert stored.is_file() and stored.stat().st_uid == dataset.uid
        # the handler the edges ask (sso:8080/nginx): without a session 401, with one 200 and the user
        ask = ["--header", "X-Forwarded-Host: cloud.example.com", "--header", "X-Forwarded-Uri: /files?dir=/"]
        _, _, headers = _wget(*ask, "http://127.0.0.1:8080/nginx")
        assert _status(headers) == 401, headers
        _, _, headers = _wget(*ask, "--header", f"Cookie: homelab_sso={cookie}", "http://127.0.0.1:8080/nginx")
        assert _status(headers) == 200 and re.search(r"Remote-User: alice", headers), headers
        # a user outside the app's groups (gitea: family) is refused
        bob = _sign_in("bob", PASSWORDS["bob"])  # family only: not rstudio's admins
        ask = ["--header", "X-Forwarded-Host: rstudio.example.com", "--header", "X-Forwarded-Uri: /"]
        _, _, headers = _wget(*ask, "--header", f"Cookie: homelab_sso={bob}", "http://127.0.0.1:8080/nginx")
        assert _status(headers) == 403, headers
    finally:
        process.run([*compose, "down", "-v", "--remove-orphans"], cwd=result.out / "sso", check=False, timeout=120)
        if created:
            docker("network", "rm", "homelab-proxy", check=False)
        docker("rmi", "-f", image, check=False)
