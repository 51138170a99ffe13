"""The sections of the stages: the paper's table layout for training, scaling efficiency, the
collectives' sweeps; and for a stage without measurements, the reason in its place."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable

from kit.analysis import scaling_efficiency
from kit.comm import COLLECTIVES, sweep_of
from kit.protocol import Case, Protocol
from kit.reference import metric_label
from kit.report import charts
from kit.report.cells import (
    has_metrics,
    mean_std,
    method_label,
    metric_cell,
    percent,
    status_cell,
)
from kit.report.load import LoadedRun
from kit.report.model import Cell, Chart, HeaderGroup, Row, Section, Table
from kit.results import Metric, Result

TRAIN_MATRIX_STAGES = ("pretrain", "finetune")
STAGE_TITLES = {
    "pretrain": "Pre-training",
    "maxbatch": "The largest micro-batch each method holds",
    "scaling": "Data-parallel scaling",
    "profile": "Module breakdown of a pre-training step",
    "finetune": "Fine-tuning",
    "serve": "Serving throughput and latency",
    "comm": "Communication bandwidth",
}
# What each stage's section shows once it runs; said in its place while it does not.
STAGE_PURPOSE = {
    "maxbatch": "the largest micro-batch each pre-training method holds, found by trials, and the throughput and "
    "memory there (paper Table IV)",
    "profile": "time per phase and per module of one Llama2-7B step, and the GPU idle share (paper Tables V-VIII)",
    "serve": "output tokens/s beside its roofline bound, requests/s and the per-request latency distribution "
    "of each engine under a burst (paper Sec. V)",
    "comm": "bus bandwidth and time of each NCCL collective over message sizes, NVLink vs PCIe (paper Sec. VI)",
}


def stage_not_run(stage: str, run: LoadedRun, protocol: Protocol) -> str | None:
    """Why a stage has nothing to show, or None when it has results."""
    info = run.info
    planned = [case for case in info.plan.cases if case.stage == stage]
    purpose = STAGE_PURPOSE.get(stage)
    shows = f" Once run, this section shows {purpose}." if purpose else ""
    if not planned:
        where = (
            f"the {info.profile} profile has no {stage} stage"
            if stage in protocol.stages
            else f"the protocol has no {stage} stage"
        )
        return f"Not run: {where}.{shows}"
    selected = [case for case in planned if case.id in info.selected]
    if not selected:
        which = f"the {stage} case" if len(planned) == 1 else f"none of the {len(planned)} {stage} cases"
        verb = "was not" if len(planned) == 1 else "was"
        return f"Not run: {which} of the profile {verb} selected for this run.{shows}"
    results = [run.results[case.id] for case in selected if case.id in run.results]
    if not results:
        return f"No result: the run ended before any {stage} case finished.{shows}"
    if all(result.status != "ok" for result in results):
        reasons = Counter(f"{result.status}: {result.reason or 'no reason recorded'}" for result in results)
        listed = "; ".join(f"{reason} ({count} cases)" if count > 1 else reason for reason, count in reasons.items())
        return f"No measurement: every {stage} case ended without one ({listed}).{shows}"
    return None


def _memory_source(results: Iterable[Result]) -> str:
    kinds = set()
    for result in results:
        for sample in result.samples:
            for rank in sample.ranks:
                if rank.peak_memory is not None:
                    kinds.add("device" if rank.peak_memory.device_allocated_bytes is not None else "host")
    if kinds == {"host"}:
        return (
            "Peak memory is the host's peak resident set size of the largest process: this run had "
            "no device allocator (CPU), so it is not GPU memory."
        )
    if kinds == {"device"}:
        return "Peak memory is the GPU allocator's peak (max allocated), the largest over the processes of a run."
    return "Peak memory is the GPU allocator's peak where a GPU was used, else the host's peak resident set size."


def _runs_note(results: Iterable[Result]) -> str:
    counts = sorted({len(result.samples) for result in results if result.status == "ok"})
    if counts == [1]:
        return "One run per case: the value of that run, without a standard deviation."
    runs = " or ".join(str(count) for count in counts) or "the"
    return f"Mean ± sample standard deviation over {runs} independent runs."


def train_matrix(stage: str, run: LoadedRun) -> Section:
    """The paper's table layout: configurations x models, throughput and peak memory."""
    title = STAGE_TITLES[stage]
    section = Section(anchor=stage, title=title)
    cases = [case for case in run.info.plan.cases if case.stage == stage]
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(
            (case.gpus, getattr(case.params, "micro_batch", None), getattr(case.params, "seq_len", None)), []
        ).append(case)
    stage_results = [run.results[c.id] for c in cases if c.id in run.results]
    device = "GPUs" if run.info.plan.device == "cuda" else "processes on CPU"
    for (gpus, batch, seq_len), members in groups.items():
        models = list(dict.fromkeys(case.model for case in members))
        methods = list(dict.fromkeys(case.method for case in members))
        by_key = {(case.model, case.method): case for case in members}
        rows = []
        for method in methods:
            cells = [Cell(text=method_label(method), tone="strong")]
            for model in models:
                case = by_key.get((model, method))
                if case is None:
                    cells.append(Cell(text="not in the protocol", tone="muted", colspan=2))
                    continue
                result = run.results.get(case.id)
                if result is not None and result.status == "ok":
                    cells.append(metric_cell(result, "tokens_per_s", "10^3 tokens/s"))
                    cells.append(metric_cell(result, "peak_memory_gib"))
                elif result is not None and result.status == "oom":
                    cells += [Cell(text="-", tone="warn"), Cell(text="-", tone="warn")]
                else:
                    cells.append(status_cell(result, case.id in run.info.selected, colspan=2))
            rows.append(Row(cells=cells))
        section.tables.append(
            Table(
                caption=f"{title}: {gpus} {device}, micro-batch {batch}, sequence {seq_len} tokens",
                header=["Method"] + ["10^3 tokens/s", "peak memory (GiB)"] * len(models),
                widths=[16] + [round(84 / (2 * len(models)))] * (2 * len(models)),
                groups=[HeaderGroup(label="", span=1)] + [HeaderGroup(label=model or "", span=2) for model in models],
                rows=rows,
                notes=[
                    _runs_note(stage_results) + " Throughput is summed over all processes.",
                    _memory_source(stage_results),
                    "- : out of memory (OOM), a result as in the paper. unavailable, skipped, error, timeout: "
                    "see Deviations and failures. not run: in the profile, not selected for this run.",
                ],
            )
        )
    effective = effective_table(title, stage_results)
    if effective is not None:
        section.tables.append(effective)
    bars = [
        charts.Bar(
            label=method_label(result.case.method),
            group=result.case.model or "",
            value=result.metrics["tokens_per_s"].mean / 1e3,
            error=(result.metrics["tokens_per_s"].std or 0) / 1e3,
        )
        for result in stage_results
        if has_metrics(result, "tokens_per_s")
    ]
    if bars:
        section.charts.append(
            Chart(
                title=f"{title} throughput by method",
                svg=charts.bar_chart(f"{stage}-throughput", bars, "10^3 tokens/s"),
                caption="Mean throughput over the runs of each case; error bars: one standard deviation.",
            )
        )
    return section


