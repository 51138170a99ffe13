"""The Health section: the host's health before the run (each check of manifests/health.yaml:
observed, threshold, severity, source), per Slurm node where the nodes fingerprinted themselves,
the silent-data-corruption check per device and per pair, and each serving case's output
checked against transformers' (kit.serve.correctness). Page one's lines summarize it
(kit.report.page_one.health_lines)."""

from __future__ import annotations

from kit.host.health import HostHealth, SilentDataCorruption
from kit.measure import validity
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table, Tone
from kit.rundir.serving import OutputCheck

HEALTH_ANCHOR = "health"
HEALTH_TONES: dict[str, Tone] = {
    "pass": "good",
    "warn": "warn",
    "fail": "bad",
    "error": "bad",
    "unknown": "unsure",
    "not_applicable": "muted",
    "not_checked": "muted",
}


def output_checks(run: LoadedRun) -> dict[str, list[OutputCheck]]:
    """Each serving case's output checks, one per run that made one."""
    return {
        case_id: [check for _, check in found]
        for case_id, result in run.results.items()
        if (found := validity.output_checks(result))
    }


def _checks_table(health: HostHealth, where: str) -> Table:
    """The checks that did not pass, each with its threshold, severity and source; those that passed counted."""
    shown = [check for check in health.checks if check.status != "pass"]
    rows = [
        Row(
            cells=[
                Cell(text=check.name),
                Cell(text=check.scope),
                Cell(text=check.status, tone=HEALTH_TONES[check.status]),
                Cell(text=check.observed),
                Cell(text=check.threshold),
                Cell(text=check.severity, detail=check.source),
            ]
        )
        for check in shown
    ]
    return Table(
        caption=f"Health checks of {where} ({health.catalog}): {health.verdict}; "
        f"{len(health.checks) - len(shown)} of {len(health.checks)} pass (not listed)",
        header=["check", "on", "status", "observed", "threshold", "severity, source"],
        rows=rows,
        widths=[16, 14, 8, 22, 14, 26],
        dense=True,
    )


def _corruption_tables(check: SilentDataCorruption) -> list[Table]:
    devices = Table(
        caption=f"Silent data corruption, per device: {check.status} ({check.model})",
        header=["rank", "device", "fingerprint", "first difference"],
        rows=[
            Row(
                cells=[
                    Cell(text=str(device.rank)),
                    Cell(text=device.device),
                    Cell(
                        text="identical" if device.identical else "differs",
                        tone="good" if device.identical else "bad",
                    ),
                    Cell(text=device.first_difference or f"none in {device.steps} steps"),
                ]
            )
            for device in check.devices
        ],
        notes=[f"Raw samples: {check.raw_samples}"] if check.raw_samples else [],
        widths=[8, 40, 14, 38],
    )
    pairs = Table(
        caption="Silent data corruption, all-reduce of known values per pair of ranks",
        header=["ranks", "elements", "wrong", "first wrong element"],
        rows=[
            Row(
                cells=[
                    Cell(text=f"{pair.ranks[0]} and {pair.ranks[1]}"),
                    Cell(text=str(pair.elements)),
                    Cell(text=str(pair.wrong_elements), tone="bad" if pair.wrong_elements else "good"),
                    Cell(text=pair.first_wrong or "none"),
                ]
            )
            for pair in check.pairs
        ],
        widths=[15, 15, 10, 60],
    )
    return [devices, pairs] if check.pairs else [devices]


def _output_table(checks: dict[str, list[OutputCheck]]) -> Table:
    rows = []
    for case_id, found in sorted(checks.items()):
        for index, check in enumerate(found, start=1):
            said = (
                check.note
                if check.status == "not_checked"
                else f"{check.agreed} of {check.prompts} prompts agreed on their first {check.tokens_compared} tokens"
                + "".join(f"; {said}" for said in [*check.mismatches[:1], *([check.note] if check.note else [])])
            )
            rows.append(
                Row(
                    cells=[
                        Cell(text=case_id, detail=f"run {index}"),
                        Cell(text=check.status, tone=HEALTH_TONES[check.status]),
                        Cell(text=said or ""),
                        Cell(text=check.reference or "-", detail=check.tolerance or None),
                    ]
                )
            )
    return Table(
        caption="Serving output against transformers on the same weights (greedy, before each burst)",
        header=["case", "status", "observed", "reference, tolerance"],
        rows=rows,
        widths=[28, 10, 36, 26],
    )


def health_section(run: LoadedRun) -> Section:
    """The host's health, silent data corruption and serving correctness, as recorded by the run."""
    section = Section(anchor=HEALTH_ANCHOR, title="Health and correctness")
    fingerprint = run.before.fingerprint
    health = fingerprint.health if fingerprint else None
    if health is None:
        section.paragraphs.append(
            "The fingerprint before the run has no health section (taken by a kit that did not read health)."
        )
    elif health.not_applicable is not None:
        section.paragraphs.append(
            f"GPU health: not applicable ({health.not_applicable}); each of the {len(health.checks)} checks of "
            f"{health.catalog} is listed as not applicable in fingerprint.json."
        )
    else:
        section.tables.append(_checks_table(health, "this host"))
    for node, loaded in sorted(run.nodes.items()):
        node_health = loaded.fingerprint.health if loaded.fingerprint else None
        if node_health is not None and node_health.not_applicable is None:
            section.tables.append(_checks_table(node_health, f"node {node}"))
    corruption = health.silent_data_corruption if health else None
    if corruption is None:
        section.paragraphs.append(
            "Silent data corruption: not checked (no preflight, or no training case to take the model from)."
        )
    else:
        section.paragraphs.append(f"Silent data corruption: {corruption.status}: {corruption.summary}.")
        section.tables += _corruption_tables(corruption)
    checks = output_checks(run)
    if checks:
        section.tables.append(_output_table(checks))
    else:
        section.paragraphs.append("Serving output: no serving case recorded a check.")
    return section
