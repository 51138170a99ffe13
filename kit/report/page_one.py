"""Page one of the report, for a reviewer who reads one page: who signed the run (kit.signing:
verified against the allowed signers given, or unsigned; a failing signature in red), the host
(GPUs, interconnect, driver, images by digest) and the headline figures with their spread, the fastest pre-training
and fine-tuning per model, each engine's serving (its burst, and its capacity within the latency objectives), the
all-reduce bus bandwidth. Beside each
figure: what the kit's analytical model lets it expect of this host's GPUs, the paper's value,
energy per 1k tokens and cost per 1M tokens; each links to its section and names the case
folder of its raw samples."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Sequence

from kit.calibration import achievable_mfu, matmul_text
from kit.comm import sweep_bound
from kit.energy import JOULES_PER_TOKEN, PRICE_HINT, cost_per_million_tokens
from kit.expectation import Expecting
from kit.hardware import load_hardware
from kit.fingerprint import Calibration
from kit.predictions import device_spec, serving_bounds, training_throughput_bound
from kit.protocol import Case
from kit.reference import Reference, ValueRelation, format_value, metric_label, reference_path, unit_scale
from kit.report.capacity_section import Capacities
from kit.report.cells import SIGNATURE_TONES, STATUS_TONES, devices_text, has_metrics, mean_std, method_label, percent, throttle_marked
from kit.report.host_state import achievable, gpu_settings, measured_state_fact, run_calibration
from kit.report.load import LoadedRun
from kit.report.model import Cell, Fact, PageOne, Row, Section, Table
from kit.report.sections import fingerprint_facts, image_section, peak_figures
from kit.results import Metric, Result
from kit.serve.slo import DEFAULT_SLO, Slo, SweepPoint, capacity
from kit.stages.comm import sweep_of

# Per model, the fastest case of each training stage.
TRAINING_STAGES = {
    "pretrain": "Pre-training: the fastest method per model",
    "finetune": "Fine-tuning: the fastest method per model",
}
# Shown in their place when neither measured anything, as on a host of fewer GPUs than their cases
# need: the training a one-GPU host measures is the scaling stage's first count and the breakdown.
FALLBACK_STAGES = {
    "scaling": "Data-parallel scaling: the fastest GPU count per model",
    "profile": "Module breakdown: the fastest profiled step per model",
}
ENERGY_ANCHOR = "energy"  # the section of energy and cost, where the report has one
COLUMNS = 6


def _per_run(metric: Metric, values: Sequence[float], unit: str) -> Metric:
    """The same runs' spread of a figure derived run by run from `metric`."""
    values = list(values)
    return metric.model_copy(update={
        "mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
        "per_run": values, "unit": unit,
    })  # fmt: skip


def with_unit(metric: Metric, unit: str, runs: bool = False) -> str:
    """`mean ± std unit`; for one run the value alone, said to be one run's where `runs`."""
    if metric.std is None:
        return f"{format_value(metric.mean)} {unit}" + (" (1 run)" if runs else "")
    return f"{mean_std(metric)} {unit}"


def _note_about(result: Result, *words: str) -> str | None:
    """The first of the result's notes that speaks of any of `words`."""
    return next((note for note in result.notes if any(word in note.casefold() for word in words)), None)


def _devices(result: Result) -> list[str]:
    return [rank.device_name for sample in result.samples for rank in sample.ranks]


def _ratio(measured: float, bound: float, physical: bool = True) -> str:
    """"measured 0.31 × bound"; above a physical bound (the datasheet's) is impossible, above one
    at what the preflight measured is not."""
    ratio = measured / bound
    return f"measured {format_value(ratio)} × bound" + ((": above it, impossible" if physical else ": above it") if ratio > 1 else "")


# --- Beside each figure -------------------------------------------------------------------------