def maxbatch_section(run: LoadedRun) -> Section:
    """Table IV: per method, the largest micro-batch that ran its warm-up and measured steps,
    with that trial's throughput and memory, and every trial of the search."""
    section = Section(anchor="maxbatch", title=STAGE_TITLES["maxbatch"])
    cases = [case for case in run.info.plan.cases if case.stage == "maxbatch"]
    rows = []
    for case in cases:
        result = run.results.get(case.id)
        cells = [Cell(text=case.model or "-"), Cell(text=method_label(case.method), tone="strong"), Cell(text=str(case.gpus))]
        if has_metrics(result, "max_micro_batch", "tokens_per_s"):
            cells += [Cell(text=f"{result.metrics['max_micro_batch'].mean:.0f}"),
                      metric_cell(result, "tokens_per_s", "10^3 tokens/s"), metric_cell(result, "peak_memory_gib")]  # fmt: skip
        else:
            cells.append(status_cell(result, case.id in run.info.selected, colspan=3))
        trials = result.samples if result else []
        cells.append(Cell(text=", ".join(f"{t.micro_batch} {t.status}" for t in trials) or "-", tone="muted"))
        rows.append(Row(cells=cells))
    device = "GPUs" if run.info.plan.device == "cuda" else "processes"
    section.tables.append(
        Table(
            caption="Table IV: the largest micro-batch per method, its throughput and peak memory",
            header=["Model", "Method", device, "largest micro-batch", "10^3 tokens/s", "peak memory (GiB)",
                    "trials (micro-batch: status, in order)"],  # fmt: skip
            widths=[11, 12, 7, 10, 13, 12, 35],
            rows=rows,
            notes=[
                "Each trial is a fresh launch at one micro-batch through the case's warm-up and measured steps: from "
                "the start (the memory model's prediction on a GPU) doubling until one runs out of memory, then "
                "bisecting. The figures are those of the trial at the largest micro-batch that ran.",
                *([f"On CPU each process holds at most {case.params.memory_cap_gib:g} GiB of data (RLIMIT_DATA), "
                   "standing in for a GPU's memory." for case in cases[:1] if getattr(case.params, "memory_cap_gib", None)]),
            ],  # fmt: skip
        )
    )
    return section


