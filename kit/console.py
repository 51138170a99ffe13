"""How the CLI shows things: check and image tables, live progress, the run summary (on which
stream each goes: kit.output)."""

from __future__ import annotations

import time
from collections import Counter

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from kit import output
from kit.execute.case_run import Progress as CaseProgress
from kit.host.environment import Check
from kit.host.health import HostHealth
from kit.measure.registry import unit_of
from kit.plan.estimate import Estimate
from kit.plan.protocol import Case
from kit.rundir.schema import Preflight, Result

CHECK_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}
STATUS_STYLE = {
    "ok": "green",
    "oom": "yellow",
    "unavailable": "cyan",
    "skipped": "dim",
    "error": "red",
    "timeout": "red",
}
SIGNATURE_STYLE = {
    "verified": "green",
    "intact": "yellow",
    "unsigned": "dim",
    "failed": "red",
}  # kit.rundir.signing.SignatureCheck


def checks_table(checks: list[Check]) -> Table:
    """`kit doctor`: one row per expectation, with what to do about a violation."""
    # A reason shared by many skipped checks (no NVML on this host) is said once, not per row.
    reasons = Counter(check.observed for check in checks if check.status == "skip")
    shared = [reason for reason, count in reasons.items() if count > 2]
    caption = "\n".join(f"skipped ({reasons[r]} checks): {r}" for r in shared) or None
    table = Table(title="Environment checks", title_justify="left", caption=caption, caption_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("observed", max_width=40)
    table.add_column("expected", max_width=30)
    table.add_column("what to do", max_width=50)
    for check in checks:
        style = CHECK_STYLE[check.status]
        remedy = check.remedy if check.status in ("fail", "warn") else ""
        observed = "(see below)" if check.status == "skip" and check.observed in shared else check.observed
        table.add_row(check.name, Text(check.status, style=style), observed, check.expected, remedy)
    return table


HEALTH_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "unknown": "cyan", "not_applicable": "dim"}


def health_table(health: HostHealth) -> Table:
    """`kit doctor`: the health checks that did not pass (each with its threshold, severity and
    source), the passing ones counted in the title."""
    shown = [check for check in health.checks if check.status != "pass"]
    passed = len(health.checks) - len(shown)
    table = Table(
        title=f"Health ({health.catalog}): {health.verdict}; {passed} of {len(health.checks)} checks pass",
        title_justify="left",
    )
    for column, width in (("check", None), ("on", None), ("status", None), ("observed", 40), ("threshold", 24)):
        table.add_column(column, max_width=width, no_wrap=width is None)
    table.add_column("severity, source", max_width=50)
    for check in shown:
        style = HEALTH_STYLE[check.status]
        table.add_row(
            check.name,
            check.scope,
            f"[{style}]{check.status}[/]",
            check.observed,
            check.threshold,
            f"{check.severity}; {check.source}",
        )
    return table


def figure(result: Result, name: str, digits: int = 1, unit: bool = False) -> str:
    metric = result.metrics.get(name)
    if metric is None:
        return "-"
    text = f"{metric.mean:.{digits}f}" + (f" ± {metric.std:.{digits}f}" if metric.std is not None else "")
    return f"{text} {metric.unit}" if unit else text


def headline(result: Result) -> str:
    """The figure that says most about a case of this kind (tokens/s, busbw, ...), with its unit."""
    unit = unit_of(result.case)
    name = unit.headline if unit else None
    return figure(result, name, digits=2 if result.case.workload == "comm" else 1, unit=True) if name else "-"


