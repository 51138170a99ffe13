"""`kit report --fleet`: N servers bought as identical, one run directory each (same profile), and
which of them is not like the others.

Each run is verified and read as for its own report; the fleet report then shows, per case, the
headline figure of the case's unit on every node beside the fleet median, flags nodes by the rule
of kit/report/outliers.py (or because a case did not end ok on them while it did elsewhere, or
its run's signature fails against the allowed signers given), and names every fact of the runs'
fingerprints and run.json that is not the same on every node, and who signed each run.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from kit import __version__
from kit.files.regular import RUN_FILE_LIMIT, read_json
from kit.measure.registry import unit_of
from kit.reference.acceptance import Decision
from kit.report.acceptance_box import node_decision_fact
from kit.report.cells import SIGNATURE_TONES, STATUS_TONES, has_metrics, mean_std, metric_of, percent, signature_cell
from kit.report.load import load_run
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Count, Cover, Fact, PageOne, Report, Row, Section, Table
from kit.report.outliers import DEFAULT_TOLERANCE, FleetFigure, NodeFigure, judge_fleet
from kit.report.render import chosen_formats, verify_runs, write_documents
from kit.report.sections.appendix import image_section
from kit.report.sections.environment import PER_RUN_FACTS, differing_facts, fingerprint_facts, framework_versions
from kit.units import format_value, metric_label

FLEET_FILES = ("fleet-report.html", "fleet-report.pdf")
FLEET_FORMATS = ("html", "pdf")


class Node(NamedTuple):
    """A node of the fleet: its name (the run directory's) and its run, read as a report reads it."""

    name: str
    run: LoadedRun


class CaseAcrossFleet(NamedTuple):
    """One case on every node: its headline figure judged, and the nodes flagged with why."""

    case_id: str
    metric: str | None
    judged: FleetFigure | None
    flags: dict[str, str]  # node -> why it is flagged on this case
    notes: dict[str, str]  # node -> what is named of it without flagging it


def node_names(run_dirs: Sequence[Path]) -> list[str]:
    """Each run's node: its directory's name (OUT/<node>/ of a per-node run), or its path where two
    runs' directories share a name."""
    names = [Path(folder).name for folder in run_dirs]
    repeated = {name for name, count in Counter(names).items() if count > 1}
    return [str(folder) if name in repeated else name for folder, name in zip(run_dirs, names)]


def check_fleet(run_dirs: Sequence[Path]) -> None:
    """What is wrong with the run directories given, in one line, before any is read."""
    if len(run_dirs) < 2:
        raise ValueError(f"--fleet compares two or more run directories, one per node; got {len(run_dirs)}")
    resolved = [Path(folder).resolve() for folder in run_dirs]
    if len(set(resolved)) < len(resolved):
        twice = next(folder for folder, path in zip(run_dirs, resolved) if resolved.count(path) > 1)
        raise ValueError(f"--fleet got the run directory {twice} more than once")
    profiles = {}
    for folder in run_dirs:
        path = Path(folder) / "run.json"
        if not path.is_file():
            raise ValueError(f"{folder} is not a run directory (no run.json)")
        try:
            profiles[folder] = read_json(path, RUN_FILE_LIMIT)["profile"]
        except (OSError, ValueError, KeyError, TypeError):
            raise ValueError(f"{path} is not a run.json the kit wrote (no profile in it)") from None
    if len(set(profiles.values())) > 1:
        listed = ", ".join(f"{folder}: {profile}" for folder, profile in profiles.items())
        raise ValueError(f"--fleet compares runs of one profile; these differ ({listed})")


def judge_case(case_id: str, nodes: Sequence[Node], tolerance: float) -> CaseAcrossFleet:
    """The case's headline figure on each node judged against the fleet, and each node where the
    case did not end ok while it did on another."""
    unit = unit_of(next(case for node in nodes for case in node.run.info.plan.cases if case.id == case_id))
    metric = unit.headline if unit else None
    results = {node.name: node.run.results.get(case_id) for node in nodes}
    measured = {name: result for name, result in results.items() if metric and has_metrics(result, metric)}
    flags = {}
    if measured:
        for name, result in results.items():
            if name not in measured:
                flags[name] = f"{result.status if result else 'no result'} here, ok on {len(measured)} other node(s)"
    if metric is None or len(measured) < 2:
        return CaseAcrossFleet(case_id, metric, None, flags, {})
    judged = judge_fleet(
        [
            NodeFigure(node=name, mean=metric_of(r, metric).mean, per_run=metric_of(r, metric).per_run)
            for name, r in measured.items()
        ],
        tolerance,
    )
    notes = {}
    apart = "every run below every run of the other nodes"
    for verdict in judged.verdicts:
        if verdict.below_tolerance and verdict.deviation is not None:  # a node below the tolerance has a deviation
            below = f"{percent(-verdict.deviation)} below the fleet median (tolerance {percent(tolerance)})"
            flags[verdict.node] = f"{below}; {apart}" if verdict.apart else below
        elif verdict.apart:
            notes[verdict.node] = f"{apart}, within the tolerance"
    return CaseAcrossFleet(case_id, metric, judged, flags, notes)


def _value(value: float, unit: str) -> str:
    return f"{format_value(value)} {unit}"


def figures_table(judged: Sequence[CaseAcrossFleet], nodes: Sequence[Node]) -> Table:
    """Per case, a heading row with the fleet median, then each node's value and deviation."""
    rows = []
    for case in judged:
        label = metric_label(case.metric) if case.metric else "no headline figure"
        some = next(
            (
                n.run.results[case.case_id]
                for n in nodes
                if has_metrics(n.run.results.get(case.case_id), case.metric or "")
            ),
            None,
        )
        unit = metric_of(some, case.metric).unit if some and case.metric else ""
        median = (
            f"fleet median {_value(case.judged.median, unit)}"
            if case.judged
            else "no fleet median (fewer than 2 nodes measured it)"
        )
        rows.append(
            Row(
                heading=True,
                cells=[Cell(text=f"{case.case_id}: {label}", tone="mono", colspan=3), Cell(text=median, colspan=2)],
            )
        )
        deviations = {v.node: v.deviation for v in case.judged.verdicts} if case.judged else {}
        for node in nodes:
            result = node.run.results.get(case.case_id)
            if case.metric and has_metrics(result, case.metric):
                metric = metric_of(result, case.metric)
                value = Cell(text=f"{mean_std(metric)} {metric.unit}")
                runs = Cell(text=", ".join(format_value(v) for v in metric.per_run))
            else:
                status = result.status if result else "no result"
                value = Cell(
                    text=status, detail=result.reason if result else None, tone=STATUS_TONES.get(status, "bad")
                )
                runs = Cell(text="—", tone="muted")
            deviation = deviations.get(node.name)
            shown = "—" if deviation is None else f"{'+' if deviation >= 0 else '−'}{percent(abs(deviation))}"
            flag = case.flags.get(node.name)
            verdict = (
                Cell(text="flagged", detail=flag, tone="bad")
                if flag
                else Cell(text="not flagged", detail=case.notes.get(node.name), tone="good")
            )
            rows.append(Row(cells=[Cell(text=node.name, tone="strong"), value, runs, Cell(text=shown), verdict]))
    return Table(
        caption="Each case's headline figure on every node, beside the fleet median",
        header=["Node", "Mean ± std over its runs", "Each run", "Deviation from the fleet median", "Verdict"],
        widths=[16, 22, 22, 15, 25],
        rows=rows,
    )


def node_facts(run: LoadedRun) -> dict[str, str]:
    """What a node's run says of its machine and its software: the fingerprint its node took of
    itself where its jobs ran on one node (a per-node run), else the fingerprint before the run;
    and run.json's kit, executor, images and the framework versions its workloads reported."""
    taken = next(iter(run.nodes.values())) if len(run.nodes) == 1 else run.before
    fingerprint = taken.fingerprint
    facts = (
        {key: value for key, value in fingerprint_facts(fingerprint, run.hostname) if key not in PER_RUN_FACTS}
        if fingerprint
        else {"Fingerprint": taken.missing or "not recorded"}
    )
    kit = run.info.kit
    images = image_section(run)
    facts.update(
        {
            "Python (host)": run.info.host.python or "not recorded",
            "Executor": run.info.executor,
            "Kit version, commit": f"{kit.version}, {kit.git_commit or 'not recorded'}"
            + (", with uncommitted changes" if kit.dirty else ""),
            "Kit source (SHA-256)": kit.source_sha256 or "not recorded",
            "Measuring code (SHA-256)": kit.workload_sources_sha256,
            "Manifests (SHA-256)": "; ".join(f"{name} {digest}" for name, digest in kit.manifests_sha256.items())
            or "not recorded",
            "Images": images.not_run
            or "; ".join(f"{row.cells[0].text} {row.cells[1].text}" for row in images.tables[0].rows),
        }
    )
    devices = {
        rank.device_name for result in run.results.values() for sample in result.samples for rank in sample.ranks
    }
    facts["Devices (workloads)"] = ", ".join(sorted(devices)) or "no rank recorded one"
    for package, found in sorted(framework_versions(run).items()):
        facts[f"{package} (workloads)"] = ", ".join(sorted(found))
    return facts


def job_nodes(run: LoadedRun) -> str:
    """The Slurm nodes the run's jobs ran on, or the host where they did not run as jobs."""
    nodes = {sample.slurm_job.nodes for result in run.results.values() for sample in result.samples if sample.slurm_job}
    return ", ".join(sorted(nodes)) or f"{run.hostname} (no Slurm job)"


def fingerprint_differences(nodes: Sequence[Node]) -> tuple[list[Row], list[str]]:
    """Rows naming, for each fact not the same on every node, each value and the nodes that have
    it; and the facts that are the same everywhere."""
    return differing_facts({node.name: node_facts(node.run) for node in nodes})


def signatures_fact(nodes: Sequence[Node]) -> Fact:
    """Who signed each node's run, nodes of one verdict together, in the tone of the worst."""
    verdicts: dict[str, list[str]] = {}
    for node in nodes:
        verdicts.setdefault(node.run.signature.summary, []).append(node.name)
    worst = min((node.run.signature.state for node in nodes), key=list(SIGNATURE_TONES).index)
    return Fact(
        label="Signatures",
        value="; ".join(f"{', '.join(names)}: {summary}" for summary, names in verdicts.items()),
        tone=SIGNATURE_TONES[worst],
    )


def fleet_report(nodes: Sequence[Node], tolerance: float = DEFAULT_TOLERANCE) -> Report:
    """The fleet report of runs of one profile, one per node (verified and read beforehand)."""
    first = nodes[0].run.info
    case_ids = list(dict.fromkeys(cid for node in nodes for cid in node.run.info.selected))
    judged = [judge_case(case_id, nodes, tolerance) for case_id in case_ids]
    flagged: dict[str, list[str]] = {}
    for node in nodes:
        if node.run.signature.failed:  # signed by a key outside the allowed signers, unsigned, or not what was signed
            flagged[node.name] = [node.run.signature.summary]
    for case in judged:
        for name, why in case.flags.items():
            flagged.setdefault(name, []).append(
                f"{case.case_id}{f' {metric_label(case.metric)}' if case.metric else ''}: {why}"
            )
    differing, equal = fingerprint_differences(nodes)
    names = ", ".join(node.name for node in nodes)
    rule = (
        f"A node is flagged on a case when its headline figure (every one is a rate: lower is worse) is more than "
        f"{percent(tolerance)} below the fleet median, the median of the nodes' means, or when the case did not end ok on it while it did "
        "on another node. A node whose every run is below every run of the other nodes is named beside the figure, "
        "and not flagged for it alone: of two identical nodes of three runs each, one falls wholly below the other by "
        "chance once in ten. A node above the median is not flagged: a fleet is accepted against its slowest nodes, and "
        "in a fleet of two the faster node is the mirror of the slower. The rule uses a tolerance in per cent of the "
        "median rather than the median absolute deviation (MAD): with two nodes each lies exactly one MAD from the "
        "median, whatever the gap, and among near-identical nodes the MAD is so small that it would flag differences "
        "of a fraction of a per cent that no purchase is refused for."
    )
    verdict = (
        Fact(
            label="Flagged", value="; ".join(f"{name}: {' | '.join(why)}" for name, why in flagged.items()), tone="bad"
        )
        if flagged
        else Fact(
            label="Flagged",
            value=f"no node: none more than {percent(tolerance)} below the fleet median on a "
            "headline figure, none with every run below the others'",
            tone="good",
        )
    )
    summary = Table(
        caption="Each case across the fleet",
        header=["Case", "Headline figure", "Fleet median", "Nodes flagged"],
        widths=[35, 15, 20, 30],
        rows=[
            Row(
                cells=[
                    Cell(text=case.case_id, tone="mono", link="#fleet-figures"),
                    Cell(text=metric_label(case.metric) if case.metric else "none"),
                    Cell(text=format_value(case.judged.median) if case.judged else "—"),
                    Cell(text=", ".join(case.flags) or "none", tone="bad" if case.flags else "good"),
                ]
            )
            for case in judged
        ],
    )
    page = PageOne(
        host=[
            Fact(
                label="Fleet", value=f"{len(nodes)} nodes ({names}), profile {first.profile}: {first.plan.description}"
            ),
            verdict,
            signatures_fact(nodes),
            Fact(
                label="Fingerprints",
                value=(
                    "differ in: "
                    + ", ".join(dict.fromkeys(row.cells[0].text for row in differing if row.cells[0].text))
                )
                if differing
                else "the same on every node",
                tone="warn" if differing else "good",
            ),
            Fact(
                label="Rule",
                value=f"more than {percent(tolerance)} below the fleet median, or every run below every "
                "other node's (see Headline figures across the fleet)",
            ),
        ],
        headline=summary,
    )
    statuses = Counter(result.status for node in nodes for result in node.run.results.values())
    cover = Cover(
        title="Fleet acceptance report",
        subtitle=f"{len(nodes)} runs of the profile {first.profile}, one per node: which node is not like the others",
        facts=[
            *(
                Fact(
                    label=f"Node {node.name}",
                    value=f"run {node.run.info.run_id} on {node.run.hostname}, {node.run.path}; "
                    f"evidence digest {node.run.evidence_digest}",
                )
                for node in nodes
            ),
            Fact(label="Kit", value=f"report by kit {__version__}"),
            Fact(label="Rendered (UTC)", value=datetime.now(timezone.utc).isoformat(timespec="seconds")),
        ],
        claim_counts=[
            Count(label="flagged", count=len(flagged), tone="bad"),
            Count(label="not flagged", count=len(nodes) - len(flagged), tone="good"),
        ],
        claims_summary=f"Nodes of the fleet ({len(nodes)})",
        case_counts=[
            Count(label=status, count=count, tone=STATUS_TONES.get(status, "plain"))
            for status, count in statuses.most_common()
        ],
        case_counts_title="Cases, every node's",
    )
    sections = [
        Section(
            anchor="fleet-figures",
            title="Headline figures across the fleet",
            paragraphs=[rule],
            tables=[figures_table(judged, nodes)],
        ),
        Section(
            anchor="fleet-fingerprints",
            title="Fingerprint differences",
            paragraphs=[
                "The facts of each run's fingerprint and run.json that are not the same on every node; the collection "
                "time and the host name are left out, being different for every run. A run whose Slurm jobs ran on one "
                "node is compared by the fingerprint that node took of itself (fingerprints/<node>.json); any other by "
                "its fingerprint before the run, taken where kit ran. The facts marked (workloads) are what the ranks "
                "reported on the nodes they ran on.",
                "The same on every node: " + (", ".join(equal) or "nothing") + ".",
            ],
            tables=[
                Table(
                    caption="Facts that differ between the nodes",
                    header=["Fact", "Value", "Nodes"],
                    widths=[22, 53, 25],
                    rows=differing,
                )
            ]
            if differing
            else [],
        ),
        Section(
            anchor="fleet-nodes",
            title="The runs",
            paragraphs=[
                "Each run directory matched its SHA256SUMS, and its stored figures the raw samples, before it was read."
            ],
            tables=[
                Table(
                    caption="One run per node",
                    header=[
                        "Node",
                        "Run",
                        "Host (kit)",
                        "Where its cases ran",
                        "Run directory",
                        "Evidence digest (SHA-256 of SHA256SUMS)",
                        "Signature",
                    ],
                    widths=[9, 13, 9, 10, 15, 24, 20],
                    rows=[
                        Row(
                            cells=[
                                Cell(text=node.name, tone="strong"),
                                Cell(text=node.run.info.run_id),
                                Cell(text=node.run.hostname),
                                Cell(text=job_nodes(node.run)),
                                Cell(text=str(node.run.path)),
                                Cell(text=node.run.evidence_digest, tone="mono"),
                                signature_cell(node.run.signature),
                            ]
                        )
                        for node in nodes
                    ],
                )
            ],
        ),
    ]
    banner = None
    if not first.plan.comparable_to_reference:
        banner = f"Profile {first.profile} ({first.plan.description}): the nodes are compared with each other only."
    return Report(
        run_id=", ".join(node.run.info.run_id for node in nodes),
        banner=banner,
        footer=f"kit report --fleet · {len(nodes)} nodes: {names}",
        page_one=page,
        cover=cover,
        sections=sections,
    )


def render_fleet(
    run_dirs: Sequence[Path],
    formats: Sequence[str],
    out_dir: Path | None = None,
    redact: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    allowed_signers: Path | None = None,
    decisions: Sequence[Decision] = (),
) -> list[Path]:
    """fleet-report.html / .pdf of the runs in `out_dir` (default: the folder that holds them all),
    each run verified against its SHA256SUMS first (EvidenceError names what changed), its signer
    checked against `allowed_signers` where given (a node whose signature fails is flagged). Bad input
    (one run, a folder that is no run, runs of different profiles) is a ValueError in one line,
    said before any run is verified. `decisions`, one per run where the fleet is held to an
    acceptance spec (kit.reference.acceptance), open its first page, node by node."""
    wanted = chosen_formats(formats, FLEET_FORMATS, "a fleet report's")
    run_dirs = [Path(folder) for folder in run_dirs]
    check_fleet(run_dirs)
    out_dir = Path(out_dir) if out_dir else Path(os.path.commonpath([folder.resolve() for folder in run_dirs]))
    verify_runs(run_dirs, out_dir, own=None)
    nodes = [
        Node(name, load_run(folder, redact, allowed_signers)) for name, folder in zip(node_names(run_dirs), run_dirs)
    ]
    if redact:  # a per-node run's folder is named after its node: the node's token, for its name and its path
        from kit.execute.node_fingerprint import node_token

        nodes = [
            Node(node_token(node.name), node.run.model_copy(update={"path": Path(node_token(node.name))}))
            for node in nodes
        ]
    report = fleet_report(nodes, tolerance)
    if decisions:
        accepted = [node_decision_fact(node.name, decision) for node, decision in zip(nodes, decisions)]
        report = report.model_copy(update={"page_one": report.page_one.model_copy(update={"verdict": accepted})})
    out_dir.mkdir(parents=True, exist_ok=True)
    html_file, pdf_file = FLEET_FILES
    return write_documents(report, wanted, out_dir / html_file, out_dir / pdf_file)
