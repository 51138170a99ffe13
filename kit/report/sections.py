"""The sections around the stages: environment, reference claims, A/B comparisons, deviations,
the executive summary and the appendix."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel

from kit.environment import Check, comparable, drift, evaluate, load_expectations
from kit.expectation import ClaimExpectation, RelationExpectation, expectation_counts
from kit.fingerprint import Fingerprint, KitInfo
from kit.hardware import HardwareTable, load_hardware, peak_tflops
from kit.protocol import Case, Protocol
from kit.reference import (
    MIN_RUNS,
    SPREAD_FACTOR,
    ClaimOutcome,
    MeasuredRun,
    Reference,
    RelationOutcome,
    TableComparison,
    format_value,
    metric_label,
    reference_path,
    verdict_counts,
)
from kit.report import charts
from kit.report.cells import (
    STATUS_TONES,
    VERDICT_TONES,
    has_metrics,
    mean_std,
    method_label,
    signature_cell,
    status_cell,
)
from kit.report.evidence import evidence_groups
from kit.report.host_state import calibration_text, gpu_settings
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Chart, Row, Section, Table, Tone, printed_if_short
from kit.report.ranking import KINDS, method_kind, standing
from kit.report.stats import SIGNIFICANCE_LEVEL, WelchTest, welch_t_test

AB_METRICS = ("tokens_per_s", "peak_memory_gib")


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
            rows.append(Row(cells=[Cell(text=aspect if index == 0 else "", tone="strong"), Cell(text=value, tone="bad"),
                                   Cell(text=", ".join(names))]))  # fmt: skip
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
    section.tables.append(Table(
        caption="Each node as it fingerprinted itself",
        header=["Node", "GPUs", "Driver", "Kernel", "RDMA ports"],
        widths=[14, 30, 14, 20, 22],
        rows=[Row(cells=[Cell(text=node, tone="strong"), *(Cell(text=value) for value in _node_row(fingerprint))])
              for node, fingerprint in taken.items()],
    ))  # fmt: skip
    if missing:
        section.paragraphs.append("Without a fingerprint: " + "; ".join(f"{node}: {why}" for node, why in missing.items()) + ".")
    if len(taken) < 2:
        return section
    rows, equal = differing_facts(node_fingerprint_facts(taken))
    if rows:
        section.tables.append(Table(caption="Facts that differ between the nodes", header=["Fact", "Value", "Nodes"],
                                    widths=[25, 50, 25], rows=rows))  # fmt: skip
    else:
        section.paragraphs.append("The nodes' fingerprints agree on every fact compared.")
    section.paragraphs.append(f"The same on every node: {', '.join(equal) or 'nothing'}.")
    return section


def _node_row(fingerprint: Fingerprint) -> list[str]:
    facts = dict(fingerprint_facts(fingerprint, ""))
    return [facts["GPUs"], fingerprint.gpus.driver_version or "not recorded", fingerprint.host.kernel or "not recorded",
            facts["RDMA ports"]]  # fmt: skip


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
        figures = (
            [f"{' / '.join(peaks)} TFLOPS dense" if peaks else "no tensor peak: MFU not computed"]
            + [f"{bandwidth:g} TB/s" if bandwidth else "no memory bandwidth: bounds not computed"]
        )
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


ARCHIVE = "not a source checkout"  # kit.fingerprint.kit_info's reason where the kit has no .git beside it


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
                    ("Operating system", str(info.host.get("os") or "not recorded")),
                    ("Python (host)", str(info.host.get("python") or "not recorded")),
                    ("Devices", run.measured.devices),
                    *([("Peak figures (manifests/hardware.yaml)", peak_figures(run.measured.gpu_names, load_hardware()))]
                      if run.measured.gpu_names else []),  # fmt: skip
                    ("Executor", info.executor),
                    ("Command", " ".join(info.argv)),
                    ("Kit", kit_identity(info.kit)),
                    ("Measuring code (SHA-256)", f"{info.kit.workload_sources_sha256} (the workloads and the stages' metric code: "
                                                 f"{len(info.kit.workload_files)} files)"),  # fmt: skip
                    ("Kit source (SHA-256)", info.kit.source_sha256 or "not recorded"),
                    ("Manifests (SHA-256)", "; ".join(f"{name} {digest[:16]}…" for name, digest in info.kit.manifests_sha256.items())
                     or "not recorded"),  # fmt: skip
                    *[(f"Changes accepted on resume ({accepted.at})", "; ".join(accepted.files))
                      for accepted in info.accepted_changes],  # fmt: skip
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
        calibration = (calibration_text(fingerprint.calibration) if fingerprint.calibration
                       else "not measured (no preflight calibration is in this fingerprint)")  # fmt: skip
        before.tables.append(_facts_table("The host as fingerprinted", [*fingerprint_facts(fingerprint, run.hostname),
                                                                         ("Calibration (preflight)", calibration)]))  # fmt: skip
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
                            Cell(text=c.status, tone=tones[c.status]),  # type: ignore[arg-type]
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
    from kit.report.timing import timing_section

    return Section(
        anchor="environment",
        title="Environment and fingerprint checks",
        subsections=[recorded, before, after, timing_section(run)],
    )


# ---------------------------------------------------------------------------------------------
# Reference claims
# ---------------------------------------------------------------------------------------------


def expected_cell(expectation: RelationExpectation | None) -> Cell:
    """The value expected on this host's GPUs (its basis is said under the relation)."""
    if expectation is None:
        return Cell(text="—", tone="muted")
    return Cell(text=expectation.expected or "no expectation", tone="plain" if expectation.expected else "muted")


