"""Every Slurm node a run's jobs ran on, fingerprinted on the node itself.

The run's own fingerprint (fingerprint.json) is of the host kit runs on, which under Slurm is the
submitting host, not where the numbers were measured. So each compute node fingerprints itself
from inside a job: `python -m kit.execute.node_fingerprint FOLDER` as one srun task per node
writes FOLDER/<node>.json (atomically; FOLDER/<token>.json in a redacted run, node_token). The
shared-run-dir check job at the start runs it on the nodes it lands on
(kit.execute.slurm_script.check_script); nodes a case's job ran on that have no fingerprint yet
get one from a small job pinned to them once the cases are done
(kit.execute.slurm.fingerprint_missing_nodes). run.json names each file
(RunInfo.node_fingerprints); the evidence (SHA256SUMS) covers them like every other file of the run.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from kit.rundir.directory import NODE_FINGERPRINTS, atomic_write_model
from kit.workloads.srun_rank import node_name


def node_token(node: str) -> str:
    """A node's name as a redacted run writes it: its salted token (kit.rundir.redact), the same in
    every file of the run; a name that is a token already stays as it is."""
    from kit.host.redaction_tokens import redaction_salt, redaction_token

    return node if node.startswith("redacted-") else redaction_token(node, redaction_salt())


def fingerprint_step(python: str, folder: Path, redact: bool) -> str:
    """The srun line of a job that fingerprints each of its nodes into `folder`; a node where it
    fails says so in the job's output and leaves no file (the report then names it as missing)."""
    command = [python, "-m", "kit.execute.node_fingerprint", str(folder), *(["--redact"] if redact else [])]
    return f'srun {shlex.join(command)} || echo "kit: a node could not fingerprint itself (see above)"'


def fingerprinted(run_root: Path) -> dict[str, str]:
    """Node -> its fingerprint file, relative to the run directory (as run.json keeps them)."""
    folder = run_root / NODE_FINGERPRINTS
    return (
        {path.stem: f"{NODE_FINGERPRINTS}/{path.name}" for path in sorted(folder.glob("*.json"))}
        if folder.is_dir()
        else {}
    )


def main(argv: list[str] | None = None) -> None:
    from kit.host.collection import collect
    from kit.host.probe_cache import probe_this_python

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python -m kit.execute.node_fingerprint FOLDER [--redact] (as one srun task per node)")
    redact = "--redact" in argv[1:]
    path = Path(argv[0]) / f"{node_token(node_name()) if redact else node_name()}.json"
    # the frameworks of this Python, which the ranks of a job without containers run on this node
    atomic_write_model(path, collect(redact=redact, image_probe=probe_this_python()))
    print(f"kit: fingerprint of {path.stem} in {path}")


if __name__ == "__main__":
    main()
