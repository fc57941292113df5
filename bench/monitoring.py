"""The monitoring stack's numbers for the bundled example (issue 4). Prints, asserts nothing.

1. Series and whisper bytes: how many series collectd sends, the preallocated whisper bytes (the
   disk use of the whole retention, reached on the first day and flat after) and what a year writes.
2. Carbon ingest: plaintext lines sent to a real carbon-cache (the rendered carbon.conf and
   schemas, on loopback, temp paths) for a bounded time, until a sentinel sent last is in carbon's
   cache: lines/s this machine sustains vs the lines/s the example emits (goal: ratio >= 50).
3. graphite-web render time of every dashboard panel over 24 h (`/render?format=json`, median).

    .venv/bin/python bench/monitoring.py [--seconds 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from homelab.config.loader import load  # noqa: E402
from homelab.monitoring.catalog_builder import catalog_for  # noqa: E402
from homelab.monitoring.series import Catalog  # noqa: E402
from homelab.plan import build_plan  # noqa: E402
from homelab.render import render_all  # noqa: E402
from homelab.render.dashboards import dashboards  # noqa: E402
from homelab.render.rendering import Rendering  # noqa: E402
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, write_secret  # noqa: E402
from tests.monitoring import e2e_support as e2e  # noqa: E402

YEAR = 365 * 86400
SENTINEL = "bench.sentinel"


def example(tmp: Path) -> tuple[Catalog, Rendering]:
    project = tmp / "project"
    project.mkdir()
    shutil.copy(EXAMPLE, project / "homelab.yaml")
    secrets = {}
    for name in EXAMPLE_SECRETS:
        write_secret(project / "secrets" / name, "x")
        secrets[f"secrets/{name}"] = "x"
    plan = build_plan(load(project / "homelab.yaml"))
    return catalog_for(plan), render_all(plan, secrets)


def sizes(catalog: Catalog) -> float:
    n, per = len(catalog.series), catalog.whisper_bytes_per_series()
    emitted = n / catalog.interval
    print("== series and whisper bytes (example)")
    print(f"series                      {n}")
    print(f"retentions                  {catalog.retentions_text}")
    print(f"whisper bytes per series    {per} ({per / 2**20:.2f} MiB, preallocated)")
    print(
        f"whisper bytes, all series   {catalog.whisper_bytes()} ({catalog.whisper_bytes() / 2**20:.1f} MiB; "
        "the whole 5-year retention: flat after creation, so +0 bytes/year after year one)"
    )
    print(
        f"points written per year     {n * YEAR // catalog.interval} "
        f"({n * YEAR // catalog.interval * 12 / 2**30:.2f} GiB of 12-byte points through the finest archive)"
    )
    print(f"lines/s the example emits   {emitted:.1f} ({n} series every {catalog.interval}s)")
    return emitted


def cache_has(port: int, metric: str) -> bool:
    """Ask carbon-cache's CACHE_QUERY port (carbonlink, pickle) whether `metric` has cached points."""
    request = pickle.dumps({"type": "cache-query", "metric": metric}, protocol=2)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack("!L", len(request)) + request)
        header = b""
        while len(header) < 4:
            chunk = s.recv(4 - len(header))
            if not chunk:
                return False
            header += chunk
        (length,) = struct.unpack("!L", header)
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            if not chunk:
                break
            body += chunk
    answer = pickle.loads(body)  # noqa: S301 - our own carbon-cache on loopback
    return bool(answer.get("datapoints"))