def paper_cell(reference: Reference | None, case: Case, metrics: Sequence[str]) -> Cell:
    """The value the reference file records for this case and metric (a transcribed table value
    or a claim's published value), labelled with where and on which platform. A case fitted to
    fewer GPUs than the paper's is not compared with it."""
    if reference is None:
        return Cell(text="not compared", tone="muted")
    if case.fitted:  # the figure's label says it is fitted
        return Cell(text="not compared", tone="muted")
    case_id = case.id
    found = []
    for value in reference.tables:
        if value.case == case_id and value.metric in metrics:
            spread = f" ± {format_value(value.std, trim=True)}" if value.std else ""
            found.append((value.metric, f"{format_value(value.mean, trim=True)}{spread} {value.unit}",
                          f"{value.table}, on {reference.platforms[value.platform].label}"))  # fmt: skip
    for claim in reference.claims:
        platforms = ", ".join(reference.platforms[name].label for name in claim.platform_names) or "any platform"
        for relation in claim.relations:
            if isinstance(relation, ValueRelation) and relation.measure.case == case_id and relation.measure.metric in metrics:
                published = relation.published.describe(unit_scale(relation.published.unit))
                found.append((relation.measure.metric, published, f"{claim.id}, on {platforms}"))
    if not found:
        return Cell(text="none", tone="muted")
    prefix = len({metric for metric, _, _ in found}) > 1
    return Cell(
        text="; ".join(f"{metric_label(metric)} {text}" if prefix else text for metric, text, _ in found),
        detail="; ".join(dict.fromkeys(where for _, _, where in found)),
    )


def energy_cell(result: Result, link: str) -> Cell:
    """Joules per 1k tokens with their spread, or why there is no reading: never a zero."""
    metric = result.metrics.get(JOULES_PER_TOKEN)
    if metric is not None:
        return Cell(text=with_unit(_per_run(metric, [1000 * v for v in metric.per_run], "J"), "J"), link=link)
    reason = _note_about(result, "energy", "joules")
    if reason is not None:
        return Cell(text="not measured", detail=reason.split("not measured, ", 1)[-1], tone="muted", link=link)
    if result.case.device != "cuda":
        return Cell(text="no energy reading (CPU)", tone="muted", link=link)
    return Cell(text="not measured", detail="none in result.json", tone="muted", link=link)


def cost_cell(result: Result, throughput: Metric, gpu_hour_price: float | None, link: str) -> Cell:
    """Cost per 1M tokens at the price given, run by run; or how to give a price."""
    if result.case.device != "cuda":
        return Cell(text="not priced", detail="a CPU case uses no GPU-hours", tone="muted", link=link)
    if gpu_hour_price is None:
        return Cell(text="no price given", detail="set --gpu-hour-price", tone="muted", link=link)
    costs = [cost_per_million_tokens(value, result.case.gpus, gpu_hour_price) for value in throughput.per_run]
    return Cell(text=mean_std(_per_run(throughput, costs, "per 1M tokens")), link=link)


def figure_cell(text: str, case: Case, section: str) -> Cell:
    """The figure's name, linked to its section, over the folder of its raw samples in the run
    directory (result.json, runs/<k>/rank-<r>.json), which the raw-data index lists with its digest."""
    return Cell(text=text, detail=f"cases/{case.id}/", tone="strong", link=f"#{section}")


def _without_measurement(label: Cell, result: Result | None) -> Row:
    """A figure whose case ended without one: its status and reason across the row."""
    if result is None:
        status = Cell(text="no result", detail="the run ended before this case finished", tone="bad")
    else:
        status = Cell(text=result.status, detail=result.reason, tone=STATUS_TONES.get(result.status, "plain"))
    return Row(cells=[label, status.model_copy(update={"colspan": COLUMNS - 1})])


# --- The headline figures -----------------------------------------------------------------------


def _training_gap(result: Result) -> str:
    """Why the model gives no throughput bound (nor MFU) for a training case."""
    case, params = result.case, result.case.params
    if case.device != "cuda":
        return "no peak FLOPS is known for a CPU"
    if params.quantization != "none" or params.peft != "none":
        return "FLOPs model: full training only"
    if getattr(params, "tensor_parallel", 1) > 1:
        return "the bound does not model tensor parallelism"
    return f"no {params.dtype} peak in manifests/hardware.yaml for {', '.join(sorted(set(_devices(result))))}"


