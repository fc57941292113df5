"""bench/edge.py's report: the table of metrics and ratios, the table of CPU costs, and the chart."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

METRICS = ("rps", "p99_ms", "bulk_mbs", "new_cps")
# CPU per unit of work, of the path's own processes (a proxy's backend included) and of wrk: per
# 1 KiB keepalive request, per MB of the 100 MB download, per new connection (seconds -> unit)
COSTS = {"rps": (1e6, "µs/req"), "bulk_mbs": (1e3, "ms/MB"), "new_cps": (1e6, "µs/conn")}
BASELINE, DIRECT, STOCK = "tuned", "direct", "traefik"


def ratio(results: dict[str, dict[str, list[float]]], name: str, reference: str, metric: str) -> float:
    """The median over rounds of name/reference within each round (measured moments apart, so a load
    change between rounds cancels out); p99 and CPU costs inverted, so > 1 is better for every metric."""
    pairs = zip(results[name][metric], results[reference][metric], strict=True)
    return statistics.median(v / r if metric in METRICS and metric != "p99_ms" else r / v for v, r in pairs)


def ceiling(results: dict[str, dict[str, list[float]]], name: str, metric: str) -> float:
    """Direct TLS's CPU per unit (its server and wrk) over this path's (server, backend, wrk): the most
    this path can reach of direct's throughput when the two cores are saturated, median of rounds."""

    def totals(path: str) -> list[float]:
        by = results[path]
        return [s + c for s, c in zip(by[f"server_{metric}"], by[f"client_{metric}"], strict=True)]

    return statistics.median(d / p for d, p in zip(totals(DIRECT), totals(name), strict=True))


def table(data: dict[str, Any]) -> str:
    """Markdown: medians, and each as a ratio to the hand-tuned proxy and to direct TLS; the Traefik
    edge also against stock Traefik."""
    results = data["results"]
    lines = [
        "| path | 1 KiB req/s | vs tuned | vs direct | p99 ms | p99 vs tuned | 100 MB MB/s | vs direct"
        " | new conn/s | vs direct | vs stock Traefik (req/s, p99, MB/s, conn/s) |",
        "|---" * 11 + "|",
    ]
    for name, by in results.items():
        m = {metric: statistics.median(by[metric]) for metric in METRICS}
        stock = ""
        if name.startswith("traefik-edge"):
            stock = ", ".join(f"{ratio(results, name, STOCK, metric):.2f}" for metric in METRICS)
        lines.append(
            f"| {name} | {m['rps']:.0f} | {ratio(results, name, BASELINE, 'rps'):.2f}"
            f" | {ratio(results, name, DIRECT, 'rps'):.2f} | {m['p99_ms']:.2f}"
            f" | {ratio(results, name, BASELINE, 'p99_ms'):.2f} | {m['bulk_mbs']:.0f}"
            f" | {ratio(results, name, DIRECT, 'bulk_mbs'):.2f} | {m['new_cps']:.0f}"
            f" | {ratio(results, name, DIRECT, 'new_cps'):.2f} | {stock} |"
        )
    return "\n".join(lines)


def costs(data: dict[str, Any]) -> str:
    """Markdown: CPU per unit of work (medians), server side (a proxy's backend included) and wrk, and
    the ceiling each sets against direct TLS."""
    results = data["results"]
    header = "| path | " + " | ".join(f"server {unit} | wrk {unit}" for _, unit in COSTS.values())
    lines = [header + " | CPU ceiling vs direct (req/s, MB/s, conn/s) |", "|---" * 8 + "|"]
    for name, by in results.items():
        cells = [f"{statistics.median(by[f'{side}_{m}']):.1f}" for m in COSTS for side in ("server", "client")]
        bounds = ", ".join(f"{ceiling(results, name, m):.2f}" for m in COSTS)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {bounds} |")
    return "\n".join(lines)


def chart(data: dict[str, Any], out: Path) -> None:
    """Left: every metric as a ratio to the hand-tuned proxy. Right: 100 MB and new connections as a
    ratio to direct TLS, next to the CPU ceiling for each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = data["results"]
    names = [n for n in results if n != BASELINE]
    labels = {"rps": "1 KiB req/s", "p99_ms": "p99 latency (inverted)", "bulk_mbs": "100 MB MB/s"}
    labels["new_cps"] = "new conn/s"
    figure, (left, right) = plt.subplots(1, 2, figsize=(15, 5), gridspec_kw={"width_ratios": [3, 2]})
    bars(left, names, {label: [ratio(results, n, BASELINE, m) for n in names] for m, label in labels.items()})
    left.set_ylabel("ratio to the hand-tuned NGINX proxy\n(median of per-round ratios, > 1 is better)")
    others = [n for n in results if n != DIRECT]
    against_direct = {
        "100 MB MB/s": [ratio(results, n, DIRECT, "bulk_mbs") for n in others],
        "100 MB: its CPU ceiling": [ceiling(results, n, "bulk_mbs") for n in others],
        "new conn/s": [ratio(results, n, DIRECT, "new_cps") for n in others],
        "new conn/s: its CPU ceiling": [ceiling(results, n, "new_cps") for n in others],
    }
    ceilings = {"hatch": "//", "alpha": 0.45}
    styles = [{"color": "tab:green"}, {"color": "tab:green", **ceilings}, {"color": "tab:red"}]
    bars(right, others, against_direct, [*styles, {"color": "tab:red", **ceilings}])
    right.set_ylabel("ratio to direct TLS (> 1 is better)")
    meta = data["meta"]
    figure.suptitle(f"TLS edge on loopback, {meta['rounds']} rounds x {meta['seconds']} s (load {meta['load']})")
    figure.tight_layout()
    figure.savefig(out, dpi=100)


def bars(
    axis: Any, names: list[str], series: dict[str, list[float]], styles: list[dict[str, Any]] | None = None
) -> None:
    width = 0.8 / len(series)
    for index, (label, values) in enumerate(series.items()):
        style = styles[index] if styles else {}
        axis.bar([i + index * width for i in range(len(names))], values, width, label=label, **style)
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.axhline(0.95, color="grey", linewidth=0.8, linestyle="--")
    axis.set_xticks([i + (len(series) - 1) * width / 2 for i in range(len(names))], names, rotation=20)
    axis.set_ylim(0, 1.3 * max(1.0, *(max(values) for values in series.values())))  # room for the legend
    axis.legend(fontsize="small", ncols=2)