def against_expectation(verdict: str, finding: str = "") -> str | None:
    """The verdict against the expectation, said as such so it is never read as the paper's."""
    if verdict == "paper verdict":
        return None
    return f"vs expectation: {verdict}" + (f" ({finding})" if finding else "")


def claims_table(outcomes: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation] = ()) -> Table:
    """One heading row per claim (its verdict, and why under the statement), then two rows per
    relation it makes: the paper's value, the value expected on this host's GPUs and the measured
    one; then, across the table's width, why the verdict is what it is and what the expectation
    rests on. Long explanations in narrow columns made each claim a page tall (and slow to print)."""
    expected = {e.id: e for e in expectations}
    rows = []
    for claim in outcomes:
        meta = f"{claim.section}, {claim.source}; platform: {claim.platforms}."
        extra = [
            text
            for text in (
                claim.interpretation and f"Kit's reading: {claim.interpretation}",
                claim.note and f"Note: {claim.note}",
                claim.reason and f"Verdict: {claim.reason}.",
            )
            if text
        ]
        mine = expected.get(claim.id)
        rows.append(
            Row(
                heading=True,
                cells=[
                    Cell(text=claim.id, tone="strong"),
                    Cell(text=claim.statement, detail=" ".join([meta, *extra]), colspan=4),
                    Cell(text=claim.verdict, tone=VERDICT_TONES[claim.verdict],
                         detail=mine and against_expectation(mine.verdict)),
                ],
            )
        )  # fmt: skip
        relation_expectations = mine.relations if mine else [None] * len(claim.relations)
        for relation, expectation in zip(claim.relations, relation_expectations):
            rows += relation_rows(relation, expectation, claim.caveats)
    return Table(
        caption="The paper's published findings against this run, and what the kit expects of this host's GPUs",
        header=["Claim", "Relation", "Paper", "Expected on this host", "Measured", "Verdict"],
        widths=[5, 35, 14, 16, 14, 16],
        rows=rows,
        notes=[
            "Tolerances are the kit's choice: the paper states none.",
            f"Inconclusive: measured, but the runs cannot decide. A relation deviates only from at least {MIN_RUNS} "
            "runs of each case it reads, and only beyond the wider of its tolerance and its runs' spread "
            f"({SPREAD_FACTOR:g} standard errors of its value); with fewer runs, or within that spread, it is "
            "inconclusive and says which runs it lacks. A value inside the bound from fewer runs is consistent only "
            "when inside by more than its runs' spread, which a single run does not give.",
            "A verdict is not applicable when the claim is about other hardware, needs two platforms, or the "
            "run is not comparable to the reference; what the run measured is still shown, for information. "
            "In a run not comparable to the reference, a case of the same stage and method stands in for a "
            "case the run lacks, and is named.",
            "Expected on this host: the kit's expectation for this run's GPUs (kit/expectation.py), with its basis "
            "in the row under the relation: a relation of configurations on one platform carries the paper's value on the paper's "
            "platform most like these GPUs; an absolute figure or a ratio of two platforms scales the paper's "
            "number by manifests/hardware.yaml (dense bf16 peak for training, memory bandwidth for serving, link "
            "bandwidth for communication). Where this host is not the claim's platform, the verdict against that "
            "expectation is marked \"vs expectation\" and never counted as agreement with the paper. Where this "
            "host is the claim's platform, or the claim is of any GPU, the expectation is the paper's own value and "
            "its verdict the paper's.",
        ],
    )


def relation_rows(relation: RelationOutcome, expectation: RelationExpectation | None,
                  claim_caveats: Sequence[str] = ()) -> list[Row]:  # fmt: skip
    """A relation's values and verdicts, then a row across the table: why, and the expectation's
    basis (caveats the whole claim shares are said once, with it)."""
    own = [caveat for caveat in relation.caveats if caveat not in claim_caveats]
    stand_ins = [f"{used} stands in for {case}" for case, used in relation.stand_ins.items()]
    finding = relation.finding
    if relation.caveats and relation.finding:
        finding = f"for information: {relation.finding}"
    measured = relation.measured or (expectation.measured if expectation else None)
    values = Row(
        cells=[
            Cell(text=""),
            Cell(text=relation.relation),
            Cell(text=relation.published),
            expected_cell(expectation),
            Cell(text=measured or "—", tone="plain" if measured else "muted"),
            Cell(text=relation.verdict, tone=VERDICT_TONES[relation.verdict],
                 detail=expectation and against_expectation(expectation.verdict)),
        ]
    )  # fmt: skip
    against = expectation and against_expectation(expectation.verdict, expectation.finding)
    # where the expectation is the paper's own value (this host is the claim's platform, or the claim is
    # of any GPU), its basis would repeat the table's note on every relation
    basis = expectation and expectation.verdict != "paper verdict" and f"Expected on this host: {expectation.basis}"
    why = [*own, *stand_ins, *([basis] if basis else []), *([against] if against else [])]
    why_cell = Cell(text=f"Why: {finding}", detail="; ".join(why) or None) if finding else Cell(text="; ".join(why) or "—")
    return [values, Row(cells=[Cell(text=""), why_cell.model_copy(update={"colspan": 5})])]