def claimed_on_this_host(expecting: Expecting | None, case_id: str, metrics: Sequence[str]) -> list[tuple[str, str]]:
    """Each claim's published figure of this case scaled to this host's GPUs, as (value, the
    value's basis and the measurement against it): "C21 on this host: ... measured 1.09 × expected"."""
    if expecting is None:
        return []
    return [(found.expected, f"{claim_id} on this host: {found.expected} ({found.basis})"
             + (f": {found.versus}, {found.verdict}" if found.versus else ""))
            for claim_id, found in expecting.figure(case_id, metrics) if found.expected]  # fmt: skip


def mfu_words(result: Result, calibration: Calibration | None) -> str:
    """MFU against the datasheet peak and against the matmul the preflight measured on this host
    (or why not), run by run."""
    mfu, tflops, dtype = result.metrics.get("mfu"), result.metrics.get("achieved_tflops"), result.case.params.dtype
    parts = [f"MFU {with_unit(_per_run(mfu, [100 * v for v in mfu.per_run], '%'), '%')} of the datasheet peak" if mfu
             else f"MFU not computed: {_training_gap(result)}"]  # fmt: skip
    if calibration is not None and tflops is not None:
        if calibration.matmul_dtype == dtype:
            shares = achievable_mfu(tflops.per_run, result.case.gpus, calibration)
            where = "a GPU" if calibration.device == "cuda" else "the host"
            parts.append(f"{with_unit(_per_run(tflops, [100 * v for v in shares], '%'), '%')} of the preflight's "
                         f"{matmul_text(calibration)} on {where}")  # fmt: skip
        else:
            parts.append(f"not against the preflight's {calibration.matmul_dtype} matmul (the case computes in {dtype})")
    return "; ".join(parts)


def training_row(
    result: Result, reference: Reference | None, gpu_hour_price: float | None, energy: str, expecting: Expecting | None = None,
    calibration: Calibration | None = None,
) -> Row:
    case, throughput = result.case, result.metrics["tokens_per_s"]
    measured = throttle_marked(Cell(text=with_unit(throughput, "tokens/s", runs=True), detail=mfu_words(result, calibration)), result)
    spec = device_spec(case, _devices(result), load_hardware())
    bound = training_throughput_bound(case, spec)
    measured_gpu = achievable(result, spec, calibration)
    reachable = training_throughput_bound(case, measured_gpu.spec) if measured_gpu else None
    claimed = claimed_on_this_host(expecting, case.id, ("tokens_per_s",))
    said = [words for _, words in claimed]
    if bound and reachable:
        expected = Cell(text=f"≤ {format_value(reachable)} tokens/s", detail="; ".join([
            f"at the preflight's {measured_gpu.which}: {_ratio(throughput.mean, reachable, physical=False)}",
            f"≤ {format_value(bound)} at the datasheet's: {_ratio(throughput.mean, bound)}", *said]))  # fmt: skip
    elif bound:
        expected = Cell(text=f"≤ {format_value(bound)} tokens/s", detail="; ".join([_ratio(throughput.mean, bound), *said]))
    elif claimed:
        expected = Cell(text=claimed[0][0], detail="; ".join([*said, f"no bound: {_training_gap(result)}"]))
    else:
        expected = Cell(text="no expectation", detail=_training_gap(result), tone="muted")
    link = energy or f"#{result.stage}"
    label = figure_cell(f"{case.model} {method_label(case.method)}, {devices_text(case)}", case, result.stage)
    return Row(cells=[label, measured, expected, paper_cell(reference, case, ("tokens_per_s", "mfu")),
                      energy_cell(result, link), cost_cell(result, throughput, gpu_hour_price, link)])  # fmt: skip


def training_rows(run: LoadedRun, stage: str, reference: Reference | None, gpu_hour_price: float | None, energy: str) -> list[Row]:
    """Per model, the case of the stage with the highest mean tokens/s (variants left out)."""
    cases = [c for c in run.info.plan.cases if c.stage == stage and c.variant is None and c.id in run.info.selected]
    expecting = Expecting(reference, [run.measured]) if reference is not None and cases else None
    rows = []
    for model in dict.fromkeys(case.model for case in cases):
        results = [run.results.get(case.id) for case in cases if case.model == model]
        done = [result for result in results if has_metrics(result, "tokens_per_s")]
        if done:
            best = max(done, key=lambda result: result.metrics["tokens_per_s"].mean)
            rows.append(training_row(best, reference, gpu_hour_price, energy, expecting, run_calibration(run)))
            continue
        statuses = Counter(result.status if result else "no result" for result in results)
        rows.append(Row(cells=[
            Cell(text=f"{model}", detail=f"cases/{stage}.{model}.*/", tone="strong", link=f"#{stage}"),
            Cell(text="no measurement", detail=", ".join(f"{count} {status}" for status, count in statuses.items()),
                 tone="bad", colspan=COLUMNS - 1),
        ]))  # fmt: skip
    return rows


