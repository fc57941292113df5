"""`homelab images check`: does each image the config uses still have what its facts say?

For every image an enabled service runs (the pinned one, or the `images:` override), pull it when it is
not present locally, then run one `/bin/sh -c` probe in a throwaway container (`--entrypoint /bin/sh`,
no network): the uid:gid it runs as, the uid:gid of each named user its facts rely on, where each
program we call is on its PATH, whether each file we call or override exists, that the programs
its facts say are absent still are, and the owner of each folder its start-up works in (facts `owners`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from homelab.catalog import catalog_dir, entry
from homelab.errors import CommandFailed
from homelab.images.facts import ImageFacts, all_facts
from homelab.plan_model import Plan
from homelab.runtime.docker import Docker, describe_failure


@dataclass(frozen=True)
class Finding:
    what: str  # "user", "user rstudio" (a named user), "program wget", "file /init", "absent curl"
    expected: str
    found: str

    @property
    def ok(self) -> bool:
        return self.expected == self.found


@dataclass
class ImageReport:
    ref: str  # what the config runs
    facts: ImageFacts  # what it must provide (the pinned image's facts)
    services: list[str]
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # pull or probe failure

    @property
    def ok(self) -> bool:
        return self.error is None and all(f.ok for f in self.findings)


def pinned_images() -> dict[str, str]:
    """catalog service name -> the image the catalog pins for it."""
    return {
        service: spec.image
        for path in sorted(catalog_dir().glob("*.yaml"))
        for service, spec in entry(path.stem).services.items()
    }


def images_in_use(plan: Plan) -> list[ImageReport]:
    """One report (still empty) per (image reference, facts) the plan runs; built images are skipped."""
    pinned, facts = pinned_images(), all_facts()
    reports: dict[tuple[str, str], ImageReport] = {}
    for stack in plan.stacks.values():
        for service in stack.services.values():
            image_facts = facts[pinned[service.name]]
            if image_facts.built:
                continue
            key = (service.image, image_facts.name)
            reports.setdefault(key, ImageReport(service.image, image_facts, [])).services.append(service.name)
    return list(reports.values())


def probe_script(facts: ImageFacts) -> str:
    """Prints `user U:G`, `named NAME U:G|-:-`, then `program NAME PATH|-`, `file PATH yes|no`, `owner PATH
    U:G|missing`, one per line."""
    # PATH searched by hand, not with `command -v`: a shell that runs its own applets (busybox built
    # with FEATURE_SH_STANDALONE) answers for programs that are not there
    lines = [
        'echo "user $(id -u):$(id -g)"',
        'on_path() { IFS=:; for d in $PATH; do if [ -x "$d/$1" ]; then echo "$d/$1"; unset IFS; return; fi; done; '
        "unset IFS; echo -; }",
    ]
    for name in sorted(facts.users):
        quoted = shlex.quote(name)
        lines.append(
            f'echo "named {name} $(id -u {quoted} 2>/dev/null || echo -):$(id -g {quoted} 2>/dev/null || echo -)"'
        )
    for name in sorted({*facts.programs, *facts.absent}):
        lines.append(f'echo "program {name} $(on_path {shlex.quote(name)})"')
    for path in sorted(facts.files):
        quoted = shlex.quote(path)
        lines.append(f'if [ -e {quoted} ]; then echo "file {path} yes"; else echo "file {path} no"; fi')
    for path in sorted(facts.owners):
        lines.append(f'echo "owner {path} $(stat -c %u:%g {shlex.quote(path)} 2>/dev/null || echo missing)"')
    return "\n".join(lines)


def read_probe(facts: ImageFacts, output: str) -> list[Finding]:
    seen: dict[str, str] = {}
    for line in output.splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.rpartition(" ") if kind != "user" else ("", "", rest)
        seen[f"{kind} {name}".strip()] = value.strip()
    findings = [Finding("user", facts.user.value, seen.get("user", "?"))]
    for name in sorted(facts.users):
        found = seen.get(f"named {name}", "?")
        findings.append(Finding(f"user {name}", facts.users[name].value, "missing" if "-" in found else found))
    on_path = {name: seen.get(f"program {name}", "?") for name in {*facts.programs, *facts.absent}}
    for name in sorted(facts.programs):
        found = on_path[name]
        findings.append(Finding(f"program {name}", "present", {"-": "missing", "?": "unknown"}.get(found, "present")))
    for name in sorted(facts.absent):
        found = on_path[name]
        findings.append(
            Finding(f"absent {name}", "absent", {"-": "absent", "?": "unknown"}.get(found, f"present ({found})"))
        )
    for path in sorted(facts.files):
        findings.append(Finding(f"file {path}", "yes", seen.get(f"file {path}", "?")))
    for path in sorted(facts.owners):  # the folders its start-up works in, as the image ships them
        findings.append(Finding(f"owner {path}", facts.owners[path].value, seen.get(f"owner {path}", "?")))
    return findings


def check_image(docker: Docker, report: ImageReport, local: set[str]) -> ImageReport:
    if report.ref not in local:
        try:
            docker.pull(report.ref)
        except CommandFailed as exc:
            report.error = f"pull {report.ref} failed: {describe_failure(exc)}"
            return report
    proc = docker.run_script(report.ref, probe_script(report.facts))
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        report.error = f"probe of {report.ref} failed (exit {proc.returncode}): {last[-1] if last else 'no output'}"
        return report
    report.findings = read_probe(report.facts, proc.stdout)
    return report


def check_images(plan: Plan, docker: Docker) -> list[ImageReport]:
    reports = images_in_use(plan)
    local = set(docker.image_ids(r.ref for r in reports))
    return [check_image(docker, report, local) for report in reports]
