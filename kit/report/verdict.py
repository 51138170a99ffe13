"""What page one answers before its figures, each a function of its own over the run: the verdict
in three lines (what this host does, how that stands against what is expected of it, and the one
thing that limits it), what the report cannot tell and what to run to learn it, and the host's
checks and the kit's provenance as pass, warn or fail."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kit.measure.registry import BY_NAME
from kit.plan.protocol import build_plan, load_protocol
from kit.reference.claims import ClaimOutcome, verdict_counts
from kit.reference.expectation import ClaimExpectation, expectation_counts
from kit.report.cells import devices_text, has_metrics, method_label, metric_of, with_unit
from kit.report.loaded_run import LoadedRun
from kit.report.model import Fact, Tone
from kit.report.ranking import KINDS, method_kind, standing, workload
from kit.report.sections.common import why_unmeasured
from kit.report.sections.environment import fingerprint_facts, host_checks, kit_provenance
from kit.rundir.schema import Result
from kit.units import format_value

TONES: dict[str, Tone] = {"pass": "good", "warn": "warn", "fail": "bad", "skip": "muted"}
WORDS = {"pass": "pass", "skip": "not checked"}  # a line of checks none of which failed or warned
# What page one's first line says a host does, per stage: the verb, and the figure with its unit;
# the scaling stage and the breakdown stand in for training where neither training stage measured.
DOES = {
    "pretrain": ("pre-trains", "tokens_per_s", "tokens/s"),
    "finetune": ("fine-tunes", "tokens_per_s", "tokens/s"),
    "serve": ("serves", "output_throughput", "output tokens/s"),
    "comm": ("all-reduces at", "bus_bandwidth_gb_s", "GB/s of bus bandwidth"),
}
INSTEAD = {
    "scaling": ("trains", "tokens_per_s", "tokens/s"),  # data-parallel only where on several GPUs: said by its devices
    "profile": ("trains (module breakdown)", "tokens_per_s", "tokens/s"),
}


def gpu_count(run: LoadedRun) -> int:
    """The host's GPUs, as its fingerprint lists them (else run.json): 0 on a CPU."""
    fingerprint = run.before.fingerprint
    if fingerprint is not None and fingerprint.gpus.gpus:
        return len(fingerprint.gpus.gpus)
    return len(run.info.host.gpus)


def primary(run: LoadedRun) -> list[Result]:
    """The results of the run's selected cases as the protocol writes them (no variant)."""
    return [
        run.results[c.id]
        for c in run.info.plan.cases
        if c.variant is None and c.id in run.results and c.id in run.info.selected
    ]


def measured(run: LoadedRun, results: Sequence[Result], metric: str) -> list[Result]:
    """Those of `results` with `metric` that the kit stands behind (kit.measure.validity)."""
    return [result for result in results if has_metrics(result, metric) and not run.invalid.get(result.case_id)]


# --- The verdict --------------------------------------------------------------------------------


def host_does(run: LoadedRun) -> str:
    """Per stage, the smallest model's fastest figure of the first kind of method it has (full-
    parameter where it has one), on the run's devices."""
    found = {
        stage: measured(run, [r for r in primary(run) if r.stage == stage], metric)
        for stage, (_, metric, _) in {**DOES, **INSTEAD}.items()
    }
    stages = DOES if found["pretrain"] or found["finetune"] else {**INSTEAD, **DOES}
    done = []
    for stage, (verb, metric, unit) in stages.items():
        if not found[stage]:
            continue
        model = found[stage][0].case.model
        mine = [r for r in found[stage] if r.case.model == model]
        # the fastest of the first kind of method it has (standing is None for a kind it has none of)
        best = next(
            ranked.best
            for kind in KINDS
            if (ranked := standing([r for r in mine if method_kind(r.case) == kind], metric)) is not None
        )
        figure = with_unit(metric_of(best, metric), unit, runs=True)
        if stage == "comm":
            done.append(f"{verb} {figure}")
        else:
            how = best.case.method if stage == "serve" else method_label(best.case.method)
            said = ", ".join(filter(None, [how, workload(best.case), devices_text(best.case)]))  # the workload, said
            done.append(f"{verb} {model} at {figure} ({said})")
    fingerprint = run.before.fingerprint
    devices = (
        dict(fingerprint_facts(fingerprint, run.hostname))["GPUs"]
        if fingerprint and fingerprint.gpus.gpus
        else run.measured.devices
    )
    return f"{devices}: " + ("; ".join(done) if done else "no figure measured") + "."


def _inconclusive(counts) -> str:
    """ ", 2 inconclusive" where some verdicts rest on too few runs to deviate (kit.reference.claims.judge)."""
    return f", {counts['inconclusive']} inconclusive" if counts.get("inconclusive") else ""