def ingest(carbon: e2e.Carbon, catalog: Catalog, seconds: float) -> tuple[int, float]:
    """Send the catalog's series, one round per interval starting a day ago, for `seconds`; then a
    sentinel; returns (lines, seconds until the sentinel is in carbon's cache or on disk)."""
    paths = [s.path.encode() for s in catalog.series]
    start_ts = int(time.time()) - 86400
    lines = 0
    begin = time.perf_counter()
    with socket.create_connection(("127.0.0.1", carbon.line_port), timeout=30) as s:
        round_no = 0
        while time.perf_counter() - begin < seconds and round_no * catalog.interval < 86000:
            ts = start_ts + round_no * catalog.interval
            batch = b"".join(b"%s %d %d\n" % (p, (i + round_no) % 97, ts) for i, p in enumerate(paths))
            s.sendall(batch)
            lines += len(paths)
            round_no += 1
        s.sendall(f"{SENTINEL} 1 {int(time.time())}\n".encode())
    sentinel_file = carbon.file_for(SENTINEL)
    e2e.wait_until(
        lambda: sentinel_file.exists() or cache_has(carbon.query_port, SENTINEL),
        120,
        "carbon never received the sentinel",
        step=0.05,
    )
    return lines, time.perf_counter() - begin


def render_times(web: e2e.GraphiteWeb, catalog: Catalog, runs: int) -> None:
    print(f"== graphite-web render time per dashboard panel, from=-24h, format=json (median of {runs})")
    all_ms = []
    for name, board in dashboards(catalog).items():
        for panel in board["panels"]:
            targets = [t["target"] for t in panel.get("targets", [])]
            samples = []
            for _ in range(runs):
                t0 = time.perf_counter()
                web.get(
                    "/render",
                    [*[("target", t) for t in targets], ("from", "-24h"), ("format", "json")],
                    timeout=120,
                )
                samples.append((time.perf_counter() - t0) * 1000)
            ms = statistics.median(samples)
            all_ms.append(ms)
            print(f"  {name:<14} {panel['title'][:44]:<44} {len(targets):>3} targets {ms:>8.1f} ms")
    print(
        f"  panels {len(all_ms)}, median {statistics.median(all_ms):.1f} ms, max {max(all_ms):.1f} ms, "
        f"all panels of all dashboards {sum(all_ms) / 1000:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8, help="how long to send lines to carbon")
    parser.add_argument("--runs", type=int, default=3, help="renders per panel")
    args = parser.parse_args()
    carbon_cache = find_program("carbon-cache")
    with tempfile.TemporaryDirectory(prefix="homelab-bench-monitoring-") as tmp_name:
        tmp = Path(tmp_name)
        catalog, rendering = example(tmp)
        emitted = sizes(catalog)
        if carbon_cache is None:
            print("carbon-cache not installed (scripts/apt/monitoring-e2e.txt): ingest and render skipped")
            return
        carbon = e2e.Carbon(
            carbon_cache,
            tmp / "graphite",
            rendering.files["monitoring/graphite/carbon.conf"].decode(),
            rendering.files["monitoring/graphite/storage-schemas.conf"].decode(),
            rendering.files["monitoring/graphite/storage-aggregation.conf"].decode(),
        )
        web = None
        try:
            carbon.start()
            # create the example's whisper files first (MAX_CREATES_PER_MINUTE allows them at once)
            ingest(carbon, catalog, 0.001)
            e2e.wait_until(
                lambda: all(carbon.file_for(s.path).exists() for s in catalog.series),
                240,
                "carbon did not create the example's files",
            )
            lines, elapsed = ingest(carbon, catalog, args.seconds)
            rate = lines / elapsed
            print("== carbon-cache ingest (plaintext, loopback, one connection)")
            print(f"lines sent                  {lines} in {elapsed:.2f}s (until the sentinel was in the cache)")
            print(f"sustained                   {rate:,.0f} lines/s")
            print(f"example emits               {emitted:.1f} lines/s")
            print(f"ratio                       {rate / emitted:,.0f}x (goal >= 50x)")
            web = e2e.GraphiteWeb(tmp / "web", carbon.storage, carbon.query_port)
            web.wait_ready()
            render_times(web, catalog, args.runs)
        finally:
            if web is not None:
                web.stop()
            carbon.stop()


if __name__ == "__main__":
    main()
