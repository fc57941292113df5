"""Both edges' ACME clients as rendered, run natively (no containers): Traefik with the rendered static
config and the rendered compose environment, certbot with the rendered certbot.sh and the rendered certbot
service's environment. Changed only where a loopback run must: entry point ports, the store and certbot's
folders under tmp, and container paths (secrets, read-only mounts) mapped back to the host files they
are. Used by the DNS-01 issuance tests and bench/certs.py."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from homelab.certs.store import UnreadableStore, read_certbot, read_resolvers
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import SECRETS_MOUNT, Plan
from homelab.render import edge_nginx, render_all
from homelab.render.edge_traefik import dynamic_config, route_labels, static_config
from homelab.secrets import user_secret_values
from tests.contract.edge_support import labels_to_dynamic, running, traefik_static_for_test

CERTBOT_WRAPPER = """#!/bin/sh
exec "{certbot}" --config-dir "{le}" --work-dir "{work}/certbot-work" --logs-dir "{work}/certbot-logs" "$@"
"""


def native_environment(config: Path, service: str) -> dict[str, str]:
    """The rendered compose environment of the edge's `service`, container paths mapped to the host's."""
    loaded = load(config)
    plan = build_plan(loaded)
    spec = yaml.safe_load(render_all(plan, user_secret_values(loaded)).files["edge/compose.yaml"])["services"][service]
    host_paths = {f"{SECRETS_MOUNT}/{name}": s.source for name, s in plan.secrets.items() if s.source}
    host_paths |= {v["target"]: v["source"] for v in spec.get("volumes", []) if isinstance(v, dict)}
    return {k: host_paths.get(str(v), str(v)) for k, v in spec.get("environment", {}).items()}


def traefik_routes(plan: Plan) -> dict[str, Any]:
    """The rendered router labels as file-provider config; tls.domains (the wildcard) added by hand,
    labels_to_dynamic does not translate list labels."""
    labels: dict[str, str] = {}
    for route in plan.routes:
        labels.update(route_labels(plan, route))
    domains = {k: v for k, v in labels.items() if ".tls.domains[0]." in k}
    backends = {r.app: "http://127.0.0.1:9" for r in plan.routes}  # never reached
    dynamic = labels_to_dynamic({k: v for k, v in labels.items() if k not in domains}, backends)
    for key, value in domains.items():
        router = dynamic["http"]["routers"][key.split(".")[3]]
        domain = router["tls"].setdefault("domains", [{}])[0]
        domain["main" if key.endswith(".main") else "sans"] = value if key.endswith(".main") else [value]
    return dynamic


@dataclass
class Issuance:
    log: Path
    names: frozenset[str]  # of the certificate the edge got
    seconds: float  # from the edge's start to the certificate in its store


def _wait(found: Any, process: Any, log: Path, timeout: float) -> tuple[frozenset[str], float]:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        names = found()
        if names:
            return names, time.monotonic() - started
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no certificate within {timeout} s\n{log.read_text(errors='replace')[-4000:]}")


@contextlib.contextmanager
def traefik_running(config: Path, traefik: str, work: Path) -> Iterator[tuple[Any, Path, Path]]:
    """Traefik as rendered: yields (process, its log, its acme.json)."""
    plan = build_plan(load(config))
    work.mkdir(parents=True)
    (work / "dynamic").mkdir()
    rendered = static_config(plan)
    static, _ports = traefik_static_for_test(rendered, work)
    for name, resolver in static["certificatesResolvers"].items():  # the rendered CA, not a closed port
        resolver["acme"]["caServer"] = rendered["certificatesResolvers"][name]["acme"]["caServer"]
    (work / "traefik.yml").write_text(yaml.safe_dump(static, sort_keys=False))
    (work / "dynamic" / "dynamic.yml").write_text(yaml.safe_dump(dynamic_config(plan)))
    (work / "dynamic" / "routes.yml").write_text(yaml.safe_dump(traefik_routes(plan)))
    env = native_environment(config, "traefik")
    argv = ["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], traefik, f"--configFile={work / 'traefik.yml'}"]
    log = work / "traefik.log"
    with running(argv, log, work) as process:
        yield process, log, work / "acme.json"


def traefik_held(acme: Path) -> list[frozenset[str]]:
    try:
        return [c.names for certs in read_resolvers(acme).values() for c in certs]
    except UnreadableStore:
        return []  # not written yet, or being written


def traefik_issues(config: Path, traefik: str, work: Path, timeout: float) -> Issuance:
    """Traefik as rendered until its store holds a certificate (or `timeout`)."""
    with traefik_running(config, traefik, work) as (process, log, acme):
        names, seconds = _wait(lambda: next(iter(traefik_held(acme)), frozenset()), process, log, timeout)
    return Issuance(log, names, seconds)


@contextlib.contextmanager
def certbot_loop(config: Path, certbot: str, work: Path) -> Iterator[tuple[Any, Path, Path]]:
    """The rendered certbot.sh running with the real certbot: yields (process, its output, config dir)."""
    plan = build_plan(load(config))
    le = work / "letsencrypt"
    le.mkdir(parents=True, mode=0o700)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "certbot").write_text(CERTBOT_WRAPPER.format(certbot=certbot, le=le, work=work))
    (bin_dir / "certbot").chmod(0o755)
    script = work / "certbot.sh"
    script.write_text(
        edge_nginx.certbot_sh(
            plan, config_dir=str(le), edge_dir=str(le / "edge"), first_wait=0, interval="3600",
            credentials=str(work / "rfc2136.ini"),
        )
    )  # fmt: skip
    env = native_environment(config, "certbot") | {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = work / "certbot.out"
    with running(["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], "/bin/sh", str(script)], out, work) as p:
        yield p, out, le


def certbot_issues(config: Path, certbot: str, work: Path, timeout: float) -> Issuance:
    """certbot.sh as rendered until certbot holds a certificate (or `timeout`)."""
    with certbot_loop(config, certbot, work) as (process, out, le):

        def found() -> frozenset[str]:
            served = read_certbot(le).served if (le / "live").exists() else []
            return served[0].names if served else frozenset()

        names, seconds = _wait(found, process, out, timeout)
    return Issuance(out, names, seconds)


def issuer(path: Path) -> x509.Name:
    return x509.load_pem_x509_certificates(path.read_bytes())[0].issuer
