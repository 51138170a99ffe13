"""The Xids the NVIDIA driver wrote to the kernel log ("NVRM: Xid (PCI:0000:9b:00): 119, pid=...,
..."), read from `dmesg` or `journalctl -k` output. Pure: a recorded kernel log tests it
(tests/fixtures/health). Which Xids make a host unhealthy is the catalog's
(manifests/health.yaml), after NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors).
"""

from __future__ import annotations

import re

from kit.host.health import XidEvent

# The driver's format: "NVRM: Xid (PCI:<domain>:<bus>:<device>[ GPU-I:..]): <xid>, ...", after
# whatever timestamp the reader prints (dmesg -T's "[Sun Feb 23 16:24:18 2025]", journalctl's).
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)[^)]*\): (\d+)\b")


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Every Xid line of the log, in order."""
    events = []
    for line in text.splitlines():
        match = XID_LINE.search(line)
        if match:
            events.append(XidEvent(xid=int(match.group(2)), pci=match.group(1).lower(), line=line.strip()[:400]))
    return events