def _ttft_bound_s(result: Result) -> float | None:
    """The least time to first token of a prompt served alone (kit.predictions.serving_bounds),
    as each run's driver recorded it."""
    bounds = [(rank.details.get("bounds") or {}).get("prefill_one") for sample in result.samples
              for rank in sample.ranks if rank.rank == 0]  # fmt: skip
    return statistics.fmean(bound["seconds"] for bound in bounds) if bounds and all(bounds) else None


def serving_reachable(result: Result, calibration: Calibration | None) -> tuple[float, str] | None:
    """The burst's bound on output tokens/s at what the preflight measured of the engine's GPUs
    (kit.predictions.serving_bounds with the measured figures where lower), and which figures;
    None where nothing measured lies below the datasheet."""
    names = [name.strip() for name in _devices(result) for name in name.split(",")]
    measured_gpu = achievable(result, device_spec(result.case, names, load_hardware()), calibration)
    tokens = [(rank.details.get("bounds") or {}).get("output_tokens") for sample in result.samples for rank in sample.ranks
              if rank.rank == 0]  # fmt: skip
    if measured_gpu is None or not tokens or None in tokens:
        return None
    found = [serving_bounds(result.case, measured_gpu.spec, count) for count in tokens]
    if None in found:
        return None
    return statistics.fmean(bound.max_output_tokens_per_s for bound in found), measured_gpu.which


def serving_row(case: Case, result: Result | None, reference: Reference | None, gpu_hour_price: float | None,
                energy: str, points: Sequence[SweepPoint] = (), calibration: Calibration | None = None) -> Row:  # fmt: skip
    """The burst's throughput and TTFT, the share of its requests that failed where some did, and
    the capacity of the case's sweep (`points`) within the objectives, with its concurrency."""
    label = figure_cell(f"{case.model} {case.method}, {devices_text(case)}", case, "serve")
    if not has_metrics(result, "output_throughput", "ttft_median_s", "ttft_p99_s"):
        return _without_measurement(label, result)
    throughput, median, p99 = (result.metrics[name] for name in ("output_throughput", "ttft_median_s", "ttft_p99_s"))
    said = [f"TTFT median {with_unit(median, 's')}, p99 {with_unit(p99, 's')}"]
    failed = result.metrics.get("error_rate")
    if failed and failed.mean > 0:
        said.append(f"{percent(failed.mean)} failed")
    best = capacity(points)
    if points:
        said.append(f"capacity {format_value(best.figures.output_throughput)} tokens/s at N={best.concurrency}"
                    if best else "no sweep point within the objectives")  # fmt: skip
    measured = throttle_marked(Cell(text=with_unit(throughput, "tokens/s", runs=True), detail="; ".join(said)), result)
    bound, ttft_bound = result.metrics.get("output_throughput_bound"), _ttft_bound_s(result)
    reachable = serving_reachable(result, calibration) if bound is not None else None
    if bound is None:
        expected = Cell(text="no expectation", detail=_note_about(result, "bound") or "no roofline bound", tone="muted")
    else:
        detail = _ratio(throughput.mean, bound.mean)
        if ttft_bound:
            detail += f"; TTFT median {format_value(median.mean / ttft_bound)} × its bound {format_value(1000 * ttft_bound)} ms"
        expected = Cell(text=f"≤ {format_value(bound.mean)} tokens/s", detail=detail)
        if reachable is not None:
            value, which = reachable
            expected = Cell(text=f"≤ {format_value(value)} tokens/s", detail=(
                f"at the preflight's {which}: {_ratio(throughput.mean, value, physical=False)}; ≤ {format_value(bound.mean)} "
                f"at the datasheet's: {detail}"))  # fmt: skip
    link = energy or "#serve"
    cost = cost_cell(result, throughput, gpu_hour_price, link)
    if best and gpu_hour_price is not None and case.device == "cuda":
        at_capacity = cost_per_million_tokens(best.figures.output_throughput, case.gpus, gpu_hour_price)
        cost = cost.model_copy(update={"detail": f"at capacity {format_value(at_capacity)}"})
    return Row(cells=[label, measured, expected,
                      paper_cell(reference, case, ("output_throughput", "ttft_median_s", "ttft_p99_s")),
                      energy_cell(result, link), cost])  # fmt: skip


