"""Files of the services on the nodes where they run (engine: swarm): prepared and read there.

The manager's folders are not the edge node's or the storage node's: a bind source that exists only on
the manager gets the edge's task rejected ("bind source path does not exist"). So what a service mounts
(its dataset folders, acme.json) is prepared on the node its placement chooses, by a one-shot task there
(runtime/swarm.py `run_job`) that runs the edge's image (Traefik's or NGINX's: a shell and the usual
programs, which an app's image may lack) with the node's / mounted. Reading works the same way: the
edge's acme.json is read on the edge node for `status`, `certs` and the rate-limit guard, its private
keys blanked before it leaves the node.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from homelab.engine.host import AcmeState, Needed, acme_state, mounted_by, needed
from homelab.errors import CommandFailed, NodeDown
from homelab.layout import EDGE_STACK
from homelab.plan_model import Plan
from homelab.render.swarm_stack import placement
from homelab.runtime.swarm import JOB_ROOT, Node, Swarm

JOB_TIMEOUT = 120  # a job waits for its node like any task (an image already there: seconds)
READ_TIMEOUT = 30  # `status` and `certs` do not hang on an edge node that is down
CREATED = "created "  # how the job's script reports what it made
REFUSED = "refused: "  # how it reports something else standing where a file must go


def prepare_on_nodes(
    plan: Plan,
    stacks: Iterable[str],
    swarm: Swarm,
    *,
    zfs_datasets: set[str],
    progress: Callable[[str], None],
    timeout: float = JOB_TIMEOUT,
) -> list[str]:
    """Create the stacks' missing bind sources on the nodes that mount them: one job per placement
    (the same constraints); returns what the jobs created. A job no node starts in time is said and left:
    the services placed there cannot start either, and the deploy's gate names Swarm's reason for them.
    So is a job that fails there (the node's disk read-only, full...): the services' tasks are rejected,
    and Swarm's reason for that ("bind source path does not exist") is what `up` reports."""
    groups: dict[tuple[str, ...], list[Needed]] = {}
    for item in needed(plan, stacks, zfs_datasets=zfs_datasets):
        stack, name = item.service
        if not stack:
            continue  # nothing mounts it
        service = plan.stacks[stack].services[name]
        groups.setdefault(tuple(placement(plan, plan.stacks[stack], service)), []).append(item)
    created = []
    for index, (constraints, items) in enumerate(groups.items()):
        image = job_image(plan, items[0])
        try:
            out = swarm.run_job(f"homelab-prepare-{index}", image, constraints, script(items), timeout=timeout)
        except CommandFailed as exc:  # JobNotStarted too: no node took it in time
            if REFUSED in exc.stdout + exc.stderr:
                raise  # something else stands where a file must go: the owner removes it
            progress(f"cannot prepare {', '.join(str(i.path) for i in items)} on its node: {_why(exc)}")
            continue
        created += [line.removeprefix(CREATED) for line in out.splitlines() if line.startswith(CREATED)]
    return created


def _why(exc: CommandFailed) -> str:
    """The job's error, and the script's own words when it ran and failed (its output)."""
    said = " ".join(exc.stdout.split())
    return f"{exc.stderr}" + (f" ({said})" if said else "")


def job_image(plan: Plan, item: Needed) -> str:
    """The edge's image (the service publishing 80/443); the mounting service's when there is no edge."""
    edge = plan.stacks.get(EDGE_STACK)
    published = [s.image for s in edge.services.values() if s.ports] if edge else []
    stack, name = item.service
    return published[0] if published else plan.stacks[stack].services[name].image


def script(items: list[Needed]) -> str:
    """/bin/sh that makes each missing item under JOB_ROOT: folders 0750 owned by the dataset's uid:gid,
    acme.json an empty 0600 file (refused when something else stands there, as on the host)."""
    lines = ["set -e"]
    for item in items:
        path, shown = shlex.quote(f"{JOB_ROOT}{item.path}"), shlex.quote(str(item.path))
        if item.kind == "folder":
            made = f"mkdir -p -m 750 {path}; chown {item.uid}:{item.gid} {path}"
            lines.append(f"if [ ! -e {path} ]; then {made}; echo {CREATED}{shown}; fi")
            continue
        odd = f"[ -L {path} ] || {{ [ -e {path} ] && [ ! -f {path} ]; }}"
        lines.append(f"if {odd}; then echo {REFUSED}{shown} is not a regular file: remove it >&2; exit 3; fi")
        made = f"mkdir -p {shlex.quote(f'{JOB_ROOT}{item.path.parent}')}; (umask 077; : > {path})"
        lines.append(f"if [ ! -e {path} ]; then {made}; echo {CREATED}{shown}; fi")
        lines.append(f"chmod 600 {path}")
    return "\n".join(lines)


PRESENT = "present"  # the first line of a read job's output when the file is there
# acme.json's private keys (the account's and each certificate's) stay on the node: the readers need only
# the certificates, and the job's output passes through its log
BLANK_KEYS = r's/("(key|PrivateKey)"[[:space:]]*:[[:space:]]*)"[^"]*"/\1""/g'


def read_on_node(plan: Plan, swarm: Swarm, path: Path, *, timeout: float = READ_TIMEOUT) -> str | None:
    """The text of `path` on the node of the service that mounts its folder (its private keys blanked);
    None when it is not there. CommandFailed (an OSError for the readers) when the job cannot run."""
    out = _where_mounted(plan, swarm, path, read_script(path), timeout)
    return None if out is None else read_output(out)


def state_on_node(plan: Plan, swarm: Swarm, path: Path, *, timeout: float = READ_TIMEOUT) -> AcmeState:
    """acme.json's state (missing, not a file, its mode) on the node of the service that mounts its
    folder, as `acme_state` reads it on this host; here when no service mounts it. OSError when the job
    cannot run."""
    quoted = shlex.quote(f"{JOB_ROOT}{path}")
    odd = f"[ -L {quoted} ] || {{ [ -e {quoted} ] && [ ! -f {quoted} ]; }}"
    state = f"if {odd}; then echo not-a-file; elif [ -f {quoted} ]; then echo file $(stat -c %a {quoted}); "
    out = _where_mounted(plan, swarm, path, state + "else echo missing; fi", timeout)
    if out is None:
        return acme_state(path)
    kind, _, mode = (out.strip().splitlines() or ["missing"])[-1].partition(" ")
    if kind == "file":
        return AcmeState(path, "file", int(mode, 8))
    return AcmeState(path, "not-a-file" if kind == "not-a-file" else "missing")


def _where_mounted(plan: Plan, swarm: Swarm, path: Path, job: str, timeout: float) -> str | None:
    """The output of a job run on the node of the service that mounts `path`'s folder; None when no
    service mounts it."""
    stack, name = mounted_by(plan, str(path.parent))
    if not stack:
        return None
    service = plan.stacks[stack].services[name]
    item = Needed(path, "acme", service=(stack, name))
    constraints = placement(plan, plan.stacks[stack], service)
    fitting = [n for n in swarm.nodes() if _fits(n, constraints)]
    if fitting and not any(n.state == "ready" and n.availability == "active" for n in fitting):
        # said at once: a job there would wait out its timeout (`status` must not hang on a node that is down)
        states = ", ".join(f"node {n.hostname} is {n.state}, {n.availability}" for n in fitting)
        raise NodeDown(f"cannot read it on its node: {states}")
    try:
        return swarm.run_job("homelab-read", job_image(plan, item), constraints, job, timeout=timeout)
    except CommandFailed as exc:
        raise OSError(f"cannot read it on its node: {exc.stderr}") from None


def _fits(node: Node, constraints: list[str]) -> bool:
    """Whether the node meets the placement constraints homelab writes (`node.labels.<key> == <value>`,
    `node.role == <role>`); any other form is left to Swarm (taken as met)."""
    for constraint in constraints:
        key, op, value = [*constraint.split(), "", "", ""][:3]
        if key.startswith("node.labels."):
            found = node.labels.get(key.removeprefix("node.labels."), "")
        elif key == "node.role":
            found = node.role
        else:
            continue
        if (found == value) != (op == "=="):
            return False
    return True


def read_script(path: Path) -> str:
    """/bin/sh printing PRESENT and the file (keys blanked) in base64, nothing when it is not there."""
    quoted = shlex.quote(f"{JOB_ROOT}{path}")
    return f"[ -f {quoted} ] || exit 0; echo {PRESENT}; sed -E {shlex.quote(BLANK_KEYS)} {quoted} | base64"


def read_output(out: str) -> str | None:
    lines = out.splitlines()
    if not lines or lines[0] != PRESENT:
        return None
    return base64.b64decode("".join(lines[1:])).decode()