def summary_table(results: list[Result]) -> Table:
    table = Table(title="Results", title_justify="left")
    table.add_column("case", no_wrap=True)
    table.add_column("status", no_wrap=True, min_width=11)
    for column in ("headline (mean ± std)", "peak memory GiB", "runs"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", max_width=60)
    for result in results:
        style = STATUS_STYLE.get(result.status, "")
        table.add_row(
            result.case_id,
            Text(result.status, style=style),
            headline(result),
            figure(result, "peak_memory_gib", digits=2),
            str(len(result.samples)),
            (result.reason or "")[:90],
        )
    return table


class RichProgress(CaseProgress):
    """A live bar: which case, which run of it, how many cases left, time elapsed."""

    def __init__(self, total: int, finished: set[str], estimates: dict[str, Estimate] | None = None):
        """`estimates`: of the cases that take time (run.json's; a skipped case has none)."""
        self.started = time.monotonic()
        self.predicted = dict(estimates or {})
        self.actual: dict[str, float] = {}
        self.pending = set(self.predicted) - finished
        self.case_started_at = self.started
        self.bar = Progress(
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cases"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=output.log(),  # the lines of finished cases too; with -q neither
            transient=False,
            disable=not output.verbosity.progress,
        )
        self.task = self.bar.add_task("starting", total=total, completed=len(finished), eta=self.eta_text())

    def eta_text(self) -> str:
        """What is left by the estimates, corrected by how the finished cases compared."""
        from kit.plan.estimate import remaining_seconds
        from kit.plan.view import duration_text

        left = remaining_seconds(sorted(self.pending), self.predicted, self.actual)
        return f"ETA {duration_text(left)}" if left is not None else ""

    def __enter__(self):
        self.bar.start()
        return self

    def __exit__(self, *exc):
        self.bar.stop()

    def case_started(self, case: Case, position: int, total: int) -> None:
        self.case_started_at = time.monotonic()
        self.bar.update(self.task, description=case.id)
        if output.verbosity.verbose:
            self.bar.console.print(f"{'started':>11}  {case.id} ({position} of {total})")

    def run_started(self, case: Case, index: int, runs: int) -> None:
        self.bar.update(self.task, description=f"{case.id} (run {index}/{runs})")
        if output.verbosity.verbose:
            self.bar.console.print(f"{'run':>11}  {case.id} {index}/{runs}")

    def case_finished(self, result: Result, position: int, total: int) -> None:
        style = STATUS_STYLE.get(result.status, "")
        detail = headline(result) if result.status == "ok" else (result.reason or "")[:100]
        self.bar.console.print(Text.assemble((f"{result.status:>11}", style), f"  {result.case_id}  {detail}"))
        self.pending.discard(result.case_id)
        if result.status == "ok":
            self.actual[result.case_id] = time.monotonic() - self.case_started_at
        self.bar.update(self.task, completed=position, eta=self.eta_text())


class ConsoleUi:
    """What a run says on the terminal: log lines and progress on standard error (silent with -q),
    warnings always; data (a path, a reason) never read as markup."""

    def say(self, line: str) -> None:
        output.log().print(line, soft_wrap=True)

    def warn(self, line: str) -> None:
        output.alerts().print(line, style="yellow", soft_wrap=True)

    def show_checks(self, checks: list[Check]) -> None:
        output.alerts().print(checks_table(checks))

    def show_preflight(self, checked: Preflight) -> None:
        output.log().print(preflight_table(checked))

    def progress(self, total: int, finished: set[str], estimates: dict[str, Estimate]) -> RichProgress:
        return RichProgress(total=total, finished=finished, estimates=estimates)


VERIFY_STYLE = {"ok": "green", "differs": "red", "missing": "yellow", "unpinned": "yellow"}


def images_table(lock, local) -> Table:
    """`kit images list`: the lock's pinned references and what this host holds."""
    title = "Images (manifests/images.lock.yaml)" + (f" - engine: {local.engine}" if local.engine else "")
    table = Table(title=title, title_justify="left")
    table.add_column("image", no_wrap=True)
    table.add_column("pinned reference", overflow="fold")
    table.add_column("versions", overflow="fold")
    table.add_column("here", overflow="fold")
    for name, image in lock.images.items():
        if image.digest:
            pinned = image.pinned_reference
        else:
            pinned = Text(f"{image.reference} ") + (
                Text("(built here)") if image.build else Text("(unpinned)", style="yellow")
            )
        if image.build:
            pinned += f"\nbuilt from {image.build.context} on {image.build.base}"
            current = local.current_context_sha256.get(name)
            if current is None:
                pinned += Text("\ncontext not here: a source checkout builds it", style="yellow")
            elif current != image.context_sha256:
                pinned += Text(f"\ncontext changed: {current} (lock {image.context_sha256})", style="red")
        versions = ", ".join(f"{key} {value}" for key, value in image.versions.items())
        present = local.present.get(name)
        here = Text("unknown") if local.engine else Text(present[:19]) if present else Text("missing", style="yellow")
        table.add_row(name, pinned, versions, here)
    return table


def verify_table(states) -> Table:
    """`kit images verify`: per image the status and each difference, lock against local."""
    table = Table(title="Lock vs local images", title_justify="left")
    table.add_column("image", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("what differs (lock -> local)", overflow="fold")
    for state in states:
        lines = [f"{d.field}: {d.lock} -> {d.local}" for d in state.differences] + state.notes
        if state.image_id and state.status in ("ok", "unpinned"):
            lines.insert(
                0,
                f"local {state.image_id[:19]}" + (f" ({', '.join(state.repo_digests)})" if state.repo_digests else ""),
            )
        style = VERIFY_STYLE[state.status]
        table.add_row(state.name, Text(state.status, style=style), "\n".join(lines) or "")
    return table


def preflight_table(preflight) -> Table:
    """`kit preflight`: one row per check of an image, with what to do about a failure."""
    table = Table(title=f"Preflight ({preflight.seconds:.0f} s)", title_justify="left")
    for column, width in (("image", None), ("check", 44), ("status", None), ("detail", 50), ("what to do", 40)):
        table.add_column(column, max_width=width)
    for line in preflight.lines:
        style = "green" if line.status == "ok" else "red"
        table.add_row(line.image, line.check, Text(line.status, style=style), line.detail, line.hint or "")
    return table


def show_run(outcome) -> None:
    """What `kit run` found (kit.runner.RunOutcome): a dry run's plan, or the cases' table and the
    run's evidence, or that a resumed run had nothing left to run."""
    found = output.results()
    if outcome.plan_text is not None:
        found.print(outcome.plan_text, soft_wrap=True)
    elif outcome.finished_before is not None:
        found.print(outcome.finished_before, soft_wrap=True)
    else:
        found.print(summary_table(outcome.results))
        found.print(f"evidence: {outcome.run_dir.root / 'SHA256SUMS'}", soft_wrap=True)


def show_report(outcome) -> None:
    """What `kit report` did (kit.report.request.ReportOutcome): the evidence verified, the files
    written, and each run's signature, red where it fails."""
    shown = output.results()
    if outcome.verified is not None:
        folder, problems, digest = outcome.verified
        if problems:  # a refusal, in one line: the signature of files that do not match tells nothing more
            shown.print(f"{folder}: ", end="", soft_wrap=True)
            shown.print(output.elided(f"does not match its evidence: {listed(problems)}"), style="red", soft_wrap=True)
            return
        said = "every file matches SHA256SUMS" + (f", whose digest is the one expected ({digest})" if digest else "")
        shown.print(f"{folder}: ", end="", soft_wrap=True)
        shown.print(said, style="green", soft_wrap=True)
    for path in outcome.written:
        shown.print(f"wrote {path}", soft_wrap=True)
    for folder, check in outcome.signatures:
        shown.print(f"{folder}: ", end="", soft_wrap=True)
        shown.print(check.summary, style=SIGNATURE_STYLE[check.state], soft_wrap=True)
    for folder, decision in outcome.decisions:
        show_decision(folder, decision)


PROBLEMS_SHOWN = 5  # of a run that does not match its evidence, in its one line


def listed(problems: list[str]) -> str:
    """The first few problems, and how many more, joined for one line."""
    more = len(problems) - PROBLEMS_SHOWN
    return "; ".join(problems[:PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else "")


DECISION_STYLE = {"ACCEPT": "green", "REJECT": "red", "INCONCLUSIVE": "yellow"}


def show_decision(folder, decision) -> None:
    """`kit report --accept`: the run's decision, then each line that is not a pass (kit.reference.acceptance.Decision)."""
    shown = output.results()
    outcomes = ("pass", "fail", "inconclusive", "not measured", "not applicable")
    counts = ", ".join(f"{decision.counted(o)} {o}" for o in outcomes if decision.counted(o) or o != "not applicable")
    shown.print(f"{folder}: ", end="", soft_wrap=True)
    shown.print(decision.decided, style=DECISION_STYLE[decision.decided], end="")
    shown.print(f": {decision.spec_name} against {decision.baseline_name} ({counts})", soft_wrap=True)
    for condition in decision.conditions:
        if condition.outcome not in ("pass", "not applicable"):
            shown.print(
                f"  {condition.outcome}: {condition.label}: {condition.observed}"
                + (f" ({condition.why})" if condition.why else ""),
                soft_wrap=True,
            )
    for line in decision.lines:
        if line.outcome != "pass":
            shown.print(
                f"  {line.outcome}: {line.label}, {line.case_id}" + (f" ({line.why})" if line.why else ""),
                soft_wrap=True,
            )


def show_baseline(path, baseline, signed: bool) -> None:
    """What `kit baseline` wrote (kit.reference.baseline.Baseline): its name, what it holds, its digest."""
    cases = len({figure.case_id for figure in baseline.figures})
    output.results().print(
        f"wrote {path}: baseline {baseline.name!r}, {len(baseline.figures)} figures of {cases} cases from "
        f"{len(baseline.runs)} run(s) on {baseline.gpu_model}; {baseline.digest}"
        + (f"; signed: {path.name}.sig" if signed else "; unsigned"),
        highlight=False,
        soft_wrap=True,
    )


def show_doctor(profile: str, fingerprint, checks: list[Check]) -> None:
    """`kit doctor`: the host in one line (profile, GPUs, topology), then its checks."""
    topology = fingerprint.topology
    shape = topology.topology_class.label if topology.topology_class else topology.unavailable or "unknown"
    results = output.results()
    results.print(f"profile {profile}; GPUs: {len(fingerprint.gpus.gpus)}; topology: {shape}")
    results.print(checks_table(checks))
    health = fingerprint.health
    if health is not None and health.not_applicable is not None:
        results.print(f"Health: not applicable ({health.catalog}): {health.not_applicable}")
    elif health is not None:
        results.print(health_table(health))
