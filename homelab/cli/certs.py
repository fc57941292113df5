"""certs: what the edge holds per name; `certs check`: will the CA be able to issue."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption

if TYPE_CHECKING:
    from homelab.engine.interface import Engine
    from homelab.plan_model import Plan

certs_app = typer.Typer(
    cls=HandledGroup,
    help="Certificates per served name: issuer, expiry, challenge, last error, recent orders.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode=None,
)


@certs_app.callback()
def certs(
    ctx: typer.Context,
    config: ConfigOption = DEFAULT_CONFIG,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per name, in a list.")] = False,
) -> None:
    """Per served name: issuer (production/staging/test CA), expiry, challenge, last error (the edge's last
    failed order, from its log), orders in 7 days, and when the edge tries again."""
    if ctx.invoked_subcommand is not None:
        return
    from functools import partial

    from homelab.certs.name_status import statuses
    from homelab.config.loader import load
    from homelab.engine.interface import engine_for
    from homelab.plan import build_plan

    plan = build_plan(load(config))
    engine = engine_for(plan.config)
    rows = statuses(plan, edge_log=_edge_log(plan, engine), read=partial(engine.read_file, plan))
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in rows], indent=2))
        raise typer.Exit(1 if any(r.last_error for r in rows) else 0)
    header = ("NAME", "ISSUER", "CA", "EXPIRES", "DAYS", "CHALLENGE", "ORDERS/7D", "LAST ERROR", "NEXT TRY")
    table = [header] + [
        (
            r.name,
            r.issuer or "-",
            r.ca or "-",
            r.expires[:10] or "-",
            "-" if r.days_left is None else str(r.days_left),
            r.challenge,
            str(r.orders_7d),
            r.last_error or "-",
            r.next_try or "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    raise typer.Exit(1 if any(r.last_error for r in rows) else 0)


def _edge_log(plan: Plan, engine: Engine) -> str:
    """The edge's log, or "" when the engine cannot be asked (the store and the ledger still answer)."""
    from homelab.errors import HomelabError

    try:
        return engine.edge_log(plan)
    except HomelabError:
        return ""


@certs_app.command()
def check(
    config: ConfigOption = DEFAULT_CONFIG,
    address: Annotated[
        str | None, typer.Option("--address", help="This box's public IP (default: certs.public_address).")
    ] = None,
    nameserver: Annotated[
        str | None, typer.Option("--nameserver", help="Ask this DNS server (IP) instead of the system's.")
    ] = None,
    dns_port: Annotated[int, typer.Option("--dns-port", min=1, max=65535, help="The DNS server's port.")] = 53,
) -> None:
    """Preflight: names resolve to this box, CAA allows the CA, the challenge's port answers, clock."""
    from homelab.certs.preflight import Probe, run
    from homelab.cli.report import print_checks
    from homelab.config.loader import load
    from homelab.plan import build_plan

    checks = run(build_plan(load(config)), Probe(nameserver=nameserver, dns_port=dns_port, address=address))
    raise typer.Exit(print_checks(checks))
