"""The appendix: how the figures were computed (method), each stage's parameters as the protocol
fixed them, the images that ran, and the cases of the run by status.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kit.plan.protocol import Case, Protocol
from kit.reference.claims import MIN_RUNS, SPREAD_FACTOR
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.report.stats import SIGNIFICANCE_LEVEL
from kit.rundir.evidence import evidence_groups


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
            values.setdefault(_json(dump[name]) if name in dump else "not a parameter of its workload", []).append(
                case.method
            )
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
        elif not (
            field := next(type(c.params).model_fields[name] for c, d in zip(cases, dumps) if name in d)
        ).is_required() and value == _json(field.default):
            origin, tone = "kit default", "plain"
        else:
            origin, tone = "set by the method", "plain"
        rows.append(Row(cells=[Cell(text=name, tone="mono"), Cell(text=value), Cell(text=origin, tone=tone)]))
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
    recorded = dict(info.images)
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
            "Throughput (kit.measure.metrics): tokens of one global step divided by the mean step time, summed over all "
            "processes; a step of a multi-process run lasts as long as its slowest rank, and warm-up steps are not "
            "timed. Each case runs several independent times (each with its own processes); the tables give the "
            "mean and the sample standard deviation (n − 1) over those runs, and every run's value is in the "
            "raw data.",
            "A configuration that runs out of memory is a result (shown as -), not a failure of the run. "
            "FlashAttention without CUDA is unavailable and is never replaced by another attention kernel.",
            "Scaling efficiency = T(N) / (N × T(1)) (kit.theory.analytic), from the mean throughputs.",
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
    sizes = {f.path: f.size for f in run.evidence if f.size is not None}  # kit.report.load measures every file
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