def framework_section(run: LoadedRun) -> Section | None:
    """Table II: Megatron-LM's engine beside DeepSpeed's naive configuration, model by model, at
    micro-batch 1 (pre-training) and at each one's largest micro-batch (the max-batch search)."""
    megatron = [c for c in run.info.plan.cases if getattr(c.params, "framework", None) == "megatron" and c.variant is None]
    if not megatron:
        return None
    by_key = {(c.stage, c.model, c.method, c.gpus): c for c in run.info.plan.cases if c.variant is None}
    rows = []
    for case in megatron:
        twin = by_key.get((case.stage, case.model, "naive", case.gpus))
        when = "largest micro-batch" if case.stage == "maxbatch" else f"micro-batch {case.params.micro_batch}"
        for engine, member in (("Megatron-LM", case), ("DeepSpeed (naive)", twin)):
            cells = [Cell(text=f"{case.model}, {case.gpus} {'GPUs' if case.device == 'cuda' else 'processes'}"),
                     Cell(text=when), Cell(text=engine, tone="strong")]  # fmt: skip
            result = run.results.get(member.id) if member else None
            if member is None:
                cells.append(Cell(text="not in the protocol", tone="muted", colspan=4))
            elif has_metrics(result, "tokens_per_s"):
                batch = result.metrics.get("max_micro_batch")
                cells += [Cell(text=f"{batch.mean:.0f}" if batch else str(member.params.micro_batch)),
                          metric_cell(result, "tokens_per_s", "10^3 tokens/s"), metric_cell(result, "step_time_s"),
                          metric_cell(result, "peak_memory_gib")]  # fmt: skip
            else:
                cells.append(status_cell(result, member.id in run.info.selected, colspan=4))
            rows.append(Row(cells=cells))
    section = Section(anchor="framework", title="Megatron-LM beside DeepSpeed")
    section.tables.append(
        Table(
            caption="Table II: Megatron-LM's engine and DeepSpeed's naive configuration, same model, sequence and dtype",
            header=["Model", "Batch", "Engine", "micro-batch", "10^3 tokens/s", "step time (s)", "peak memory (GiB)"],
            widths=[18, 16, 16, 10, 14, 12, 14],
            rows=rows,
            notes=["DeepSpeed naive: data parallel without ZeRO. Megatron-LM: megatron-core's data parallelism with "
                   "its distributed optimizer (and tensor parallelism where the method says tp2). At the largest "
                   "micro-batch each engine runs its own, found by the max-batch search."],  # fmt: skip
        )
    )
    return section


MEMORY_VIEWS = (
    ("peak_memory_gib", "allocated"),
    ("peak_reserved_gib", "reserved"),
    ("peak_device_used_gib", "device used (NVML)"),
)