def tables_table(comparisons: Sequence[TableComparison]) -> Table:
    return Table(
        caption="Values transcribed from the paper's tables, case by case",
        header=["Table", "Platform", "Case", "Metric", "Published", "Measured", "Ratio", "Verdict", "Why"],
        widths=[6, 12, 16, 9, 11, 11, 7, 9, 19],
        rows=[
            Row(
                cells=[
                    Cell(text=c.table),
                    Cell(text=c.platform),
                    Cell(text=c.case, tone="mono"),
                    Cell(text=metric_label(c.metric)),
                    Cell(text=c.published),
                    Cell(text=c.measured or "—"),
                    Cell(text=c.ratio or "—"),
                    Cell(text=c.verdict, tone=VERDICT_TONES[c.verdict]),
                    Cell(text=c.detail),
                ]
            )
            for c in comparisons
        ],
    )


def claims_section(
    reference: Reference | None,
    outcomes: Sequence[ClaimOutcome],
    comparisons: Sequence[TableComparison],
    run: LoadedRun,
    runs: Sequence[MeasuredRun],
    expectations: Sequence[ClaimExpectation] = (),
) -> Section:
    section = Section(anchor="claims", title="Reference claims (arXiv:2311.03687)")
    if reference is None:
        section.not_run = (
            "Not requested: this report compares no reference. Render it with "
            "`--compare reference` to judge the run against the paper's published findings."
        )
        return section
    counts = verdict_counts(outcome.verdict for outcome in outcomes)
    section.paragraphs.append(
        f"{reference.title}. {len(outcomes)} published findings (PROTOCOL.md), from "
        f"{reference_path().name}: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items()) + "."
    )
    section.paragraphs.append(
        "Runs this report judges the claims on: "
        + "; ".join(f"{measured.label} (profile {measured.profile}) on {measured.devices}" for measured in runs)
        + "."
    )
    if not run.measured.comparable_to_reference:
        section.paragraphs.append(
            f"Profile {run.info.profile} is not comparable to the reference (comparable_to_reference: false), "
            "so no claim is judged on it: each is not applicable, with what this run measured beside it for "
            "information."
        )
    against = expectation_counts(expectations)
    if any(against.values()):
        section.paragraphs.append(
            f"Against the kit's expectation on this host's GPUs ({runs[0].gpus}), for the claims about other "
            "hardware: " + ", ".join(f"{count} {verdict}" for verdict, count in against.items()) + ". These are not "
            "the paper's verdicts: the expected value and its basis stand beside each relation."
        )
    section.tables.append(claims_table(outcomes, expectations))
    if comparisons:
        section.tables.append(tables_table(comparisons))
    else:
        section.paragraphs.append(
            f"Table values: none transcribed yet in {reference_path().name} (its tables list is empty); the paper's "
            "full tables are not published here. A transcribed value is compared case by case once added there."
        )
    return section


# ---------------------------------------------------------------------------------------------
# A/B
# ---------------------------------------------------------------------------------------------


def _p_value(test: WelchTest) -> tuple[Cell, Cell]:
    if test.p_value is None:
        return Cell(text="—", detail=test.reason, tone="muted"), Cell(text="not testable", tone="muted")
    significant = "yes" if test.significant else "no"
    return (
        Cell(text=f"{test.p_value:.3g}", detail=f"t = {test.t:.2f}, df = {test.df:.1f}"),
        Cell(text=significant, tone="strong" if test.significant else "plain"),
    )


class Comparison(BaseModel):
    """An A/B section and the sentence the executive summary gives it."""

    section: Section
    summary: str


