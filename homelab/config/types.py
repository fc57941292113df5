"""Reusable field types of the config model: each refuses what its consumer (a config file, a command
line, a mount) cannot take, with a message naming the value and the expected form."""

from __future__ import annotations

import ipaddress
import posixpath
import re
import zoneinfo
from typing import Annotated

from pydantic import AfterValidator, Field

from homelab.config import oncalendar

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOSTNAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})+$")
_DATASET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*(/[A-Za-z0-9][A-Za-z0-9_.:-]*)*$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_IMAGE_RE = re.compile(
    r"^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._/-][a-z0-9]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)


def _numeric_top(value: str) -> bool:
    """An IP address literal or a name ending in an all-digit label: no top-level domain is all digits
    (RFC 3696 2), so `192.168.1.1` or `10.0.0.300` where a name goes would render a route nothing matches."""
    return "." in value and value.rsplit(".", 1)[1].isdigit()


def _hostname(value: str) -> str:
    if len(value) > 253 or not _HOSTNAME_RE.match(value):
        raise ValueError(f"{value!r} is not a valid hostname (lowercase letters, digits, '-', dots)")
    if _numeric_top(value):
        raise ValueError(f"{value!r} looks like an IP address, not a host name")
    return value


def _host_port(value: str) -> str:
    host, _, port = value.partition(":")
    _address(host)  # an update server may be named by its address (a LAN dyndns2 server, a test's 127.0.0.1)
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{value!r}: the port after ':' must be a number from 1 to 65535")
    return value


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 address") from None


def _address(value: str) -> str:
    try:
        return _ip(value)
    except ValueError:
        return _hostname(value)


def _domain(value: str) -> str:
    if len(value) > 253 or not _DOMAIN_RE.match(value):
        raise ValueError(f"{value!r} is not a valid domain name (e.g. example.com)")
    if _numeric_top(value):
        raise ValueError(f"{value!r} is an IP address, not a domain name (e.g. example.com)")
    return value


def _subdomain(value: str) -> str:
    if not re.fullmatch(_LABEL, value):
        raise ValueError(f"{value!r} is not a valid subdomain label (lowercase letters, digits, '-')")
    return value


def _dataset(value: str) -> str:
    if not _DATASET_RE.match(value):
        raise ValueError(f"{value!r} is not a valid ZFS dataset name (e.g. tank/apps)")
    return value


def _email(value: str) -> str:
    if not _EMAIL_RE.match(value):
        raise ValueError(f"{value!r} is not an email address")
    return value


def _cidr(value: str) -> str:
    if "%" in value:  # fe80::%eth0/64: a zone id names an interface of one host; no allow list takes it
        raise ValueError(f"{value!r} has an IPv6 zone id ('%...'); write the network without it")
    try:
        return str(ipaddress.ip_network(value))
    except ValueError:
        pass
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP network in CIDR form (e.g. 192.168.1.0/24)") from None
    # 192.168.1.5/24 is an address on a network, not a network: a silent rewrite could widen an allow list
    raise ValueError(f"{value!r} has host bits set; the network is {str(network)!r}")


def _image(value: str) -> str:
    if not _IMAGE_RE.match(value):
        raise ValueError(f"{value!r} is not an image reference (e.g. traefik:v3.7.15)")
    return value


def _timezone(value: str) -> str:
    known = re.fullmatch(r"[A-Za-z_]+(/[A-Za-z0-9_+-]+)*", value) is not None
    if known:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            known = False
    if not known:
        raise ValueError(f"{value!r} is not in the tz database (e.g. Europe/Berlin, America/New_York, UTC)")
    return value


def _absolute(value: str) -> str:
    """An absolute path, normalised (`/tank//apps/` -> `/tank/apps`); `..` is refused, since a path
    that climbs out of where it seems to point (`/tank/../etc`) is a mistake or an attack."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} contains '..'; write the path it means")
    normal = posixpath.normpath(value)
    if normal == "/" or normal.startswith("//"):
        raise ValueError(f"{value!r} is not a usable folder (the root of the file system)")
    return normal


# Kernel file systems and run-time folders: a dataset mounted there hides them or vanishes at reboot
PSEUDO_FOLDERS = ("/proc", "/sys", "/dev", "/run", "/var/run")


def _data_folder(value: str) -> str:
    path = _absolute(value)
    pseudo = next((p for p in PSEUDO_FOLDERS if path == p or path.startswith(p + "/")), None)
    if pseudo is not None:
        raise ValueError(f"{value!r} is under {pseudo}, a kernel or run-time file system; use a folder on disk")
    return path


def _device(value: str) -> str:
    path = _absolute(value) if value.startswith("/") else value
    if not path.startswith("/dev/"):
        raise ValueError(f"{value!r} is not a device path under /dev (e.g. /dev/dri)")
    return path


def _url(value: str) -> str:
    if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~:/?#@!$&*+,;=%-]*)?", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


def _word(pattern: str, what: str) -> AfterValidator:
    """A string that must match `pattern` whole: names that land unquoted in config files."""

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


def _oncalendar(value: str) -> str:
    spec = oncalendar.spec_of(value)
    if spec is None:
        raise ValueError(f"{value!r} is not a systemd OnCalendar expression {oncalendar.EXAMPLE}")
    if oncalendar.next_elapse(spec, oncalendar.now_in(spec)) is None:  # the timer would load and never run
        raise ValueError(
            f"{value!r} never fires: no time from now on matches it (a past date, or a day its month lacks)"
        )
    return value


Hostname = Annotated[str, AfterValidator(_hostname)]
HostPort = Annotated[str, AfterValidator(_host_port)]
Address = Annotated[str, AfterValidator(_address)]
IpAddress = Annotated[str, AfterValidator(_ip)]  # not pydantic's IPvAnyAddress: its module imports importlib.metadata
DomainName = Annotated[str, AfterValidator(_domain)]
Subdomain = Annotated[str, AfterValidator(_subdomain)]
DatasetName = Annotated[str, AfterValidator(_dataset)]
Email = Annotated[str, AfterValidator(_email)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Image = Annotated[str, AfterValidator(_image)]
Timezone = Annotated[str, AfterValidator(_timezone)]
OnCalendar = Annotated[str, AfterValidator(_oncalendar)]
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
# A folder that holds data: absolute and on a real disk (not /proc, /sys, /run, ...)
DataFolder = Annotated[str, AfterValidator(_data_folder)]
DevicePath = Annotated[str, AfterValidator(_device)]
Url = Annotated[str, AfterValidator(_url)]
# Names written unquoted into ddclient.conf, rclone.conf, env files and mount targets
Login = Annotated[str, _word(r"[A-Za-z0-9_.@+-]{1,128}", "a login (letters, digits and _ . @ + -)")]
EnvName = Annotated[str, _word(r"[A-Z][A-Z0-9_]{0,127}", "an environment variable name (e.g. CF_DNS_API_TOKEN)")]
OptionName = Annotated[str, _word(r"[a-z][a-z0-9_]{0,63}", "an rclone option name (e.g. account)")]
BackendName = Annotated[str, _word(r"[a-z][a-z0-9]{0,31}", "an rclone backend type (e.g. b2, s3, sftp)")]
ProviderName = Annotated[str, _word(r"[a-z][a-z0-9.]{0,31}", "a lego DNS provider code (e.g. cloudflare)")]
ZfsProperty = Annotated[str, _word(r"[a-z][a-z0-9_.:-]{0,255}", "a ZFS property name (e.g. recordsize)")]
MediaName = Annotated[str, _word(r"[a-z0-9][a-z0-9_-]{0,62}", "a folder name for /data/<name> (a-z, 0-9, - and _)")]
DiskName = Annotated[str, _word(r"[a-z][a-z0-9]{1,31}", "a disk name as in /dev (e.g. sda, nvme0n1)")]
GroupName = Annotated[str, _word(r"[a-z][a-z0-9_-]{0,63}", "a group name (a-z, 0-9, - and _; a letter first)")]
# strict: YAML `true` would be port 1 and "0080" a string; a number is written as a number
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
Id = Annotated[int, Field(ge=0, le=2**31 - 1)]
# A path to a file holding one secret, relative to homelab.yaml. Checked at load: exists, not world-readable.
SecretFile = Annotated[str, Field(min_length=1, json_schema_extra={"secret_file": True})]
