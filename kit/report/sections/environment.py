"""The environment section: the host's fingerprint before and after the run and on each node, the
checks that say whether its numbers are comparable, and the kit and images that measured them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kit.host.environment import Check, drift, evaluate, load_expectations
from kit.host.fingerprint import Fingerprint, KitInfo
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.host_state import calibration_text, gpu_settings
from kit.theory.hardware import HardwareTable, load_hardware, peak_tflops


def machine(run: LoadedRun) -> str:
    return f"{run.hostname}: {run.measured.devices}"


def _facts_table(caption: str, facts: Sequence[tuple[str, str]]) -> Table:
    return Table(
        caption=caption,
        header=["", ""],
        widths=[25, 75],
        rows=[Row(cells=[Cell(text=key, tone="strong"), Cell(text=value)]) for key, value in facts],
    )


def _sentence(text: str | None) -> str:
    return (text or "not recorded")[:1].upper() + (text or "not recorded")[1:]


def _gib(n_bytes: int | None) -> str:
    return f"{n_bytes / 2**30:.0f} GiB" if n_bytes else "not recorded"


def fingerprint_facts(fingerprint: Fingerprint, hostname: str) -> list[tuple[str, str]]:
    """The facts of a fingerprint a reviewer compares machines by."""
    host, inventory = fingerprint.host, fingerprint.gpus
    cpu = host.cpu
    names = Counter(gpu.name or "unknown model" for gpu in inventory.gpus)
    gpus = (
        ", ".join(f"{count} × {name}" for name, count in names.items())
        or f"none ({inventory.unavailable or 'not listed'})"
    )
    topology = fingerprint.topology
    runtime = fingerprint.container_runtime
    return [
        (
            "Collected (UTC)",
            f"{fingerprint.collected_at:%Y-%m-%d %H:%M:%S}"
            + (" (identifiers redacted)" if fingerprint.redacted else ""),
        ),
        ("Host name", hostname),
        ("Operating system, kernel", f"{host.os or 'not recorded'}, {host.kernel or 'not recorded'}"),
        (
            "CPU",
            f"{cpu.model or 'not recorded'}; {cpu.sockets or '?'} sockets, {cpu.physical_cores or '?'} cores, "
            f"{cpu.logical_cpus or '?'} logical CPUs; governor {cpu.frequency_governor or 'not recorded'}",
        ),
        ("Host memory, NUMA nodes", f"{_gib(host.memory_bytes)}, {host.numa_nodes or 'not recorded'}"),
        ("GPUs", gpus),
        (
            "Driver, CUDA (driver)",
            f"{inventory.driver_version or 'not recorded'}, {inventory.cuda_driver_version or 'not recorded'}",
        ),
        (
            "GPU topology",
            topology.topology_class.label
            if topology.topology_class
            else f"not recorded ({topology.unavailable or 'no matrix'})",
        ),
        (
            "RDMA ports",
            ", ".join(
                f"{p.device}/{p.port} {p.state or '?'} {p.rate or ''}".strip() for p in fingerprint.network.rdma_ports
            )
            or f"none ({fingerprint.network.unavailable or 'none listed'})",
        ),
        (
            "Container runtime",
            f"docker {runtime.docker_server_version or 'not found'}; NVIDIA toolkit "
            f"{runtime.nvidia_container_toolkit or 'not found'}",
        ),
        (
            "NCCL variables of the kit",
            ", ".join(f"{key}={value}" for key, value in fingerprint.nccl_environment.items())
            or "none (a variant's own are in its case)",
        ),
        ("GPU power limit, application clocks (graphics / memory)", gpu_settings(fingerprint) or "no GPU or not read"),
    ]


# Facts every fingerprint has that differ between any two fingerprints, whatever the nodes.
PER_RUN_FACTS = ("Collected (UTC)", "Host name")


def differing_facts(facts: dict[str, dict[str, str]]) -> tuple[list[Row], list[str]]:
    """Node -> its facts, compared: a row for each value of each fact that is not the same on
    every node (the fact, the value, the nodes that have it); and the facts the same everywhere."""
    aspects = list(dict.fromkeys(key for found in facts.values() for key in found))
    rows, equal = [], []
    for aspect in aspects:
        values: dict[str, list[str]] = {}
        for name, found in facts.items():
            values.setdefault(found.get(aspect, "not recorded"), []).append(name)
        if len(values) == 1:
            equal.append(aspect)
            continue
        for index, (value, names) in enumerate(values.items()):
            rows.append(
                Row(
                    cells=[
                        Cell(text=aspect if index == 0 else "", tone="strong"),
                        Cell(text=value, tone="bad"),
                        Cell(text=", ".join(names)),
                    ]
                )
            )
    return rows, equal


def node_fingerprint_facts(fingerprints: dict[str, Fingerprint]) -> dict[str, dict[str, str]]:
    """Each node's fingerprint facts, less those that differ for every fingerprint (its time,
    its host name), plus the kernel and the frameworks of the Python it ran (a node's own)."""
    facts = {}
    for node, fingerprint in fingerprints.items():
        found = {key: value for key, value in fingerprint_facts(fingerprint, node) if key not in PER_RUN_FACTS}
        found["Kit (source SHA-256)"] = fingerprint.kit.source_sha256 or "not recorded"
        probe = fingerprint.image
        if probe is not None:
            found["Python, torch, NCCL"] = f"{probe.python}, {probe.torch or 'none'}, {probe.nccl or 'none'}"
        facts[node] = found
    return facts


def node_fingerprints_section(run: LoadedRun) -> Section | None:
    """Slurm: every node a job ran on, as it fingerprinted itself, and each fact that is not the
    same on every node; None for a run that ran no job on a node (one host: its fingerprint is
    the environment section's)."""
    if not run.nodes:
        return None
    section = Section(anchor="node-fingerprints", title="Fingerprints of the nodes")
    taken = {node: loaded.fingerprint for node, loaded in run.nodes.items() if loaded.fingerprint is not None}
    missing = {node: loaded.missing for node, loaded in run.nodes.items() if loaded.fingerprint is None}
    section.paragraphs.append(
        f"The run's jobs ran on {len(run.nodes)} node(s): {', '.join(run.nodes)}. Each fingerprinted itself from inside a "
        "Slurm job (fingerprints/<node>.json); the fingerprint of the environment section is of the host kit ran on."
    )
    section.tables.append(
        Table(
            caption="Each node as it fingerprinted itself",
            header=["Node", "GPUs", "Driver", "Kernel", "RDMA ports"],
            widths=[14, 30, 14, 20, 22],
            rows=[
                Row(cells=[Cell(text=node, tone="strong"), *(Cell(text=value) for value in _node_row(fingerprint))])
                for node, fingerprint in taken.items()
            ],
        )
    )
    if missing:
        section.paragraphs.append(
            "Without a fingerprint: " + "; ".join(f"{node}: {why}" for node, why in missing.items()) + "."
        )
    if len(taken) < 2:
        return section
    rows, equal = differing_facts(node_fingerprint_facts(taken))
    if rows:
        section.tables.append(
            Table(
                caption="Facts that differ between the nodes",
                header=["Fact", "Value", "Nodes"],
                widths=[25, 50, 25],
                rows=rows,
            )
        )
    else:
        section.paragraphs.append("The nodes' fingerprints agree on every fact compared.")
    section.paragraphs.append(f"The same on every node: {', '.join(equal) or 'nothing'}.")
    return section


def _node_row(fingerprint: Fingerprint) -> list[str]:
    facts = dict(fingerprint_facts(fingerprint, ""))
    return [
        facts["GPUs"],
        fingerprint.gpus.driver_version or "not recorded",
        fingerprint.host.kernel or "not recorded",
        facts["RDMA ports"],
    ]


def peak_figures(gpu_names: Sequence[str], hardware: HardwareTable) -> str:
    """What manifests/hardware.yaml gives each GPU model for the figures derived from vendor peaks
    (MFU, roofline and link bounds), so that a GPU it lacks is named rather than silently skipped."""
    described = []
    for name in sorted(set(gpu_names)):
        spec = hardware.lookup(name)
        if spec is None:
            described.append(f"{name}: no peak figures: MFU and bounds not computed")
            continue
        peaks = [f"{dtype.upper()} {value:g}" for dtype in ("bf16", "fp16") if (value := peak_tflops(spec, dtype))]
        bandwidth = spec.memory_bandwidth_tb_per_s.value
        figures = [f"{' / '.join(peaks)} TFLOPS dense" if peaks else "no tensor peak: MFU not computed"] + [
            f"{bandwidth:g} TB/s" if bandwidth else "no memory bandwidth: bounds not computed"
        ]
        described.append(f"{name}: {spec.model}, {', '.join(figures)}")
    return "; ".join(described)


def framework_versions(run: LoadedRun) -> dict[str, Counter]:
    """Each package's versions as the workloads reported them, counted over every process of every run."""
    versions: dict[str, Counter] = {}
    for result in run.results.values():
        for sample in result.samples:
            for rank in sample.ranks:
                for package, version in rank.versions.items():
                    versions.setdefault(package, Counter())[version] += 1
    return versions


ARCHIVE = "not a source checkout"  # kit.host.kit_source.kit_info's reason where the kit has no .git beside it


def kit_commit(kit: KitInfo) -> str:
    """The kit's commit, or why it is not recorded: a kit installed from an archive has no git."""
    if kit.git_commit:
        return f"commit {kit.git_commit}"
    why = kit.unreadable.get("git_commit", "no reason given")
    if why.startswith(ARCHIVE):  # "not a source checkout (no .git in DIR)"
        return f"commit not recorded (installed from an archive, {why.removeprefix(ARCHIVE).strip(' ()')})"
    return f"commit not recorded ({why})"


def kit_identity(kit: KitInfo) -> str:
    """Version, commit (or why none) and whether the checkout was clean."""
    checkout = {True: ", with uncommitted changes (dirty checkout)", False: ", clean checkout", None: ""}[kit.dirty]
    return f"{kit.version}, {kit_commit(kit)}{checkout}"


def kit_provenance(kit: KitInfo) -> tuple[str, str]:
    """The kit that measured as a reviewer traces it, and pass, warn or fail: pass with its commit
    from a clean checkout and the digest of its source; warn where the commit is not recorded or
    the checkout had changes; fail where neither commit nor source digest says what code it was."""
    source = f"source SHA-256 {kit.source_sha256[:12]}…" if kit.source_sha256 else "source digest not recorded"
    text = f"kit {kit_identity(kit)}; {source}"
    if not kit.git_commit and not kit.source_sha256:
        return text, "fail"
    return text, "pass" if kit.git_commit and kit.dirty is False and kit.source_sha256 else "warn"


def host_checks(run: LoadedRun) -> tuple[list[Check], str]:
    """The host's checks as the run recorded them before it started, else evaluated now on its
    fingerprint (empty without one), and which of the two they are."""
    info, fingerprint = run.info, run.before.fingerprint
    if info.checks:
        return list(info.checks), "as the run recorded them before it started"
    if fingerprint is None:
        return [], "not recorded"
    expected = max((case.gpus for case in info.plan.cases), default=None) if info.plan.device == "cuda" else None
    return evaluate(fingerprint, load_expectations(), expected), "evaluated now on fingerprint.json"


def environment_section(run: LoadedRun) -> Section:
    """run.json's host, the framework versions, and the fingerprints before and after the run."""
    info = run.info
    recorded = Section(
        anchor="run-host",
        title="The run as run.json records it",
        tables=[
            _facts_table(
                "Host and kit",
                [
                    ("Host name", run.hostname + (" (redacted)" if run.hostname.startswith("redacted-") else "")),
                    ("Operating system", info.host.os or "not recorded"),
                    ("Python (host)", info.host.python or "not recorded"),
                    ("Devices", run.measured.devices),
                    *(
                        [
                            (
                                "Peak figures (manifests/hardware.yaml)",
                                peak_figures(run.measured.gpu_names, load_hardware()),
                            )
                        ]
                        if run.measured.gpu_names
                        else []
                    ),
                    ("Executor", info.executor),
                    ("Command", " ".join(info.argv)),
                    ("Kit", kit_identity(info.kit)),
                    (
                        "Measuring code (SHA-256)",
                        f"{info.kit.workload_sources_sha256} (the workloads and the stages' metric code: "
                        f"{len(info.kit.workload_files)} files)",
                    ),
                    ("Kit source (SHA-256)", info.kit.source_sha256 or "not recorded"),
                    (
                        "Manifests (SHA-256)",
                        "; ".join(f"{name} {digest[:16]}…" for name, digest in info.kit.manifests_sha256.items())
                        or "not recorded",
                    ),
                    *[
                        (f"Changes accepted on resume ({accepted.at})", "; ".join(accepted.files))
                        for accepted in info.accepted_changes
                    ],
                ],
            )
        ],
    )
    versions = framework_versions(run)
    if versions:
        recorded.tables.append(
            Table(
                caption="Framework versions the workloads reported (every process of every run)",
                header=["Package", "Version"],
                widths=[30, 70],
                rows=[
                    Row(
                        cells=[
                            Cell(text=package),
                            Cell(text=", ".join(sorted(found)), tone="plain" if len(found) == 1 else "warn"),
                        ]
                    )
                    for package, found in sorted(versions.items())
                ],
                notes=[
                    "Marked: more than one version of the package in this run, so its cases did not all run the "
                    "same software."
                ]
                if any(len(found) > 1 for found in versions.values())
                else [],
            )
        )
    before = Section(anchor="fingerprint-before", title="Fingerprint before the run")
    fingerprint = run.before.fingerprint
    if fingerprint is None:
        before.not_run = (
            f"{_sentence(run.before.missing)}: host checks and the comparability of this run with others cannot "
            "be established from it."
        )
    else:
        # What the preflight measured is a measurement, not a setting: kept out of the facts nodes are compared by.
        calibration = (
            calibration_text(fingerprint.calibration)
            if fingerprint.calibration
            else "not measured (no preflight calibration is in this fingerprint)"
        )
        before.tables.append(
            _facts_table(
                "The host as fingerprinted",
                [*fingerprint_facts(fingerprint, run.hostname), ("Calibration (preflight)", calibration)],
            )
        )
        checks, origin = host_checks(run)
        tones = {"pass": "good", "warn": "warn", "fail": "bad", "skip": "muted"}
        before.tables.append(
            Table(
                caption=f"Host checks, {origin}",
                header=["Check", "Result", "Observed", "Expected"],
                widths=[22, 8, 40, 30],
                rows=[
                    Row(
                        cells=[
                            Cell(text=c.name),
                            Cell(text=c.status, tone=tones[c.status]),
                            Cell(text=c.observed),
                            Cell(text=c.expected),
                        ]
                    )
                    for c in checks
                ],
            )
        )
        if info.forced:
            before.paragraphs.append("The run was started with --force despite failing checks.")
    after = Section(anchor="fingerprint-after", title="Fingerprint after the run")
    if run.after.fingerprint is None:
        after.not_run = f"{_sentence(run.after.missing)}: drift during the run is not checked."
    elif fingerprint is None:
        after.not_run = "Recorded, but without the fingerprint before the run there is nothing to compare it with."
    else:
        # The findings run.json recorded name GPUs by UUID; a redacted report recomputes them from
        # the redacted fingerprints (drift is a pure function of the two).
        findings = drift(fingerprint, run.after.fingerprint) if run.redacted or not info.findings else info.findings
        if findings:
            after.tables.append(
                Table(
                    caption="What changed between the fingerprints before and after the run",
                    header=["Finding", "Severity", "GPU", "Detail"],
                    widths=[22, 10, 20, 48],
                    rows=[
                        Row(
                            cells=[
                                Cell(text=f.kind),
                                Cell(text=f.severity, tone="bad" if f.severity == "fail" else "warn"),
                                Cell(text=f.gpu or "host"),
                                Cell(text=f.detail),
                            ]
                        )
                        for f in findings
                    ],
                )
            )
        else:
            after.paragraphs.append(
                "No driver, GPU, ECC, clock-limit or process change from the fingerprint before it."
            )
    from kit.report.sections.timing import timing_section

    return Section(
        anchor="environment",
        title="Environment and fingerprint checks",
        subsections=[recorded, before, after, timing_section(run)],
    )