def comparison_section(run: LoadedRun, other: LoadedRun) -> Comparison:
    """Every case both runs have: A and B side by side, B / A, and Welch's test on per-run values."""
    a, b = run, other
    section = Section(
        anchor=f"ab-{b.info.run_id}",
        title=f"A/B: this run against {b.info.run_id}",
        paragraphs=[
            f"A = {a.info.run_id} (profile {a.info.profile}, {machine(a)}). "
            f"B = {b.info.run_id} (profile {b.info.profile}, {machine(b)}), evidence digest {b.evidence_digest}."
        ],
    )
    section.tables.append(Table(caption="Who signed each run", header=["Run", "Signature"], widths=[25, 75],
                                rows=[Row(cells=[Cell(text=f"{side} = {loaded.info.run_id}"), signature_cell(loaded.signature)])
                                      for side, loaded in (("A", a), ("B", b))]))  # fmt: skip
    common = [cid for cid in a.info.selected if cid in a.results and cid in b.results]
    stages = list(dict.fromkeys(a.results[cid].stage for cid in common))
    fa, fb = a.before.fingerprint, b.before.fingerprint
    if fa is None or fb is None:
        sides = "; ".join(
            f"{name}: {loaded.missing}"
            for name, loaded in (("A", a.before), ("B", b.before))
            if loaded.fingerprint is None
        )
        section.paragraphs.append(f"Comparability of the environments: fingerprints not recorded ({sides}).")
        environments = "fingerprints not recorded, so the environments' comparability is unknown"
    else:
        rules = load_expectations().comparability
        rows = []
        for stage in stages:
            if stage not in rules.stages:
                rows.append(
                    Row(
                        cells=[
                            Cell(text=stage),
                            Cell(text="unknown", tone="warn"),
                            Cell(text=f"environment.yaml has no comparability rules for stage {stage}"),
                        ]
                    )
                )
                continue
            verdict = comparable(fa, fb, stage, rules)
            rows.append(
                Row(
                    cells=[
                        Cell(text=stage),
                        Cell(text="yes" if verdict.comparable else "no", tone="good" if verdict.comparable else "bad"),
                        Cell(text="; ".join(verdict.reasons) or "every aspect equal"),
                    ]
                )
            )
        section.tables.append(
            Table(
                caption="May the two runs' numbers be compared? (fingerprints, per stage)",
                header=["Stage", "Comparable", "Why not"],
                widths=[15, 12, 73],
                rows=rows,
            )
        )
        differing = [row.cells[0].text for row in rows if row.cells[1].text != "yes"]
        environments = (
            f"environments not comparable for {', '.join(differing)}"
            if differing
            else "environments comparable for every common stage"
        )
    rows, bars, tested = [], [], []
    for cid in common:
        left, right = a.results[cid], b.results[cid]
        if left.status != "ok" or right.status != "ok":
            rows.append(
                Row(
                    cells=[
                        Cell(text=cid, tone="mono"),
                        Cell(text="status"),
                        status_cell(left, True),
                        status_cell(right, True),
                        Cell(text="—", tone="muted"),
                        Cell(text="—", tone="muted"),
                        Cell(text="no comparison", tone="muted"),
                    ]
                )
            )
            continue
        names = [n for n in AB_METRICS if left.metrics.get(n) and right.metrics.get(n)] or [
            n for n in left.metrics if left.metrics.get(n) and right.metrics.get(n)
        ]
        for name in names:
            ma, mb = left.metrics[name], right.metrics[name]
            test = welch_t_test(ma.per_run, mb.per_run)
            ratio = mb.mean / ma.mean if ma.mean else None
            rows.append(
                Row(
                    cells=[
                        Cell(text=cid, tone="mono"),
                        Cell(text=metric_label(name)),
                        Cell(text=mean_std(ma)),
                        Cell(text=mean_std(mb)),
                        Cell(text=f"{format_value(ratio)} ×" if ratio is not None else "—"),
                        *_p_value(test),
                    ]
                )
            )
            if name == "tokens_per_s" and ratio is not None:
                bars.append(charts.RatioBar(label=cid, ratio=ratio, significant=test.significant))
                tested.append(test.significant)
    only_a = [cid for cid in a.results if cid not in b.results]
    only_b = [cid for cid in b.results if cid not in a.results]
    notes = [
        f"Welch's t-test on the per-run values, two-sided, α = {SIGNIFICANCE_LEVEL}; units as in the run "
        "(tokens/s, GiB)."
    ]
    if only_a:
        notes.append(f"Only in A: {', '.join(only_a)}.")
    if only_b:
        notes.append(f"Only in B: {', '.join(only_b)}.")
    if rows:
        section.tables.append(
            Table(
                caption=f"Cases of both runs ({len(common)})",
                header=["Case", "Metric", "A", "B", "B / A", "p", "Significant"],
                widths=[26, 10, 14, 14, 8, 17, 11],
                rows=rows,
                notes=notes,
            )
        )
    else:
        section.paragraphs.append("The two runs have no case in common. " + " ".join(notes[1:]))
    if bars:
        section.charts.append(
            Chart(
                title="Throughput B / A",
                svg=charts.ratio_chart(f"ab-{b.info.run_id}", bars, "tokens/s"),
                caption=f"Ratio of mean throughputs; dark bars: Welch's test p < {SIGNIFICANCE_LEVEL}.",
            )
        )
    summary = (
        f"Against run {b.info.run_id}: {len(common)} cases in common; throughput differs significantly "
        f"(Welch, α = {SIGNIFICANCE_LEVEL}) in {sum(1 for t in tested if t)} of the {len(tested)} measured in "
        f"both; {environments}."
    )
    return Comparison(section=section, summary=summary)


# ---------------------------------------------------------------------------------------------
# Deviations, summary, appendix
# ---------------------------------------------------------------------------------------------