def against_expectation(
    run: LoadedRun,
    outcomes: Sequence[ClaimOutcome] | None,
    expectations: Sequence[ClaimExpectation],
    fractions: Sequence[float],
) -> tuple[str, Tone]:
    """The paper's verdicts on this host, the kit's own expectation for its GPUs, and how far the
    headline figures reach toward their physical bounds."""
    parts: list[str] = []
    tone: Tone = "muted"
    if outcomes is None:
        parts.append("the paper's findings were not compared (render with --compare reference)")
    elif not run.info.plan.comparable_to_reference:
        parts.append(f"not judged against the paper: profile {run.info.profile} is not comparable to the reference")
    else:
        counts = verdict_counts(o.verdict for o in outcomes)
        deviating = [o.id for o in outcomes if o.verdict == "deviates"]
        parts.append(
            f"the paper's findings: {counts['consistent']} hold, {counts['deviates']} deviate"
            + (f" ({', '.join(deviating)})" if deviating else "")
            + _inconclusive(counts)
            + f", {counts['not measured']} not measured"
        )
        tone = "bad" if deviating else "good" if counts["consistent"] else "muted"
        against = expectation_counts(expectations)
        if any(against.values()):
            parts.append(
                f"the kit's expectation for these GPUs (of {sum(against.values())} findings about others): "
                f"{against['consistent']} consistent, {against['deviates']} deviate{_inconclusive(against)}"
            )
            tone = "bad" if against["deviates"] else tone
    if fractions:
        low, high = min(fractions), max(fractions)
        parts.append(f"the headline figures reach {format_value(low)}–{format_value(high)} × their physical bounds")
    invalid = len(run.invalid)
    if invalid:
        parts.append(
            f"{invalid} figure{'s' * (invalid > 1)} past {'their' if invalid > 1 else 'its'} bound, marked invalid"
        )
        tone = "bad"
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + ".", tone


def limited_by(run: LoadedRun) -> tuple[str, Tone]:
    """The one thing that most limits what the run shows, the first of: a failing host check, a
    CPU in place of GPUs, fewer GPUs than the cases need, figures past their bounds, memory,
    failures, missing software."""
    checks, _ = host_checks(run)
    failed = [check for check in checks if check.status == "fail"]
    if failed:
        return f"the host check {failed[0].name} fails: {failed[0].observed}", "bad"
    selected = [run.results[cid] for cid in run.info.selected if cid in run.results]
    if run.info.plan.device == "cpu":
        return (
            "a CPU: the smoke profile runs the kit's code paths on CPU processes; no figure here is of a GPU, "
            "nor comparable to the paper"
        ), "warn"
    gpus = gpu_count(run)
    short = [r for r in selected if r.status == "skipped" and r.case.gpus > gpus]
    if short:
        needed = ", ".join(str(n) for n in sorted({r.case.gpus for r in short}))
        return f"its {gpus} GPU{'s' * (gpus != 1)}: {len(short)} of {len(selected)} cases need more ({needed})", "warn"
    if run.invalid:
        return (
            f"figures past their physical bounds ({', '.join(run.invalid)}): the measurement or the hardware table is wrong",
            "bad",
        )
    statuses = Counter(r.status for r in selected)
    if statuses["oom"]:
        models = Counter(r.case.model for r in selected if r.status == "oom")
        return (
            f"GPU memory: {statuses['oom']} of {len(selected)} cases ran out of it ("
            + ", ".join(f"{count} of {model}" for model, count in models.most_common())
            + ")"
        ), "warn"
    failed_cases = [r.case_id for r in selected if r.status in ("error", "timeout")]
    if failed_cases:
        return (
            f"{len(failed_cases)} cases failed ({', '.join(failed_cases[:3])}{', ...' if len(failed_cases) > 3 else ''})",
            "bad",
        )
    if statuses["unavailable"]:
        return f"{statuses['unavailable']} cases unavailable on this host (see what this report cannot tell)", "warn"
    return "nothing the run shows: every case measured", "good"


def verdict_box(
    run: LoadedRun,
    outcomes: Sequence[ClaimOutcome] | None,
    expectations: Sequence[ClaimExpectation],
    fractions: Sequence[float],
) -> list[Fact]:
    """Three lines: what this host does, against the expectation for it, and what limits it."""
    against, against_tone = against_expectation(run, outcomes, expectations, fractions)
    limit, limit_tone = limited_by(run)
    return [
        Fact(label="This host", value=host_does(run), tone="strong"),
        Fact(label="Against expectation", value=against, tone=against_tone),
        Fact(label="Limited by", value=limit[:1].upper() + limit[1:] + ".", tone=limit_tone),
    ]


# --- What the report cannot tell ----------------------------------------------------------------


def fitted_stages(run: LoadedRun) -> set[str]:
    """The stages this kit's plan of the run's profile runs on the run's GPUs (kit.plan.protocol fits
    a GPU profile to a host of fewer GPUs); empty on a CPU, or where the profile is gone."""
    gpus, fingerprint = gpu_count(run), run.before.fingerprint
    if not gpus or run.info.profile not in load_protocol().profiles:
        return set()
    sizes = [gpu.memory_bytes for gpu in fingerprint.gpus.gpus if gpu.memory_bytes] if fingerprint else []
    plan = build_plan(load_protocol(), run.info.profile, host_gpus=gpus, gpu_memory_bytes=min(sizes, default=None))
    return {case.stage for case in plan.cases if case.gpus <= gpus and case.does_not_fit is None}