def effective_table(title: str, results: list[Result]) -> Table | None:
    """Beside each result, what the running engine reported of every option its method names,
    and peak memory in each view the run recorded, each labelled for what it is."""
    shown = [result for result in results if result.effective or result.status == "ok"]
    if not shown:
        return None
    rows = []
    for result in shown:
        options = [
            Cell(text=f"{name}: {option.observed}", detail=f"requested {option.requested}; {option.evidence}",
                 tone="good" if option.in_effect else "bad")  # fmt: skip
            for name, option in result.effective.items()
        ] or [Cell(text="no option to prove (the method names none)", tone="muted")]
        memory = [
            metric_cell(result, name) if result.metrics.get(name) else Cell(text="not recorded", tone="muted")
            for name, _ in MEMORY_VIEWS
        ]
        case = Cell(text=f"{result.case.model} {method_label(result.case.method)}", detail=result.status)
        rows.append(Row(cells=[case, options[0], *memory]))
        rows += [Row(cells=[Cell(text=""), option, *[Cell(text="")] * len(MEMORY_VIEWS)]) for option in options[1:]]
    return Table(
        caption=f"{title}: each option in effect, as the running engine reported it, and peak memory (GiB)",
        header=["Case", "Option: observed", *[label for _, label in MEMORY_VIEWS]],
        widths=[18, 46, 12, 12, 12],
        rows=rows,
        dense=True,
        notes=[
            "A case whose requested option was not in effect ends error, never ok (the option in red).",
            "allocated: the framework allocator's peak (torch max_memory_allocated), or the host's peak RSS on a CPU; "
            "reserved: what the allocator held from the GPU, cached blocks included (max_memory_reserved); "
            "device used: the GPU's used memory sampled from NVML during the measured steps, the CUDA context and "
            "every other allocation included, the figure a GPU is sized by. Each is the largest over the processes.",
        ],
    )


def scaling_section(run: LoadedRun) -> Section:
    """Scaling efficiency 1 -> N from the scaling stage (paper Figure 4)."""
    section = Section(anchor="scaling", title=STAGE_TITLES["scaling"])
    cases = [case for case in run.info.plan.cases if case.stage == "scaling"]
    device_word, devices_word = ("GPU", "GPUs") if run.info.plan.device == "cuda" else ("process", "processes")
    series_of: dict[tuple, list[Case]] = {}
    for case in cases:
        series_of.setdefault((case.model, case.method, getattr(case.params, "micro_batch", None)), []).append(case)
    lines = []
    for (model, method, batch), members in series_of.items():
        members.sort(key=lambda case: case.gpus)
        ok = {
            case.gpus: run.results[case.id] for case in members if has_metrics(run.results.get(case.id), "tokens_per_s")
        }
        base = ok.get(1)
        points, rows = [], []
        for case in members:
            result = ok.get(case.gpus)
            if result is None:
                cell = status_cell(run.results.get(case.id), case.id in run.info.selected, colspan=4)
                rows.append(Row(cells=[Cell(text=str(case.gpus)), cell]))
                continue
            throughput = result.metrics["tokens_per_s"]
            efficiency = (
                scaling_efficiency(throughput.mean, base.metrics["tokens_per_s"].mean, case.gpus) if base else None
            )
            points.append(
                charts.ScalingPoint(
                    gpus=case.gpus,
                    throughput=throughput.mean / 1e3,
                    error=(throughput.std or 0) / 1e3,
                    efficiency=efficiency,
                )
            )
            per_device = Metric(
                mean=throughput.mean / case.gpus,
                std=None if throughput.std is None else throughput.std / case.gpus,
                n=throughput.n,
                unit=throughput.unit,
                per_run=[v / case.gpus for v in throughput.per_run],
            )
            efficiency_text = (
                "no 1-" + device_word + " baseline"
                if efficiency is None
                else percent(efficiency) + (" (baseline)" if case.gpus == 1 else "")
            )
            rows.append(
                Row(
                    cells=[
                        Cell(text=str(case.gpus)),
                        Cell(text=mean_std(throughput, "10^3 tokens/s")),
                        Cell(text=mean_std(per_device, "10^3 tokens/s")),
                        Cell(text=efficiency_text),
                        metric_cell(result, "peak_memory_gib"),
                    ]
                )
            )
        label = f"{model} {method_label(method)}, micro-batch {batch}"
        lines.append(charts.ScalingSeries(label=label, points=points))
        section.tables.append(
            Table(
                caption=f"Scaling of {label}",
                header=[devices_word, "10^3 tokens/s", f"per {device_word}", "efficiency vs 1", "peak memory (GiB)"],
                rows=rows,
                notes=[
                    _runs_note(run.results[c.id] for c in members if c.id in run.results),
                    "Scaling efficiency = T(N) / (N × T(1)) from the mean throughputs (paper, Figure 4).",
                ],
            )
        )
    if run.info.plan.device == "cpu":
        section.paragraphs.append(
            "This run is on CPU: each of a case's N \"GPUs\" is a process sharing the host's cores, so the "
            "efficiency below describes this host's CPU, not any GPU or interconnect."
        )
    if any(line.points for line in lines):
        section.charts.append(
            Chart(
                title="Scaling 1 → N",
                svg=charts.scaling_chart("scaling", [line for line in lines if line.points], device_word, devices_word),
                caption="Left: measured throughput (error bars: one standard deviation) and the ideal N × T(1). "
                "Right: scaling efficiency; 100 % is linear scaling.",
            )
        )
    return section