def issues_section(
    run: LoadedRun, outcomes: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation] = ()
) -> Section:
    section = Section(anchor="deviations", title="Deviations, failures and waivers")
    selected = run.info.selected
    failures = [run.results[cid] for cid in selected if cid in run.results and run.results[cid].status != "ok"]
    unfinished = [cid for cid in selected if cid not in run.results]
    rows = [
        Row(
            cells=[
                Cell(text=r.case_id, tone="mono", detail=r.case.fitted),
                Cell(text=r.status, tone=STATUS_TONES.get(r.status, "plain")),
                Cell(text=r.reason or "no reason recorded"),
            ]
        )
        for r in failures
    ]
    rows += [
        Row(
            cells=[
                Cell(text=cid, tone="mono"),
                Cell(text="no result", tone="bad"),
                Cell(text="the run ended before this case finished"),
            ]
        )
        for cid in unfinished
    ]
    if rows:
        section.tables.append(
            Table(
                caption="Cases that ended without a measurement",
                header=["Case", "Status", "Reason"],
                widths=[36, 10, 54],  # the longest id (pretrain.llama2-70b.z3+o+r+f.g8.p2p-off) on one line
                rows=rows,
                notes=[
                    "Each was recorded as it happened; the run went on. "
                    "The case's log.txt (see the raw-data index) has the details."
                ],
            )
        )
    else:
        section.paragraphs.append("Every selected case finished with a measurement.")
    if run.invalid:
        section.tables.append(Table(
            caption="Figures marked invalid: past their physical bound, or their case's own self-check failed",
            header=["Case", "Why it is not a measurement"], widths=[36, 64],
            rows=[Row(cells=[Cell(text=cid, tone="mono"), Cell(text="; ".join(reasons), tone="bad")])
                  for cid, reasons in run.invalid.items()],
            notes=["Each case ended ok and keeps its numbers in result.json, but the report takes none of them for a "
                   "measurement: they are marked invalid wherever shown, never a headline nor priced, and no claim is "
                   "judged on them (kit/validity.py)."],
        ))  # fmt: skip
    judged = (("Claims the run deviates from", "Deviation", outcomes),
              ("Claims where this host's GPUs deviate from the kit's expectation (not the paper's verdict)",
               "Against the expectation", expectations))  # fmt: skip
    for caption, heading, verdicts in judged:
        deviating = [v for v in verdicts if v.verdict == "deviates"]
        if deviating:
            rows = [Row(cells=[Cell(text=v.id, tone="strong"),
                               Cell(text="; ".join(r.finding for r in v.relations if r.verdict == "deviates"))])
                    for v in deviating]  # fmt: skip
            section.tables.append(Table(caption=caption, header=["Claim", heading], widths=[10, 90], rows=rows))
    notes = [(cid, note) for cid in selected if cid in run.results for note in run.results[cid].notes]
    if notes:
        section.tables.append(
            printed_if_short(Table(
                caption="Notes the results carry",
                header=["Case", "Note"],
                widths=[32, 68],
                rows=[Row(cells=[Cell(text=cid, tone="mono"), Cell(text=note)]) for cid, note in notes],
            ), "in each case's result.json (notes)")  # fmt: skip
        )
    unselected = [case.id for case in run.info.plan.cases if case.id not in selected]
    if unselected:
        section.subsections.append(
            Section(
                anchor="not-selected",
                title="Not selected for this run",
                paragraphs=[
                    f"{len(unselected)} of the {len(run.info.plan.cases)} cases of the {run.info.profile} profile: "
                    f"{', '.join(unselected)}."
                ],
            )
        )
    section.subsections.append(
        Section(
            anchor="waivers",
            title="Waivers",
            paragraphs=["None recorded. Every failure and deviation above stands as measured."],
        )
    )
    return section


def status_counts(run: LoadedRun) -> Counter:
    statuses = Counter(run.results[cid].status if cid in run.results else "no result" for cid in run.info.selected)
    return statuses


# The run's selected cases as a reviewer counts them, each with its tone; the first five always.
TALLY_TONES: dict[str, Tone] = {"attempted": "plain", "measured": "good", "OOM": "warn", "unavailable": "muted",
                                "skipped": "muted", "error": "bad", "timeout": "bad", "no result": "bad"}  # fmt: skip


def case_tally(run: LoadedRun) -> dict[str, int]:
    """attempted (every selected case but those skipped or without a result), measured (ok), OOM,
    unavailable and skipped; error, timeout and no result where there are some."""
    statuses = status_counts(run)
    tally = {"attempted": sum(count for status, count in statuses.items() if status not in ("skipped", "no result")),
             "measured": statuses["ok"], "OOM": statuses["oom"], "unavailable": statuses["unavailable"],
             "skipped": statuses["skipped"]}  # fmt: skip
    return tally | {status: statuses[status] for status in ("error", "timeout", "no result") if statuses[status]}