def comm_row(case: Case, result: Result | None, reference: Reference | None, calibration: Calibration | None = None) -> Row:
    label = figure_cell(f"all-reduce, {devices_text(case)}", case, "comm")
    if not has_metrics(result, "bus_bandwidth_gb_s"):
        return _without_measurement(label, result)
    busbw = result.metrics["bus_bandwidth_gb_s"]
    bound = sweep_bound(sweep_of(result.samples[0]), case.device, load_hardware())
    preflight = calibration.all_reduce_busbw if calibration is not None else None
    also = f"; the preflight's all-reduce: {format_value(preflight.value)} GB/s ({preflight.how})" if preflight else ""
    expected = (
        Cell(text=f"≤ {format_value(bound.gbps)} GB/s", detail=f"link bound ({bound.link.split(':')[0]}); "
             f"{_ratio(busbw.mean, bound.gbps)}{also}")  # fmt: skip
        if bound.known
        else Cell(text="no expectation", detail=bound.reason + also, tone="muted")
    )
    measured = throttle_marked(Cell(text=with_unit(busbw, "GB/s", runs=True), detail="bus bandwidth, peak over the sizes"), result)
    return Row(cells=[label, measured, expected, paper_cell(reference, case, ("bus_bandwidth_gb_s",)),
                      Cell(text="not a token figure", tone="muted", colspan=2)])  # fmt: skip


def headline_table(
    run: LoadedRun, reference: Reference | None, sections: Sequence[Section], gpu_hour_price: float | None,
    capacities: Capacities, slo: Slo,
) -> Table:
    selected = [case for case in run.info.plan.cases if case.variant is None and case.id in run.info.selected]
    anchors: Collection[str] = {section.anchor for section in sections}
    energy = f"#{ENERGY_ANCHOR}" if ENERGY_ANCHOR in anchors else ""
    not_run = {section.anchor: section.not_run for section in sections if section.not_run}
    training = {stage: (title, training_rows(run, stage, reference, gpu_hour_price, energy))
                for stage, title in TRAINING_STAGES.items()}
    if not any(has_metrics(run.results.get(c.id), "tokens_per_s") for c in selected if c.stage in TRAINING_STAGES):
        training |= {stage: (title, rows) for stage, title in FALLBACK_STAGES.items()
                     if (rows := training_rows(run, stage, reference, gpu_hour_price, energy))}
    groups = {
        **training,
        "serve": (f"Serving: each engine and model, a burst of requests; its capacity, N requests in flight, within {slo.short()}",
                  [serving_row(c, run.results.get(c.id), reference, gpu_hour_price, energy, capacities.get(c.id, []),
                               run_calibration(run))
                   for c in selected if c.stage == "serve"]),
        "comm": ("Communication: all-reduce between the GPUs",
                 [comm_row(c, run.results.get(c.id), reference, run_calibration(run))
                  for c in selected if c.stage == "comm" and c.method == "all_reduce"]),
    }  # fmt: skip
    rows = []
    for anchor, (title, members) in groups.items():
        rows.append(Row(heading=True, cells=[Cell(text=title, tone="strong", link=f"#{anchor}", colspan=COLUMNS)]))
        rows += members or [Row(cells=[Cell(text=not_run.get(anchor) or "No case of this kind in the run.",
                                            tone="muted", colspan=COLUMNS)])]  # fmt: skip
    price = f" ({format_value(gpu_hour_price, trim=True)} / GPU-hour)" if gpu_hour_price is not None else ""
    return Table(
        caption="Headline figures: measured on this host, expected of it, and published",
        header=["Figure (raw samples)", "Measured (mean ± std)", "Expected on this host", "Paper",
                "Energy per 1k tokens", f"Cost per 1M tokens{price}"],
        widths=[25, 25, 21, 8, 9, 12],
        rows=rows,
        notes=[  # one paragraph: page one ends where the page does
            "Measured: mean ± sample standard deviation over the case's runs; fastest: the highest mean tokens/s of "
            "the model's cases in the stage; each figure links to its section, above its raw samples' folder. "
            "Expected: the bound kit.predictions computes for this host's GPUs "
            "(manifests/hardware.yaml: roofline at the datasheet peak; TTFT of a prompt served alone; the link's "
            "rate), which no run can pass; the kit has no model of typical efficiency"
            + (", except what the preflight measured of the GPUs (Calibration, above): the roofline at those figures where lower "
               "comes first, and MFU is also of its matmul. " if run_calibration(run) else ". ")
            + f"Paper: the value {reference_path().name} records for the case and metric"
            + (" (not compared: the report was rendered without --compare reference). " if reference is None else ". ")
            + "Energy: 1000 × joules_per_token (NVML's energy counter, all the case's GPUs). Cost: GPUs × price per "
            "GPU-hour × the hours a million tokens take at the measured throughput"
            + (f", at {format_value(gpu_hour_price, trim=True)} per GPU-hour." if gpu_hour_price is not None else f"; {PRICE_HINT}."),
        ],  # fmt: skip
    )