def _to_learn(run: LoadedRun, results: Sequence[Result], fitted: set[str]) -> str:
    """What to run to learn what `results` (of one stage) did not measure, where the kit can say."""
    gpus = gpu_count(run)
    short = [r for r in results if r.status == "skipped" and r.case.gpus > gpus]
    if short and short[0].stage in fitted and short[0].case.variant is None:
        return f"this kit's `kit run --all --profile {run.info.profile}` fits the plan to the host's {gpus} GPU{'s' * (gpus != 1)}"
    if short:
        return f"they need a host of {max(r.case.gpus for r in short)} GPUs"
    return ""


def cannot_tell(run: LoadedRun) -> str:
    """The stages (and variants) the run did not measure, why, and what to run to measure them;
    the figures it holds back (invalid, fitted to fewer GPUs than the paper's)."""
    items = []
    if run.info.plan.device == "cpu":
        items.append(
            "anything about a GPU (a CPU run; on a GPU host `kit run --all --profile quick` measures one case "
            "of every stage, and `kit list --profile quick` estimates its time)"
        )
    selected = [run.results[cid] for cid in run.info.selected if cid in run.results]
    groups: dict[tuple[str, str | None], list[Result]] = {}
    for result in sorted(selected, key=lambda r: r.case.variant is not None):  # the variants last
        groups.setdefault((result.stage, result.case.variant), []).append(result)
    fitted = fitted_stages(run) if any(r.status == "skipped" for r in selected) else set()
    alike: dict[tuple[str, str], list[str]] = {}  # (why, what to run) -> the stages it is said of
    for (stage, variant), results in groups.items():
        unmeasured = [r for r in results if r.status in ("skipped", "unavailable")]
        if not unmeasured:
            continue
        title = BY_NAME[stage].title if stage in BY_NAME else stage
        title = f"the {variant} variants of {title.lower()}" if variant else title[:1].lower() + title[1:]
        which = title if len(unmeasured) == len(results) else f"{len(unmeasured)} of {len(results)} cases of {title}"
        alike.setdefault((why_unmeasured(unmeasured, 2, brief=True), _to_learn(run, unmeasured, fitted)), []).append(
            which
        )
    items += [f"{', '.join(titles)} ({why}{'; ' + learn if learn else ''})" for (why, learn), titles in alike.items()]
    failed = [r.case_id for r in selected if r.status in ("error", "timeout")] + [
        cid for cid in run.info.selected if cid not in run.results
    ]
    if failed:
        items.append(
            f"the {len(failed)} case{'s' * (len(failed) > 1)} that failed or did not finish (each with its reason "
            "under Deviations; `kit run --case ID` runs one again)"
        )
    if run.invalid:
        items.append(f"the figures marked invalid ({', '.join(run.invalid)}: past their physical bounds)")
    fitted_cases = [r for r in selected if r.case.fitted]
    if fitted_cases:
        case = fitted_cases[0].case
        items.append(
            f"how this host compares with the paper's figures of {case.fitted_from} GPUs ({len(fitted_cases)} "
            f"cases ran {case.fitted}, held to this host's own bounds)"
        )
    text = "; ".join(items) if items else "nothing the protocol asks: every selected case measured"
    return text[:1].upper() + text[1:] + "."


# --- The host's checks and the kit's provenance -------------------------------------------------


def checks_fact(run: LoadedRun) -> Fact:
    """The host checks as pass, warn or fail: each failing and warning one named, the rest counted
    (the Environment section says what each observed)."""
    checks, origin = host_checks(run)
    if not checks:
        return Fact(label="Host checks", value=f"warn: none ({origin}: no fingerprint before the run)", tone="warn")
    by = {
        status: [check.name for check in checks if check.status == status]
        for status in ("fail", "warn", "pass", "skip")
    }
    worst = next(status for status in ("fail", "warn", "pass", "skip") if by[status])
    named = [f"{status}: {', '.join(by[status])}" for status in ("fail", "warn") if by[status]]
    counted = f"{len(by['pass'])} pass, {len(by['skip'])} not checked (each in the Environment section)"
    return Fact(
        label="Host checks",
        value="; ".join([*named, counted]) if named else f"{WORDS[worst]}: {counted}",
        tone=TONES[worst],
    )


def provenance_fact(run: LoadedRun) -> Fact:
    """The kit that measured, as pass, warn or fail (kit.report.sections.environment.kit_provenance)."""
    text, verdict = kit_provenance(run.info.kit)
    return Fact(label="Provenance", value=f"{verdict}: {text}", tone=TONES[verdict])