def _best_figures(run: LoadedRun, stage: str, words: str) -> list[str]:
    """Per kind of method (kit.report.ranking), the highest throughput and the lowest peak memory of
    the stage's cases as the protocol writes them (no variant), each valid, with its model and method."""
    done = [r for c in run.info.plan.cases if c.stage == stage and c.variant is None and (r := run.results.get(c.id))
            and has_metrics(r, "tokens_per_s", "peak_memory_gib") and not run.invalid.get(c.id)]  # fmt: skip
    found = []
    for kind, name in KINDS.items():
        mine = [r for r in done if method_kind(r.case) == kind]
        if not mine:
            continue
        fast = standing(mine, "tokens_per_s")
        light = min(mine, key=lambda r: r.metrics["peak_memory_gib"].mean)
        found.append(
            f"{words.capitalize()}, {name}: the highest throughput is {method_label(fast.best.case.method)} on "
            f"{fast.best.case.model}, {mean_std(fast.best.metrics['tokens_per_s'], '10^3 tokens/s')} × 10^3 tokens/s "
            f"({fast.words}); the lowest peak memory {method_label(light.case.method)} on {light.case.model}, "
            f"{mean_std(light.metrics['peak_memory_gib'])} GiB."
        )
    return found


def summary_section(
    run: LoadedRun,
    outcomes: Sequence[ClaimOutcome] | None,
    stages: Sequence[Section],
    comparisons: Sequence[Comparison],
    expectations: Sequence[ClaimExpectation] = (),
) -> Section:
    """The executive summary in words, every figure taken from the data above it."""
    info, measured = run.info, run.measured
    tally = case_tally(run)
    others = [f"{count} {status}" for status, count in tally.items() if status not in ("attempted", "measured")]
    paragraphs = [
        f"Run {info.run_id} attempted {tally['attempted']} of the {len(info.selected)} cases it selected, of the "
        f"{len(info.plan.cases)} of the {info.profile} profile ({info.plan.description}), on {machine(run)}, from "
        f"{info.started_at} to {info.finished_at or 'an unrecorded end'} (UTC), with kit {info.kit.version}: "
        f"{tally['measured']} measured, " + ", ".join(others) + "."
    ]
    reasons = Counter(
        r.reason for r in run.results.values() if r.status in ("unavailable", "skipped", "error") and r.reason
    )
    if reasons:
        paragraphs.append(
            "Why cases ended without a measurement: "
            + "; ".join(f"{reason} ({count}×)" if count > 1 else reason for reason, count in reasons.most_common())
            + "."
        )
    if run.invalid:
        paragraphs.append("Marked invalid, and left out of every figure below (see Deviations): "
                          + "; ".join(f"{cid}: {reasons[0]}" for cid, reasons in run.invalid.items()) + ".")  # fmt: skip
    for stage, words_for in (("pretrain", "pre-training"), ("finetune", "fine-tuning")):
        paragraphs += _best_figures(run, stage, words_for)
    if outcomes is not None:
        counts = verdict_counts(o.verdict for o in outcomes)
        text = (
            f"Against the {len(outcomes)} published findings of the paper: "
            + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
            + "."
        )
        if not measured.comparable_to_reference:
            text += (
                f" This run is not comparable to the reference (profile {info.profile}), so no claim is judged; "
                "the measured relations are shown for information only."
            )
        deviating = [o.id for o in outcomes if o.verdict == "deviates"]
        if deviating:
            text += f" Deviating: {', '.join(deviating)} (see Deviations and failures)."
        undecided = [o.id for o in outcomes if o.verdict == "inconclusive"]
        if undecided:
            text += (f" Inconclusive, the runs cannot decide (fewer than {MIN_RUNS} runs of a case, or a value within "
                     f"its runs' spread of the bound): {', '.join(undecided)}.")  # fmt: skip
        against = expectation_counts(expectations)
        if any(against.values()):
            text += (
                " Of the claims about other hardware, against what the kit expects of this host's GPUs (not the "
                "paper's verdict): " + ", ".join(f"{count} {verdict}" for verdict, count in against.items() if count) + "."
            )
        paragraphs.append(text)
    else:
        paragraphs.append("The paper's published findings were not compared (no `--compare reference`).")
    idle = [s.title for s in stages if s.not_run]
    if idle:
        paragraphs.append(f"Sections without measurements, each saying why: {', '.join(idle)}.")
    paragraphs += [comparison.summary for comparison in comparisons]
    return Section(anchor="summary", title="Executive summary", paragraphs=paragraphs)