def short_digest(reference: str) -> str:
    """`[repository@]sha256:` and the digest's first 16 hex digits, as a reader compares them."""
    head, _, digest = reference.rpartition("sha256:")
    return f"{head}sha256:{digest[:16]}…" if len(digest) > 16 else reference


def host_facts(run: LoadedRun) -> list[Fact]:
    """Who signed the run, the machine as its fingerprint describes it, the peaks the kit holds it
    to, and the images its cases ran in by digest."""
    info = run.info
    facts = [Fact(label="Run", value=f"{info.run_id}, profile {info.profile}, {info.started_at} to "
                                     f"{info.finished_at or 'not recorded'} (UTC), on {run.hostname}"),
             Fact(label="Signature", value=run.signature.summary, tone=SIGNATURE_TONES[run.signature.state])]  # fmt: skip
    fingerprint = run.before.fingerprint
    if fingerprint is None:
        facts.append(Fact(label="GPUs", value=f"{run.measured.devices} (run.json; fingerprint {run.before.missing})"))
    else:
        described = dict(fingerprint_facts(fingerprint, run.hostname))
        settings = gpu_settings(fingerprint)
        facts += [Fact(label="GPUs", value=described["GPUs"]),
                  Fact(label="Link, driver" + (", power" if settings else ""), value=f"{described['GPU topology']}; driver, CUDA "
                       f"{described['Driver, CUDA (driver)']}" + (f"; {settings}" if settings else ""))]  # fmt: skip
    gpu_names = [gpu.name for gpu in fingerprint.gpus.gpus if gpu.name] if fingerprint else run.measured.gpu_names
    if gpu_names:
        facts.append(Fact(label="Peak figures", value=peak_figures(gpu_names, load_hardware())))
    facts.append(measured_state_fact(run))
    images = image_section(run)
    if images.not_run:
        facts.append(Fact(label="Images", value=images.not_run, tone="muted"))
    else:
        listed = [f"{row.cells[0].text} {short_digest(row.cells[1].text)}" for row in images.tables[0].rows]
        facts.append(Fact(label="Images", value="; ".join(listed) + " (full digests: Appendix, Image digests)"))
    return facts


def page_one(
    run: LoadedRun, reference: Reference | None, sections: Sequence[Section], gpu_hour_price: float | None = None,
    capacities: Capacities | None = None, slo: Slo = DEFAULT_SLO,
) -> PageOne:
    """Page one of the report of `run`; `sections` are the report's, whose anchors its figures link to;
    `capacities` the serve cases' sweeps held to `slo` (kit.report.capacity_section)."""
    headline = headline_table(run, reference, sections, gpu_hour_price, capacities or {}, slo)
    return PageOne(host=host_facts(run), headline=headline)