def _mean_sweep(result: Result) -> charts.Sweep:
    """The mean over a comm case's runs at each message size (rank 0's rows, as kit.comm reads them)."""
    by_size: dict[int, list[tuple[float, float]]] = {}
    for sample in result.samples:
        for row in sweep_of(sample).rows:
            by_size.setdefault(row.size_bytes, []).append((row.timing.busbw_gbps, row.timing.time_us))
    return charts.Sweep(
        label=_collective_label(result.case.method),
        points=[
            charts.SweepPoint(
                size_bytes=size,
                bus_bandwidth_gb_s=statistics.fmean(b for b, _ in values),
                time_us=statistics.fmean(t for _, t in values),
            )
            for size, values in sorted(by_size.items())
        ],
    )


def _collective_label(method: str) -> str:
    known = COLLECTIVES.get(method)
    return known.label if known else method


def comm_section(run: LoadedRun) -> Section:
    """Each collective's bus bandwidth (nccl-tests' definition, kit.comm) and its sweep over sizes."""
    section = Section(anchor="comm", title=STAGE_TITLES["comm"])
    rows, sweeps, unreadable = [], [], []
    for case in (case for case in run.info.plan.cases if case.stage == "comm"):
        result = run.results.get(case.id)
        label = Cell(text=_collective_label(case.method), detail=case.id, tone="strong")
        if result is None or result.status != "ok":
            rows.append(
                Row(
                    cells=[
                        label,
                        Cell(text=str(case.gpus)),
                        status_cell(result, case.id in run.info.selected, colspan=4),
                    ]
                )
            )
            continue
        rows.append(
            Row(
                cells=[
                    label,
                    Cell(text=str(case.gpus)),
                    metric_cell(result, "bus_bandwidth_gb_s"),
                    metric_cell(result, "bus_bandwidth_at_largest_gb_s"),
                    metric_cell(result, "algorithm_bandwidth_gb_s"),
                    metric_cell(result, "time_at_smallest_us"),
                ]
            )
        )
        try:
            sweeps.append(_mean_sweep(result))
        except ValueError as exc:
            unreadable.append(f"{case.id}: {str(exc).splitlines()[0]}")
    device = "GPUs" if run.info.plan.device == "cuda" else "processes on CPU"
    section.tables.append(
        Table(
            caption="Collectives: peak bus bandwidth over the sizes, and at the largest size",
            header=[
                "Collective",
                device,
                "peak busbw (GB/s)",
                "busbw, largest (GB/s)",
                "peak algbw (GB/s)",
                "time, smallest (µs)",
            ],
            widths=[22, 10, 17, 17, 17, 17],
            rows=rows,
            notes=[
                _runs_note(run.results[c.id] for c in run.info.plan.cases if c.id in run.results and c.stage == "comm"),
                "Bus bandwidth as nccl-tests defines it: algorithm bandwidth × the collective's factor, comparable "
                "with the link rate whatever the number of ranks. The bound each case was held against is in its "
                "notes (Deviations and failures).",
            ]
            + ([f"Sweeps that could not be read: {'; '.join(unreadable)}."] if unreadable else []),
        )
    )
    if run.info.plan.device == "cpu":
        section.paragraphs.append(
            "This run is on CPU: the processes exchange data through host memory (gloo), so "
            "these bandwidths say nothing about NVLink or PCIe."
        )
    if sweeps:
        section.charts.append(
            Chart(
                title="Bus bandwidth and time over message sizes",
                svg=charts.sweep_chart("comm", sweeps),
                caption="Mean over the runs at each size. Small messages are bound by latency (time flat), large ones "
                "by bandwidth (bus bandwidth flat).",
            )
        )
    return section