def _json(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def parameters_table(stage: str, cases: Sequence[Case], protocol: Protocol, profile: str) -> Table:
    """Every parameter of a stage's cases, with where its value comes from (a stage of several
    workloads, as the soak's, has some parameters in some of its cases only)."""
    dumps = [case.params.model_dump(exclude={"kind"}) for case in cases]
    unpublished = set(cases[0].unpublished)
    defaults = protocol.stages[stage].params if stage in protocol.stages else {}
    rows = []
    for name in dict.fromkeys(name for dump in dumps for name in dump):
        values: dict[str, list[str]] = {}
        for case, dump in zip(cases, dumps):
            values.setdefault(_json(dump[name]) if name in dump else "not a parameter of its workload", []).append(case.method)
        if len(values) == 1:
            value = next(iter(values))
        else:
            value = "; ".join(f"{v}: {', '.join(dict.fromkeys(methods))}" for v, methods in values.items())
        if name in unpublished:
            origin, tone = "kit's choice (not published)", "warn"
        elif len(values) > 1:
            origin, tone = "set by the method", "plain"
        elif name in defaults and _json(defaults[name]) != value:
            origin, tone = f"profile {profile} (protocol: {_json(defaults[name])})", "warn"
        elif name in defaults:
            origin, tone = "paper", "plain"
        elif not (field := next(type(c.params).model_fields[name] for c, d in zip(cases, dumps) if name in d)).is_required() \
                and value == _json(field.default):  # fmt: skip
            origin, tone = "kit default", "plain"
        else:
            origin, tone = "set by the method", "plain"
        rows.append(Row(cells=[Cell(text=name, tone="mono"), Cell(text=value), Cell(text=origin, tone=tone)]))  # type: ignore[arg-type]
    return Table(
        caption=f"Parameters of stage {stage} ({len(cases)} cases)",
        header=["Parameter", "Value", "Origin"],
        widths=[18, 54, 28],
        print_as_listing=True,
        rows=rows,
    )


LISTED_PER_STAGE = 5  # more cases of one stage than this are named by count, not one by one


def _case_list(cases: Sequence[str], run: LoadedRun) -> str:
    """The cases (of run.results), stage by stage; a stage whose every case is among them, and
    that has more than LISTED_PER_STAGE, is named by count, so 115 training cases fit a line."""
    by_stage: dict[str, list[str]] = {}
    for cid in cases:
        by_stage.setdefault(run.results[cid].stage, []).append(cid)
    parts = []
    for stage, members in by_stage.items():
        every = [cid for cid, result in run.results.items() if result.stage == stage]
        others = [cid for cid in every if cid not in set(members)]
        if len(members) > LISTED_PER_STAGE and not others:
            parts.append(f"every {stage} case ({len(members)})")
        elif len(members) > LISTED_PER_STAGE and len(others) <= 2 * LISTED_PER_STAGE:
            parts.append(f"every {stage} case but {', '.join(others)} ({len(members)} of {len(every)})")
        else:
            parts.append(", ".join(members))
    return "; ".join(parts)


def image_section(run: LoadedRun) -> Section:
    """The images the cases ran in: run.json's record, and the digest each run's container had."""
    info = run.info
    section = Section(anchor="images", title="Image digests")
    recorded = dict((info.model_extra or {}).get("images") or {})
    seen: dict[str, dict[str, list[str]]] = {}
    for result in run.results.values():
        for sample in result.samples:
            if sample.container is not None:
                digest = (sample.container.repo_digests or [sample.container.image_digest])[0]
                cases = seen.setdefault(sample.container.image, {}).setdefault(digest, [])
                if result.case_id not in cases:
                    cases.append(result.case_id)
    if not recorded and not seen:
        used = ", ".join(dict.fromkeys(case.image for case in info.plan.cases if case.id in info.selected))
        where = (
            ": the local executor ran the workloads in the host's Python, not in pinned images"
            if info.executor == "local"
            else ""
        )
        section.not_run = f"Not recorded{where}. Images the selected cases name: {used or 'none'}."
        return section
    rows = []
    for image in dict.fromkeys([*recorded, *seen]):
        runs = seen.get(image, {})
        digests = list(dict.fromkeys([*([recorded[image]] if image in recorded else []), *runs]))
        for digest in digests:
            cases = runs.get(digest, [])
            agrees = len(digests) == 1
            rows.append(
                Row(
                    cells=[
                        Cell(text=str(image)),
                        Cell(text=str(digest), tone="mono" if agrees else "bad"),
                        Cell(
                            text=_case_list(cases, run) or "no run recorded a container of it",
                            tone="plain" if cases else "muted",
                        ),
                    ]
                )
            )
    section.tables.append(
        Table(
            caption="Images the cases ran in (run.json, and each run's container)",
            header=["Image", "Digest", "Cases"],
            widths=[20, 45, 35],
            rows=rows,
            notes=[
                "Marked: one image reference with more than one digest in this run, so its cases did not all run "
                "the same image."
            ]
            if any(row.cells[1].tone == "bad" for row in rows)
            else [],
        )
    )
    return section


def appendix_section(run: LoadedRun, protocol: Protocol) -> Section:
    info = run.info
    method = Section(
        anchor="method",
        title="Method",
        paragraphs=[
            "Throughput (kit.metrics): tokens of one global step divided by the mean step time, summed over all "
            "processes; a step of a multi-process run lasts as long as its slowest rank, and warm-up steps are not "
            "timed. Each case runs several independent times (each with its own processes); the tables give the "
            "mean and the sample standard deviation (n − 1) over those runs, and every run's value is in the "
            "raw data.",
            "A configuration that runs out of memory is a result (shown as -), not a failure of the run. "
            "FlashAttention without CUDA is unavailable and is never replaced by another attention kernel.",
            "Scaling efficiency = T(N) / (N × T(1)) (kit.analysis), from the mean throughputs.",
            "Reference claims: each published finding is a relation between measured quantities, evaluated against "
            "the published value with a tolerance of the kit's choice; verdicts are consistent, deviates, "
            f"inconclusive, not measured (naming the missing cases) or not applicable (other hardware, two platforms "
            f"needed, or a run not comparable to the reference). A relation deviates only when each case it reads "
            f"has at least {MIN_RUNS} runs and its value lies further from the published value than the wider of the "
            f"stated tolerance and its runs' spread ({SPREAD_FACTOR:g} standard errors of the value, from each case's "
            f"standard deviation over its runs); with fewer runs, or within that spread, it is inconclusive, naming "
            f"the runs it lacks. With fewer than {MIN_RUNS} runs a value inside the bound is consistent only when it "
            "lies inside by more than its runs' spread; a single run gives no spread, so it is inconclusive too.",
            f"A/B comparisons: Welch's t-test on the per-run values, two-sided, α = {SIGNIFICANCE_LEVEL}; the p-value "
            "comes from scipy where installed, else from the kit's continued fraction of the incomplete beta function.",
        ],
    )
    models = {case.model: case.shape for case in info.plan.cases if case.model and case.shape}
    if models:
        method.tables.append(
            Table(
                caption="Models",
                header=["Model", "hidden", "layers", "heads", "KV heads", "MLP", "vocabulary", "source"],
                rows=[
                    Row(
                        cells=[
                            Cell(text=name, tone="strong"),
                            *(
                                Cell(text=str(v))
                                for v in (
                                    shape.hidden_size,
                                    shape.num_layers,
                                    shape.num_heads,
                                    shape.num_kv_heads,
                                    shape.intermediate_size,
                                    shape.vocab_size,
                                )
                            ),
                            Cell(text=shape.source),
                        ]
                    )
                    for name, shape in models.items()
                ],
            )
        )
    parameters = Section(
        anchor="parameters",
        title="Protocol parameters",
        paragraphs=[
            "Every parameter of every stage of the run's plan. \"kit's choice\": the paper does not publish the "
            'value. "profile": the profile overrides the protocol\'s value. "paper": the protocol\'s value, from '
            "the paper."
        ],
    )
    by_stage: dict[str, list[Case]] = {}
    for case in info.plan.cases:
        by_stage.setdefault(case.stage, []).append(case)
    readings: dict[tuple[str, str], list[str]] = {}
    for stage, cases in by_stage.items():
        parameters.tables.append(parameters_table(stage, cases, protocol, info.profile))
        for key, text in cases[0].interpretation.items():
            readings.setdefault((key, text), []).append(stage)
    if readings:
        parameters.tables.append(
            Table(
                caption="How the kit reads what the paper leaves open",
                header=["Topic", "Stages", "Interpretation"],
                widths=[10, 18, 72],
                rows=[
                    Row(cells=[Cell(text=key, tone="strong"), Cell(text=", ".join(stages)), Cell(text=text)])
                    for (key, text), stages in readings.items()
                ],
            )
        )
    images = image_section(run)
    sizes = {f.path: f.size for f in run.evidence}
    groups = evidence_groups(run.evidence)
    raw = Section(
        anchor="raw-data",
        title="Raw-data index",
        paragraphs=[
            f"Every file of the run directory as SHA256SUMS lists it ({len(run.evidence)} files). The SHA-256 of "
            f"SHA256SUMS itself, the evidence digest on the cover, is {run.evidence_digest}. `sha256sum --check "
            "SHA256SUMS` in the run directory re-checks them.",
            f"By case folder ({len(groups)} entries): the SHA-256 of the folder's lines in SHA256SUMS, which "
            "`grep -F '  cases/<case-id>/' SHA256SUMS | sha256sum` reproduces; a file outside the case folders has "
            "its own SHA-256. The HTML report also lists every file with its digest; the printed report leaves that "
            "list out for length.",
        ],
    )
    raw.tables.append(
        Table(
            caption="Raw data, file by file",
            header=["File", "Bytes", "SHA-256"],
            dense=True,
            widths=[45, 6, 49],
            media="screen",
            rows=[
                Row(
                    cells=[
                        Cell(text=f.path, tone="mono"),
                        Cell(text=str(sizes[f.path])),
                        Cell(text=f.sha256, tone="mono"),
                    ]
                )
                for f in run.evidence
            ],
        )
    )
    raw.tables.append(
        Table(
            caption="Raw data by case folder",
            header=["Case folder or file", "Files", "Bytes", "SHA-256 (of its SHA256SUMS lines, for a folder)"],
            dense=True,
            widths=[38, 5, 8, 49],
            print_as_listing=True,
            rows=[
                Row(
                    cells=[
                        Cell(text=group.name, tone="mono"),
                        Cell(text=str(len(group.paths))),
                        Cell(text=str(sum(sizes[path] for path in group.paths))),
                        Cell(text=group.sha256, tone="mono"),
                    ]
                )
                for group in groups
            ],
        )
    )
    return Section(anchor="appendix", title="Appendix", subsections=[method, parameters, images, raw])
