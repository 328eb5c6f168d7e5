"""Envoy's subset hint: which pods a data plane allows the picker to choose from.

The endpoint-picker protocol lets the data plane restrict the choice with filter
metadata `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset`, a list of
strings. Upstream's subset filter matches them by IP, whatever port they carry, and an
entry may be `ip:port`, `[ipv6]:port`, `[ipv6]`, a bare IPv4 or a bare IPv6 address
(several colons and no brackets: an address, not `host:port`). Read in one place, here,
for the director and the ext_proc picker alike.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Protocol

__all__ = ["hinted_hostports", "subset_addresses"]


class _Endpoint(Protocol):
    @property
    def address(self) -> str: ...
    @property
    def hostport(self) -> str: ...


def _canonical(address: str) -> str:
    """One spelling per IP (`fd00:0::1` and `FD00::1` are one address); names as given."""
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address


def subset_addresses(hint: Iterable[str]) -> frozenset[str]:
    """The IPs a subset hint allows, each in one canonical spelling."""
    out = set()
    for entry in hint:
        entry = entry.strip()
        if entry.startswith("["):
            address = entry[1 : entry.find("]")] if "]" in entry else entry[1:]
        elif entry.count(":") == 1:
            address = entry.split(":", 1)[0]
        else:
            address = entry
        if address:
            out.add(_canonical(address))
    return frozenset(out)


def hinted_hostports(
    hint: Iterable[str] | None, endpoints: Iterable[_Endpoint]
) -> list[str] | None:
    """The `address:port` of every endpoint whose IP the hint names (None: no hint)."""
    if hint is None:
        return None
    allowed = subset_addresses(hint)
    return [e.hostport for e in endpoints if _canonical(e.address) in allowed]