# The serving table's columns: metric (kit/serve/aggregate.py SERVE_FIGURES) and its heading.
SERVE_COLUMNS = (
    ("output_throughput", "output tokens/s"),
    ("request_throughput", "requests/s"),
    ("ttft_median_s", "TTFT median (s)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
    ("itl_median_s", "ITL median (s)"),
    ("latency_median_s", "E2E median (s)"),
    ("latency_p99_s", "E2E p99 (s)"),
)


def _serving_bound(result: Result) -> Cell:
    """The roofline's ceiling on output tokens/s beside the measured value, or why there is none."""
    if result.metrics.get("output_throughput_bound"):
        return metric_cell(result, "output_throughput_bound")
    driver = result.samples[0].ranks[0] if result.samples and result.samples[0].ranks else None
    reason = ((driver.details.get("bounds") or {}).get("unavailable") if driver else None) or "not computed"
    return Cell(text="none", detail=reason, tone="muted")


def serve_section(run: LoadedRun) -> Section:
    """Each engine's burst: throughput beside its roofline bound, and the latency distribution;
    then every measured metric, as for any stage."""
    section = generic_stage("serve", run)
    rows = []
    for case in (case for case in run.info.plan.cases if case.stage == "serve"):
        result = run.results.get(case.id)
        name = Cell(text=f"{case.model} {case.method}", detail=case.id, tone="strong")
        if result is None or result.status != "ok":
            rows.append(Row(cells=[name, status_cell(result, case.id in run.info.selected, len(SERVE_COLUMNS) + 1)]))
            continue
        measured = [metric_cell(result, metric) for metric, _ in SERVE_COLUMNS]
        rows.append(Row(cells=[name, measured[0], _serving_bound(result), *measured[1:]]))
    section.tables.insert(
        0,
        Table(
            caption=f"{section.title}: the burst of each engine, mean ± std over its runs",
            header=["Case", SERVE_COLUMNS[0][1], "bound (tokens/s)", *[label for _, label in SERVE_COLUMNS[1:]]],
            widths=[16, 11, 11, 9, 9, 9, 9, 13, 13],
            rows=rows,
            dense=True,
            notes=[
                "Definitions are those of vLLM's `vllm bench serve`: TTFT from sending a request to its first token "
                "event; ITL, the gaps between successive token events of a request, each stamped as the client reads "
                "it (events read together are microseconds apart, so a median ITL near zero says they arrived in "
                "bursts); E2E from sending to the end of the stream; throughput over the burst's duration, from its "
                "release to the end of its last request.",
                "bound: the roofline's ceiling on output tokens/s for this burst on this host's GPUs (weights and KV "
                "cache read once per decode step, FLOPs at the dense peak of manifests/hardware.yaml); none where no "
                "peak is known, with the reason.",
            ],
        )
    )
    return section


def generic_stage(stage: str, run: LoadedRun) -> Section:
    """Every metric of every case: the whole of a stage without a dedicated layout, the rest of one with."""
    section = Section(anchor=stage, title=STAGE_TITLES.get(stage, stage))
    rows = []
    for case in (case for case in run.info.plan.cases if case.stage == stage):
        result = run.results.get(case.id)
        if result is None or result.status != "ok":
            rows.append(
                Row(cells=[Cell(text=case.id, tone="mono"), status_cell(result, case.id in run.info.selected, 3)])
            )
            continue
        recorded = {name: metric for name, metric in result.metrics.items() if metric is not None}
        if not recorded:
            rows.append(
                Row(
                    cells=[
                        Cell(text=case.id, tone="mono"),
                        Cell(
                            text="ok, with no metric in result.json: its measurements are in the raw samples (see the "
                            "raw-data index)",
                            tone="muted",
                            colspan=3,
                        ),
                    ]
                )
            )
        for name, metric in recorded.items():
            rows.append(
                Row(
                    cells=[
                        Cell(text=case.id, tone="mono"),
                        Cell(text=metric_label(name)),
                        Cell(text=mean_std(metric)),
                        Cell(text=metric.unit),
                    ]
                )
            )
    section.tables.append(
        Table(
            caption=f"{section.title}: every measured metric",
            header=["Case", "Metric", "Mean ± std", "Unit"],
            widths=[35, 25, 25, 15],
            rows=rows,
        )
    )
    return section


# The figure a variant is set beside its twin by, per workload.
VARIANT_METRICS = {"train": "tokens_per_s", "comm": "bus_bandwidth_gb_s"}


def variants_section(run: LoadedRun, protocol: Protocol) -> Section | None:
    """Each variant case beside the case it repeats (its twin), by the stage's headline figure:
    with NVLink and without it on one host (claims C4, C8, C27)."""
    variants = [case for case in run.info.plan.cases if case.variant is not None]
    if not variants:
        return None
    section = Section(anchor="variants", title="Variants beside their twins")
    for name in dict.fromkeys(case.variant for case in variants):
        spec = protocol.variants.get(name)
        rows = []
        for case in (c for c in variants if c.variant == name):
            metric = VARIANT_METRICS.get(case.workload)
            twin, variant = run.results.get(case.variant_of), run.results.get(case.id)
            cells = [Cell(text=case.variant_of, tone="mono"), Cell(text=metric_label(metric) if metric else "-")]
            if metric is None or not has_metrics(twin, metric) or not has_metrics(variant, metric):
                missing = variant if not has_metrics(variant, metric or "") else twin
                cells.append(status_cell(missing, case.id in run.info.selected or case.variant_of in run.info.selected, 3))
            else:
                ratio = variant.metrics[metric].mean / twin.metrics[metric].mean if twin.metrics[metric].mean else None
                cells += [metric_cell(twin, metric), metric_cell(variant, metric),
                          Cell(text=f"{ratio:.2f} ×" if ratio is not None else "-")]  # fmt: skip
            rows.append(Row(cells=cells))
        notes = [f"{spec.label}: {', '.join(f'{k}={v}' for k, v in spec.env.items())} on top of the twin's environment."] if spec else []
        if run.info.plan.device == "cpu" and spec:
            notes.append(spec.cpu_note + ": the pairs show run-to-run spread only.")
        section.tables.append(
            Table(
                caption=f"{name}: each case without and with the variant",
                header=["Case (twin)", "Figure", "Twin", name, f"{name} / twin"],
                rows=rows,
                notes=notes,
            )
        )
    return section


def without_variants(run: LoadedRun) -> LoadedRun:
    """The run as the stage sections lay it out: the variant cases have a section of their own."""
    plan = run.info.plan.model_copy(update={"cases": [c for c in run.info.plan.cases if c.variant is None]})
    return run.model_copy(update={"info": run.info.model_copy(update={"plan": plan})})


def stage_sections(run: LoadedRun, protocol: Protocol) -> list[Section]:
    planned = list(dict.fromkeys(case.stage for case in run.info.plan.cases))
    order = list(STAGE_TITLES) + [stage for stage in planned if stage not in STAGE_TITLES]
    paired = variants_section(run, protocol)
    frameworks = framework_section(run)
    run = without_variants(run)
    sections = []
    for stage in order:
        reason = stage_not_run(stage, run, protocol)
        if reason is not None:
            sections.append(Section(anchor=stage, title=STAGE_TITLES.get(stage, stage), not_run=reason))
        elif stage in TRAIN_MATRIX_STAGES:
            sections.append(train_matrix(stage, run))
        elif stage == "maxbatch":
            sections.append(maxbatch_section(run))
        elif stage == "scaling":
            sections.append(scaling_section(run))
        elif stage == "comm":
            sections.append(comm_section(run))
        elif stage == "serve":
            sections.append(serve_section(run))
        else:
            sections.append(generic_stage(stage, run))
    return sections + [extra for extra in (frameworks, paired) if extra is not None]
