"""The `--addrport` of the commands that serve the API (`run_main`, `demo_auto_memory`):
parsed, and as the URL a client reaches."""

from django.core.management.base import CommandError


def addrport_parse(addrport: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[IPV6]:PORT` as (host, port); the host defaults to 127.0.0.1."""
    host, sep, port = addrport.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise CommandError(f"--addrport must be PORT or HOST:PORT, not {addrport!r}")
    return host, int(port)


def server_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def local_url(host: str, port: int) -> str:
    """The served address as a process on this host reaches it: a wildcard bind (0.0.0.0,
    ::) is reached on the loopback address."""
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}
    return server_url(wildcard.get(host, host), port)
