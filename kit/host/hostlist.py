"""Slurm's compact node lists (`gpu[01-03,07],cpu1`), read where Slurm may not be: the executor
that submits jobs, and a report that names (or redacts) the nodes a run's jobs ran on.
"""

from __future__ import annotations

import re


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compact node list as node names, as `scontrol show hostnames` writes them, without
    asking Slurm (a report is read where there is none): `gpu[01-03,07],cpu1` ->
    gpu01 gpu02 gpu03 gpu07 cpu1; a range keeps its start's zero padding."""
    names: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", hostlist):
        bracket = re.search(r"\[([^\]]*)\]", item)
        if bracket is None:
            names.append(item)
            continue
        head, tail = item[: bracket.start()], item[bracket.end() :]
        for part in bracket.group(1).split(","):
            start, _, end = part.partition("-")
            for number in range(int(start), int(end or start) + 1):
                names += [f"{head}{number:0{len(start)}d}{rest}" for rest in expand_hostlist(tail) or [""]]
    return names
