"""The `kit` command: options in, calls into the modules, nothing decided here."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import math
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click

from kit import __version__, output

# A disk full, over quota, read-only or not ours: the user's to fix, said in one line.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)
SMOKE_NOTICE = "No GPU found: running the smoke profile (tiny Llama on CPU; not comparable to the reference)."


class UsageFailure(click.ClickException):
    """A problem with what was asked (exit code 2), reported as one line."""

    exit_code = 2


def writable_folder(ctx, param, value: Path | None) -> Path | None:
    """--out, checked before anything slow starts: a folder that is there or can be made, and
    can be written in. What the check made is removed again; the command makes it when it
    writes."""
    if value is None:
        return None
    if value.exists() and not value.is_dir():
        raise click.BadParameter(f"{value} is there and is not a folder; give a folder (it is made where missing)")
    made = [folder for folder in [value, *value.parents] if not folder.exists()]
    try:
        value.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=value):
            pass
    except OSError as exc:
        raise click.BadParameter(f"cannot make or write the folder {value} ({exc.strerror or exc}); give one you can write in") from None
    finally:
        for folder in made:  # the deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
    return value


def positive_number(ctx, param, value: float | None) -> float | None:
    """A price or a duration: a positive, finite number (nan and inf are floats click takes, and
    compare as no bound would have them)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"a positive number is needed; got {value:g}")
    return value


def regular_file(ctx, param, value: Path | None) -> Path | None:
    """A file the kit or ssh-keygen reads: a regular file (a FIFO would keep the read waiting)."""
    if value is not None and not value.is_file():
        raise click.BadParameter(f"{value} is not a regular file")
    return value


def complete_profile(ctx, param, incomplete: str) -> list[str]:
    """Shell completion of --profile: the protocol's profiles (none where it cannot be read)."""
    from kit.manifest import ManifestError, manifests_dir, read_yaml

    try:
        protocol = read_yaml(manifests_dir() / "protocol.yaml")
    except ManifestError:
        return []
    profiles = protocol.get("profiles") if isinstance(protocol, dict) else None
    return [name for name in profiles or () if isinstance(name, str) and name.startswith(incomplete)]


def complete_formats(ctx, param, incomplete: str) -> list[str]:
    """Shell completion of --format, a comma-separated list: the formats not given yet, each after
    those that are."""
    from kit.report import FORMATS

    given, _, last = incomplete.rpartition(",")
    chosen = given.split(",")
    return [f"{given},{name}" if given else name for name in FORMATS if name.startswith(last) and name not in chosen]


def default_profile(gpu_names: list[str]) -> str:
    return "paper" if gpu_names else "smoke"


def load_plan(profile: str | None, host):
    """The profile's plan, fitted to the host's GPUs (a kit.host.this_host.Host) where it has any."""
    from kit.plan.protocol import build_plan, load_protocol

    protocol = load_protocol()
    return build_plan(protocol, profile or default_profile(host.gpu_names), host_gpus=host.gpu_count or None,
                      gpu_memory_bytes=host.smallest_gpu_memory)  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kit")
@click.option("-q", "--quiet", is_flag=True, help="results, warnings and errors only: no progress, no log lines")
@click.option("-v", "--verbose", is_flag=True, help="also each case's runs as lines, and the traceback behind a one-line error")
@click.option("--no-progress", is_flag=True, help="no live progress bar (each finished case is still a line on stderr)")
def cli(quiet: bool, verbose: bool, no_progress: bool) -> None:
    """Reproduce the LLM runtime benchmarks of arXiv:2311.03687 on this host. Results (tables,
    verdicts, --json) go to stdout; progress and logs to stderr.

    \b
    kit list                      the plan of cases (paper profile on GPUs, smoke on CPU)
    kit run --all                 run every case; results go to runs/<time>-<profile>/
    kit run --resume RUN_DIR      finish an interrupted run
    kit sign RUN_DIR --key KEY    sign a finished run with an SSH key
    kit images verify             the pinned images: lock vs this host
    """
    output.configure(quiet, verbose, progress=not no_progress)
    from kit.execute.owners import dead_marks

    marks = dead_marks()  # a kit that was killed with containers running: whatever runs next removes them
    if marks and _remove_leftovers() is not None:
        for mark in marks:
            mark.unlink(missing_ok=True)


def _remove_leftovers() -> list[str] | None:
    """Containers and Slurm jobs of a kit that was killed (kill -9, a lost session) go before new
    ones start; None where docker or Slurm could not be asked."""
    from kit.execute.docker import remove_leftovers
    from kit.execute.slurm import cancel_leftovers

    jobs, containers = cancel_leftovers(output.say), remove_leftovers(output.say)
    return None if jobs is None or containers is None else jobs + containers


@cli.command("doctor")
@click.option("--profile", shell_complete=complete_profile, help="check the host for this profile (default: paper with GPUs, else smoke)")
@click.option("--json", "as_json", is_flag=True, help="the fingerprint and the checks, as JSON")
@click.option("--redact", is_flag=True, help="replace hostname and GPU serials/UUIDs with tokens")
def doctor(profile: str | None, as_json: bool, redact: bool) -> None:
    """Fingerprint this host and check it against manifests/environment.yaml (exit 1 on a failure)."""
    from kit import runner
    from kit.host.this_host import this_host

    plan = load_plan(profile, this_host())
    fingerprint, checks = runner.preflight(plan, redact=redact)
    if as_json:
        payload = {"fingerprint": fingerprint.model_dump(mode="json"), "checks": [c.model_dump() for c in checks]}
        click.echo(json.dumps(payload, indent=2))
    else:
        from kit.console import checks_table

        topology = fingerprint.topology
        shape = topology.topology_class.label if topology.topology_class else topology.unavailable or "unknown"
        results = output.results()
        results.print(f"profile {plan.profile}; GPUs: {len(fingerprint.gpus.gpus)}; topology: {shape}")
        results.print(checks_table(checks))
    if runner.failing(checks):
        sys.exit(1)


@cli.command("preflight")
@click.option("--profile", shell_complete=complete_profile, help="paper, quick or smoke (default: paper with GPUs, else smoke)")
@click.option("--executor", type=click.Choice(["docker", "local"]), help="check the images as this executor would run them")
@click.option("--json", "as_json", is_flag=True, help="the lines as JSON")
def preflight(profile: str | None, executor: str | None, as_json: bool) -> None:
    """Check every image and engine the plan needs, in minutes, before hours of work (exit 1 on a failure)."""
    from kit import runner
    from kit.execute.preflight import run_preflight
    from kit.host.this_host import this_host
    from kit.plan.fit import skip_reason

    host = this_host()
    plan = load_plan(profile, host)
    if executor == "docker" or (executor is None and plan.device == "cuda"):  # each case in its image
        require_engine()
    _remove_leftovers()
    _, checks = runner.preflight(plan)
    cases = [case for case in plan.cases if skip_reason(case, host) is None]
    from kit.execute.choice import named

    result = run_preflight(cases, named(executor) if executor else None, checks, say=output.say, host_gpu_names=host.gpu_names)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        from kit.console import preflight_table

        output.results().print(preflight_table(result))
    if any(line.status == "fail" for line in result.lines):
        sys.exit(1)


@cli.command("list")
@click.option("--profile", shell_complete=complete_profile, help="paper, quick or smoke (default: paper with GPUs, else smoke)")
@click.option("--json", "as_json", is_flag=True, help="every case with all its parameters, as JSON")
@click.option("--fingerprint", "fingerprint_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=regular_file,
              help="plan for the host this fingerprint describes (kit doctor --json, or a run's fingerprint.json)")
def list_cases(profile: str | None, as_json: bool, fingerprint_file: Path | None) -> None:
    """Show the plan: every case of a profile, fitted to this host's GPUs (or the fingerprint's)."""
    if fingerprint_file is not None:
        host = _fingerprint_host(fingerprint_file)
    else:
        from kit.host.this_host import this_host

        host = this_host()
    from kit.plan.fit import skip_reason
    from kit.plan.plan_cache import case_view, plan_data

    names = host.gpu_names
    plan = plan_data(profile or default_profile(names), host.gpu_count or None, host.smallest_gpu_memory)
    cases = [case_view(case) for case in plan["cases"]]
    skipped = {case.id: reason for case in cases if (reason := skip_reason(case, host))}
    runnable = [case for case in cases if case.id not in skipped]
    if any(case.device == "cuda" for case in runnable):  # the analytic estimate reads a GPU case as its model
        runnable = [case for case in load_plan(profile, host).cases if case.id not in skipped]
    predicted = {}
    if runnable:
        from kit.plan.estimate import RUNS_ROOT, estimates

        predicted = estimates(runnable, RUNS_ROOT, names, host.smallest_gpu_memory)
    known = [e.seconds for e in predicted.values() if e.seconds is not None]
    unknown = len(predicted) - len(known)
    if known:
        from kit.plan.view import duration_text
    total = "no estimate (no earlier run here)" if not known else \
        f"estimated {duration_text(sum(known))}" + (f", {unknown} cases not estimated" if unknown else "")  # fmt: skip
    if as_json:
        host_info = {"gpus": host.gpu_count, "skipped": skipped,
                     "estimates": {case_id: e.model_dump() for case_id, e in predicted.items()}}  # fmt: skip
        click.echo(json.dumps({**plan, "host": host_info}, indent=2))
        return
    from kit.plan.view import plan_text

    click.echo(f"{plan['profile']}: {plan['description']} ({len(cases)} cases; host: {host.gpu_count} GPUs"
               f"{', ' + str(len(skipped)) + ' cases cannot run here' if skipped else ''}; {total})")  # fmt: skip
    click.echo(plan_text(f"profile {plan['profile']}", cases, on_host=skipped or None, estimates=predicted))


def _fingerprint_host(path: Path):
    """The host a fingerprint file describes, its GPUs and their memory (a run's fingerprint.json,
    or `kit doctor --json`, which wraps it); a file that is neither is refused in one line."""
    from pydantic import ValidationError

    from kit.files.regular import RUN_FILE_LIMIT, read_regular
    from kit.host.fingerprint import Fingerprint
    from kit.host.this_host import Host
    from kit.rundir.directory import first_problem

    try:
        data = json.loads(read_regular(path, RUN_FILE_LIMIT))
        found = Fingerprint.model_validate(data["fingerprint"] if isinstance(data, dict) and "fingerprint" in data else data)
    except ValidationError as exc:
        reason = first_problem(exc)
    except (OSError, ValueError) as exc:  # not a regular file, too large, not UTF-8, not JSON
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:200]
    else:
        return Host(gpu_names=[gpu.name or "unknown GPU" for gpu in found.gpus.gpus],
                    gpu_memory_bytes=[gpu.memory_bytes for gpu in found.gpus.gpus if gpu.memory_bytes])  # fmt: skip
    raise UsageFailure(f"--fingerprint {path} is not a fingerprint ({reason}); give a run's fingerprint.json or the output of "
                       "`kit doctor --json`")  # fmt: skip


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into an exception so that running cases are torn down and run.json says so."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@cli.command("run")
@click.option("--all", "run_all", is_flag=True, help="every case of the profile")
@click.option("--stage", "stages", multiple=True, help="only this stage (repeatable)")
@click.option("--case", "case_ids", multiple=True, help="only this case id (repeatable; see `kit list`)")
@click.option("--profile", shell_complete=complete_profile, help="paper, quick or smoke (default: paper with GPUs, else smoke)")
@click.option("--out", type=click.Path(path_type=Path), callback=writable_folder, help="run directory (default: runs/<time>-<profile>)")
@click.option("--resume", "resume_dir", type=click.Path(path_type=Path), help="finish this run directory")
@click.option("--dry-run", is_flag=True, help="show what would run, run nothing")
@click.option("--force", is_flag=True, help="start even if environment checks fail (recorded in run.json)")
@click.option("--executor", type=click.Choice(["docker", "local", "slurm"]),
              help="where cases run (default: docker when an engine answers and the image is here, else local; "
                   "slurm: each launch a batch job)")
@click.option("--partition", help="slurm: the partition jobs go to")
@click.option("--account", help="slurm: the account jobs are charged to")
@click.option("--nodes", type=click.IntRange(min=1), help="slurm: nodes per job (default: as many as the ranks need)")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="slurm: GPUs of a node; a GPU case's ranks fill nodes of this size")
@click.option("--time-limit", help="slurm: each job's --time (default: the case's timeout)")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, help="slurm: one more sbatch argument, e.g. --qos=high (repeatable)")
@click.option("--container-mode", type=click.Choice(["none", "pyxis"]),
              help="slurm: ranks in this Python (none, the default) or in the case's image by digest (pyxis)")
@click.option("--nodelist", help="slurm: every job on these nodes (sbatch --nodelist)")
@click.option("--per-node", is_flag=True,
              help="slurm: the same run on every node of the allocation at once, each into OUT/<node>/ (for kit report --fleet)")
@click.option("--skip-predicted-oom", is_flag=True,
              help="skip GPU cases whose predicted memory exceeds the GPU's (recorded in run.json)")
@click.option("--soak", "soak_minutes", type=float, callback=positive_number, metavar="MINUTES",
              help="also measure one training case and the serving burst on end for MINUTES each: the first minute against the last")
@click.option("--no-preflight", is_flag=True, help="start without checking each image first (recorded in run.json)")
@click.option("--redact", is_flag=True,
              help="no host or user name, no identifying path in any file of the run (GPU serials and UUIDs as tokens)")
@click.option("--accept-changes", is_flag=True,
              help="with --resume: go on although files differ from the run's SHA256SUMS (recorded in run.json)")
@click.option("--sign", "sign_key", metavar="KEY", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=regular_file,
              help="sign the run when it finishes with this SSH key, as `kit sign` does")
def run(run_all, stages, case_ids, profile, out, resume_dir, dry_run, force, executor, partition, account, nodes, gpus_per_node,
        time_limit, sbatch_args, container_mode, nodelist, per_node, skip_predicted_oom, soak_minutes, no_preflight, redact,
        accept_changes, sign_key) -> None:  # fmt: skip
    """Run cases of the protocol into a run directory."""
    from kit import runner
    from kit.console import RichProgress, checks_table, summary_table
    from kit.host.this_host import this_host
    from kit.plan.fit import skip_reason
    from kit.plan.protocol import select
    from kit.rundir.directory import RunDir

    log, alerts = output.log(), output.alerts()
    host = this_host()
    if accept_changes and not resume_dir:
        raise UsageFailure("--accept-changes goes with --resume RUN_DIR")
    if sign_key and shutil.which("ssh-keygen") is None:  # said before the run, not after it
        from kit.rundir.signing import INSTALL_HINT

        raise UsageFailure(f"--sign signs with ssh-keygen, which is not on PATH: {INSTALL_HINT}")
    slurm_asked = any((partition, account, nodes, gpus_per_node, time_limit, sbatch_args, container_mode, nodelist, per_node))
    if slurm_asked and executor != "slurm":
        raise UsageFailure("--partition, --account, --nodes, --gpus-per-node, --time-limit, --sbatch-arg, --container-mode, "
                           "--nodelist and --per-node go with --executor slurm")  # fmt: skip
    if per_node:
        if resume_dir or nodes or nodelist:
            raise UsageFailure("--per-node runs each case on one node of its own: it sets --nodes and --nodelist, and each "
                               "node's run is resumed alone (kit run --resume OUT/<node>)")  # fmt: skip
        _run_per_node(out or runner.default_run_dir(load_plan(profile, host).profile), partition, redact, sign_key)
    if resume_dir:
        if run_all or stages or case_ids or profile or out or force or skip_predicted_oom or soak_minutes or no_preflight or redact:
            raise UsageFailure("--resume takes the run directory alone: the run keeps its own plan")
        run_dir = RunDir(resume_dir)
        if not run_dir.info_path.is_file():
            raise UsageFailure(f"{resume_dir} is not a run directory (no run.json)")
        info = run_dir.read_info()
        if executor is not None and executor != info.executor:
            raise UsageFailure(f"{resume_dir} runs its cases with the executor its run.json records ({info.executor}); "
                               f"a resume goes on the same way: leave out --executor {executor}")  # fmt: skip
        executor = None if info.executor == "auto" else info.executor
        slurm_options = info.slurm
        redact = info.redacted
        cases = [c for c in info.plan.cases if c.id in set(info.selected)]
        for case in cases:  # a finished case that cannot be read is refused here, never run again over it
            if run_dir.is_finished(case.id):
                run_dir.read_result(case.id)
        if not dry_run:  # held from here on, and checked against its evidence before anything is said or done
            try:
                run_dir = runner.resume(resume_dir, accept_changes)
            except runner.EvidenceChanged as exc:
                raise UsageFailure(str(exc)) from None
            resumed = run_dir.read_info()
            complete = runner.is_complete(run_dir, resumed)
            if not complete or len(resumed.accepted_changes) > len(info.accepted_changes):  # its evidence is sealed anew
                from kit.rundir.signing import remove_signature

                unsigned = remove_signature(run_dir)
                if unsigned and not sign_key:
                    alerts.print(f"[yellow]removed {', '.join(unsigned)}: they signed the evidence before this resume; sign the "
                                  f"run again with `kit sign {resume_dir} --key KEY`[/]")  # fmt: skip
            if complete:
                output.results().print(f"{resume_dir}: every case is finished; nothing to resume (kit report {resume_dir})", markup=False,
                              soft_wrap=True)  # fmt: skip
                if sign_key:
                    _sign(run_dir, sign_key)
                return
        log.print(f"executor: {info.executor}, as {resume_dir / 'run.json'} records", soft_wrap=True)
        finished = {c.id for c in cases if run_dir.is_finished(c.id)}  # without those the evidence did not list
        title = f"resume {resume_dir}: {len(finished)} of {len(cases)} cases done"
    else:
        if run_all and (stages or case_ids) or not (run_all or stages or case_ids or soak_minutes):
            raise UsageFailure("say what to run: --all, or --stage/--case, and/or --soak MINUTES (or --resume RUN_DIR)")
        if profile is None and not host.gpu_names:
            alerts.print(f"[yellow]{SMOKE_NOTICE}[/]")
        plan = load_plan(profile, host)
        soaking = []
        if soak_minutes:
            from kit.plan.soak import with_soak

            plan, soaking = with_soak(plan, host, soak_minutes)
            if not soaking:
                raise UsageFailure(f"--soak: the {plan.profile} profile has no training or serving case this host can run")
        try:
            chosen = select(plan, tuple(stages), tuple(case_ids)) if run_all or stages or case_ids else []
        except ValueError as exc:
            raise UsageFailure(str(exc)) from None
        named = any(case in chosen for case in soaking) and not run_all  # --case soak.<...>: that soak alone
        cases = chosen if named else [*chosen, *(case for case in soaking if case not in chosen)]
        finished = set()
        title = f"profile {plan.profile}: {len(cases)} cases"
        slurm_options = None
        if executor == "slurm":
            from kit.rundir.schema import SlurmOptions

            slurm_options = SlurmOptions(partition=partition, account=account, nodes=nodes, gpus_per_node=gpus_per_node,
                                         time_limit=time_limit, sbatch_args=list(sbatch_args),
                                         container_mode=container_mode or "none", nodelist=nodelist)  # fmt: skip

    if dry_run:
        from kit.plan.view import plan_text

        click.echo(plan_text(title, cases, finished or set()))
        return
    _remove_leftovers()
    from kit.execute.choice import describe_choice, needs_local_frameworks

    if redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()  # the same tokens in the fingerprints before and after, and on resume

    if executor == "docker":  # asked for by name: without an engine nothing could run
        require_engine()
    if not resume_dir:  # the host is checked before anything slow (building or pulling images) starts
        out = out or runner.default_run_dir(plan.profile)
        if (out / "run.json").exists():
            raise UsageFailure(f"{out} already holds a run; use --resume {out} or another --out")
        log.print("checking the environment (kit doctor)...")
        fingerprint, checks = runner.preflight(plan, redact=redact, executor=executor)
        failed = runner.failing(checks)
        if failed and not force:
            alerts.print(checks_table(checks))
            names = ", ".join(check.name for check in failed)
            alerts.print(f"[red]refusing to start: {len(failed)} environment check(s) fail ({names}); fix them, or run with --force[/]")
            sys.exit(1)
    pending = [case for case in cases if case.id not in finished]
    prepared = []
    if not resume_dir and plan.device == "cuda" and executor not in ("local", "slurm"):
        prepared = _prepare_images(pending)
        executor = "docker"
    from kit.execute.choice import named

    chosen = named(executor) if executor else None
    if executor == "slurm":
        from kit.execute.slurm import configured

        chosen = configured(slurm_options, redact)
    if needs_local_frameworks(pending, chosen) and importlib.util.find_spec("torch") is None:
        raise UsageFailure("the local executor runs the frameworks in this Python: pip install -e '.[local]'")
    log.print(describe_choice(pending, chosen))

    _stop_on_sigterm()
    if not resume_dir:
        run_dir = runner.start_run(
            plan, cases, out, host, runner.current_argv(), executor=executor,
            fingerprint=fingerprint, checks=checks, forced=bool(failed), skip_predicted_oom=skip_predicted_oom,
            image_preparation=prepared, redact=redact, slurm=slurm_options,
        )  # fmt: skip
        if failed:
            alerts.print(f"[yellow]--force: starting despite failing checks ({', '.join(c.name for c in failed)}); recorded in run.json[/]")
        if executor == "slurm":
            _check_shared_run_dir(run_dir, pending, chosen)
        info = run_dir.read_info()  # with the node fingerprints the check recorded
        from kit.plan.estimate import RUNS_ROOT, estimates

        # a case the host cannot attempt takes no time: the ETA and run.json count the others
        runnable = [case for case in cases if skip_reason(case, host, skip_predicted_oom, cluster=executor == "slurm") is None]
        info.estimates = estimates(runnable, RUNS_ROOT, host.gpu_names, host.smallest_gpu_memory)
        if no_preflight:
            info.no_preflight = True
        else:
            from kit.console import preflight_table
            from kit.execute.preflight import run_preflight

            log.print("preflight: each image checked with a miniature of its stages (kit preflight)")
            try:
                checked = run_preflight(runnable, chosen, checks, run_dir.root / "preflight", say=lambda line: log.print(line),
                                        host_gpu_names=host.gpu_names)  # fmt: skip
            except BaseException:  # Ctrl-C or kit being stopped: the run says so, as during its cases
                info.status = "interrupted"
                run_dir.write_info(info)
                raise
            log.print(preflight_table(checked))
            info.preflight = checked.model_copy(update={"calibration": None})  # kept in fingerprint.json
            if checked.calibration is not None:
                runner.record_calibration(run_dir, checked.calibration)
        run_dir.write_info(info)
        runner.redact_in_place(run_dir, info)
    elif executor == "slurm":  # the nodes a resumed run's jobs land on may not be those of its start
        _check_shared_run_dir(run_dir, pending, chosen)
    log.print(f"run directory: {run_dir.root}")
    try:
        with RichProgress(total=len(cases), finished=finished, estimates=run_dir.read_info().estimates) as progress:
            results = runner.execute(run_dir, host, progress)
    except KeyboardInterrupt:
        alerts.print(f"[yellow]interrupted: finish it with `kit run --resume {run_dir.root}`[/]", soft_wrap=True)
        sys.exit(130)
    found = output.results()
    found.print(summary_table(results))
    found.print(f"evidence: {run_dir.root / 'SHA256SUMS'}")
    if sign_key:
        _sign(run_dir, sign_key)
    counts = runner.status_counts(results)
    failed = sum(counts.get(status, 0) for status in runner.FAILED_STATUSES)
    cases = f"{len(results)} case" + ("" if len(results) == 1 else "s")
    found.print(f"{cases}: " + ", ".join(f"{n} {status}" for status, n in counts.items()), soft_wrap=True)
    if failed:
        sys.exit(1)


def _options_as_given(leave_out: set[str]) -> list[str]:
    """The running command's options as they were given, less those named: another kit's command line."""
    context = click.get_current_context()
    arguments = []
    for param in context.command.params:
        value = context.params.get(param.name)
        if not isinstance(param, click.Option) or param.name in leave_out or value in (None, False, ()):
            continue
        if param.is_flag:
            arguments.append(param.opts[0])
        else:
            arguments += [f"{param.opts[0]}={item}" for item in (value if param.multiple else [value])]
    return arguments


def _run_per_node(out: Path, partition: str | None, redact: bool, sign_key: Path | None) -> None:
    """kit run --per-node: this run on each node of the allocation at once, into OUT/<node>/ (with
    --redact, OUT/<the node's token>/); exits with the worst of their exit statuses. With --sign,
    each run that finished is signed here, where a passphrase or a hardware key can be asked for."""
    from kit.execute.node_fingerprint import node_token
    from kit.execute.per_node import fleet_nodes, run_on_each_node
    from kit.execute.slurm import SlurmUnavailable
    from kit.rundir.directory import RunDir

    folder_of = str
    if redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()
        folder_of = node_token

    try:
        nodes = fleet_nodes(partition)
    except SlurmUnavailable as exc:
        raise UsageFailure(str(exc)) from None
    if not nodes:
        raise UsageFailure("--per-node found no Slurm node up (sinfo)" + (f" in partition {partition}" if partition else ""))
    output.say(f"one run per node, at once: {', '.join(nodes)}, into {out}/<node>/")
    codes = run_on_each_node(_options_as_given({"per_node", "out", "sign_key"}), nodes, out, say=output.say, folder_of=folder_of)
    for node, code in codes.items():
        click.echo(f"{node}: {out / folder_of(node)} (exit status {code})")
        if sign_key and code in (0, 1):  # finished, each case with a result
            run = RunDir(out / folder_of(node))
            run.lock()
            _sign(run, sign_key)
    click.echo("compare them: kit report --fleet " + " ".join(str(out / folder_of(node)) for node in nodes))
    sys.exit(max(codes.values()))


def _check_shared_run_dir(run_dir, cases, executor) -> None:
    """Before the first Slurm job: do the compute nodes see the run directory? If not, no result
    could come back, and the run stops here (resumable once the directory is shared)."""
    from kit.execute import slurm
    from kit.execute.node_fingerprint import fingerprinted

    nodes = slurm.nodes_needed(cases, executor.options)
    log = output.log()
    log.print(f"checking that {nodes} compute node(s) see the run directory (one tiny Slurm job)")
    try:
        info = run_dir.read_info()
        seen = slurm.check_shared_run_dir(run_dir.root, nodes, executor.options, say=lambda line: log.print(f"  {line}"),
                                          redact=info.redacted)  # fmt: skip
    except (slurm.RunDirNotShared, slurm.SlurmUnavailable) as exc:
        info.status = "interrupted"
        run_dir.write_info(info)
        output.alerts().print(f"[red]{exc}[/]", soft_wrap=True)
        sys.exit(1)
    info.node_fingerprints = fingerprinted(run_dir.root)
    run_dir.write_info(info)
    log.print(f"the run directory is shared with {', '.join(seen)}; fingerprinted there: "
                  f"{', '.join(info.node_fingerprints) or 'none (see the check job output)'}")  # fmt: skip


def no_engine(exc: Exception) -> UsageFailure:
    """The line for cases to run in their images without a docker engine to run them in."""
    return UsageFailure(f"{exc}: with docker each case runs in its pinned image (install docker and, on a GPU host, "
                        "the NVIDIA container toolkit); --executor local runs them in this Python")  # fmt: skip


def require_engine() -> None:
    """Before anything slow: a docker engine answers, or the command ends in one line (exit 2)."""
    from kit import images

    try:
        images.engine()
    except images.EngineUnavailable as exc:
        raise no_engine(exc) from None


def _prepare_images(cases) -> list:
    """A GPU run's images, present, built or pulled before its first case (with the time each
    took); without an engine the run does not start (--executor local runs in this Python)."""
    from kit import images

    log = output.log()
    names = sorted({case.image for case in cases})
    log.print(f"preparing the {len(names)} image(s) the plan runs in: {', '.join(names)}")
    try:
        prepared = images.prepare(names, say=lambda line: log.print(f"  {line}", soft_wrap=True))
    except images.EngineUnavailable as exc:
        raise no_engine(exc) from None
    total = sum(step.seconds for step in prepared)
    failed = [step.name for step in prepared if step.action == "failed"]
    log.print(f"images ready in {total:.0f} s" + (f"; not available: {', '.join(failed)} (their cases will fail)" if failed else ""))
    return prepared


@cli.group("images")
def images_group() -> None:
    """The pinned images (manifests/images.lock.yaml): list, build, pull, verify."""


@images_group.command("list")
def images_list() -> None:
    """Each image of the lock: pinned reference, versions, and whether it is present here."""
    from kit import images
    from kit.console import images_table

    output.results().print(images_table(images.load_lock(), images.local_summary()))


@images_group.command("build")
@click.argument("names", nargs=-1)
@click.option("--base", help="build on this base image instead of the pinned one (e.g. a local debootstrap image)")
@click.option("--force", is_flag=True, help="rebuild even if an image of the same context and base is present")
def images_build(names, base, force) -> None:
    """Build images the kit builds itself (default: all of them)."""
    from kit import images

    lock = images.load_lock()
    names = names or tuple(name for name, image in lock.images.items() if image.build is not None)
    try:
        for name in names:
            images.build(name, lock, base=base, force=force, say=output.say)
    except (KeyError, ValueError) as exc:
        raise UsageFailure(str(exc).strip("'\"")) from None
    except (images.EngineUnavailable, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


@images_group.command("pull")
@click.argument("names", nargs=-1)
def images_pull(names) -> None:
    """Pull images by their pinned digest (default: every image the kit does not build)."""
    from kit import images

    lock = images.load_lock()
    names = names or tuple(name for name, image in lock.images.items() if image.build is None)
    failures = []
    for name in names:
        try:
            images.pull(name, lock, say=output.say)
        except KeyError as exc:
            raise UsageFailure(str(exc).strip("'\"")) from None
        except (images.EngineUnavailable, images.PullFailed) as exc:
            failures.append(str(exc))
            click.echo(f"error: {exc}", err=True)
    if failures:
        sys.exit(1)


@images_group.command("verify")
@click.argument("names", nargs=-1)
@click.option("--no-probe", is_flag=True, help="skip reading the versions inside the images")
@click.option("--json", "as_json", is_flag=True, help="the comparison as JSON")
def images_verify(names, no_probe, as_json) -> None:
    """Compare local images with the lock and name every difference (exit 1 if one differs)."""
    from kit import images
    from kit.console import verify_table

    try:
        states = images.verify(list(names) or None, probe=not no_probe)
    except KeyError as exc:
        raise UsageFailure(str(exc).strip("'\"")) from None
    except images.EngineUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps([state.model_dump() for state in states], indent=2))
    else:
        output.results().print(verify_table(states))
    if any(state.status == "differs" for state in states):
        sys.exit(1)


@cli.group("k8s")
def k8s_group() -> None:
    """Kubernetes: the manifests the kit would submit (applying and following them is yours for now)."""


@k8s_group.command("manifests")
@click.option("--profile", default="paper", show_default=True, shell_complete=complete_profile, help="paper, quick or smoke")
@click.option("--stage", "stages", multiple=True, help="only this stage (repeatable; default: every case)")
@click.option("--case", "case_ids", multiple=True, help="only this case id (repeatable; see `kit list`)")
@click.option("--pvc", required=True, help="the PersistentVolumeClaim holding the run directory and the kit's source")
@click.option("--namespace", help="the namespace the jobs go to (default: kubectl's)")
@click.option("--image-pull-secret", help="a Secret the pods pull the images with")
@click.option("--hf-token-secret", help="a Secret whose key HF_TOKEN holds a token for gated models (named, never read)")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs of a node; a case with more becomes a PyTorchJob")
@click.option("--out", required=True, type=click.Path(path_type=Path), callback=writable_folder, help="folder for the manifests")
def k8s_manifests(profile, stages, case_ids, pvc, namespace, image_pull_secret, hf_token_secret, gpus_per_node, out) -> None:
    """One manifest per case into OUT (a Job, or a PyTorchJob across nodes), and each case's case.json."""
    from kit.execute.k8s_manifests import K8sOptions, write_manifests
    from kit.plan.protocol import build_plan, load_protocol, select

    try:
        cases = select(build_plan(load_protocol(), profile, host_gpus=None), tuple(stages), tuple(case_ids))
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    options = K8sOptions(pvc=pvc, namespace=namespace, image_pull_secret=image_pull_secret, token_secret=hf_token_secret,
                         gpus_per_node=gpus_per_node)  # fmt: skip
    left_out = write_manifests(cases, options, out)
    click.echo(f"{len(cases) - len(left_out)} of {len(cases)} manifests written to {out}")
    for reason in sorted(set(left_out.values())):
        ids = [case_id for case_id, why in left_out.items() if why == reason]
        named = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        click.echo(f"not written: {named}: {reason}", err=True)
    if left_out:
        sys.exit(1)


@cli.command("sign")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--key", "key", required=True, metavar="KEY", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=regular_file,
              help="an SSH private key, or its .pub where an agent holds the key; any key `ssh-keygen -Y sign` takes, a hardware key too")
def sign(run_dir: Path, key: Path) -> None:
    """Sign a finished run: SHA256SUMS.sig, and the provenance statement provenance.intoto.json with
    its signature, written into the run directory (exit 1 if the run does not match its SHA256SUMS)."""
    from kit.rundir.directory import RunDir

    run = RunDir(run_dir)
    if not run.info_path.is_file():
        raise UsageFailure(f"{run_dir} is not a run directory (no run.json)")
    run.lock()
    _sign(run, key)


def _sign(run, key: Path) -> None:
    """Sign the held run with `key`, saying by whom; a run that differs from its evidence exits 1, a
    key ssh-keygen cannot sign with exits 2, each in one line (said without the console's imports,
    a second of `kit sign`)."""
    from kit.rundir.directory import SIGNATURE_FILES
    from kit.rundir.evidence import EvidenceError
    from kit.rundir.signing import SigningFailed, sign_run

    output.say(f"signing {run.root} with {key} (ssh-keygen -Y sign: it asks for a passphrase, or a hardware key's touch, "
               "if the key needs one)")  # fmt: skip
    try:
        signer = sign_run(run, key)
    except EvidenceError as exc:
        click.secho(str(exc), fg="red", err=True)
        sys.exit(1)
    except SigningFailed as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(f"signed by {signer}: {', '.join(SIGNATURE_FILES)}")


@cli.command("report")
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--fleet", is_flag=True, help="compare the runs given, one per node of a fleet, and flag the nodes unlike the others")
@click.option("--tolerance", type=float, metavar="PCT",
              help="with --fleet: flag a node more than PCT per cent below the fleet median (default 10)")
@click.option("--compare", "compare", multiple=True, help="'reference' (the paper's findings) or another run directory; repeatable")
@click.option("--format", "formats", default="html,pdf", show_default=True, shell_complete=complete_formats,
              help="comma-separated: html, pdf, json (report.json), csv (report-claims.csv, report-metrics.csv)")
@click.option("--gpu-hour-price", type=float, envvar="KIT_GPU_HOUR_PRICE", metavar="PRICE", callback=positive_number,
              help="price of one GPU-hour (or $KIT_GPU_HOUR_PRICE): the report prices a million tokens with it")
@click.option("--currency", metavar="CODE", help="the currency of --gpu-hour-price, which the report names and report.json "
              "records (default USD)")
@click.option("--slo-ttft-ms", type=float, metavar="MS", callback=positive_number,
              help="serving objective: p99 time to first token, in ms (default: MLPerf Inference's for Llama-2-70B, "
                   "Server scenario; the report states it)")
@click.option("--slo-tpot-ms", type=float, metavar="MS", callback=positive_number,
              help="serving objective: p99 time per output token, in ms (default: as --slo-ttft-ms)")
@click.option("--out", type=click.Path(path_type=Path), callback=writable_folder,
              help="folder for the report files (default: the run directory)")
@click.option("--redact", is_flag=True, help="replace hostname and GPU serials/UUIDs with tokens")
@click.option("--verify", "verify_only", is_flag=True,
              help="only re-hash the run directory against its SHA256SUMS, and check its signature")
@click.option("--expect-digest", metavar="HEX",
              help="with --verify: the evidence digest a report printed (all of it, or its first 16 or more characters)")
@click.option("--allowed-signers", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=regular_file, metavar="FILE",
              help="the keys trusted to sign runs (ssh-keygen's allowed signers format): a run unsigned, or signed by "
                   "another key, fails (exit 1)")
def report(run_dirs, fleet, tolerance, compare, formats, gpu_hour_price, currency, slo_ttft_ms, slo_tpot_ms, out, redact,
           verify_only, expect_digest, allowed_signers) -> None:  # fmt: skip
    """Render a run as HTML and PDF (and/or JSON and CSV for spreadsheets), compared with the paper and/or another run (default: newest run);
    with --fleet, compare runs of one profile, one per node. Each run's signer is named; a signature that fails exits 1.
    The serving sweeps are held to the latency objectives given (--slo-ttft-ms, --slo-tpot-ms)."""
    from rich.markup import escape

    from kit.report.render import REFERENCE, chosen_formats, render
    from kit.rundir.evidence import digest_mismatch, expected_digest, newest_run, verify

    wanted = [name.strip() for name in formats.split(",") if name.strip()]
    if redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()  # the host's and each node's token is the one this machine's redacted runs give them
    if fleet:
        _fleet_report(run_dirs, 10.0 if tolerance is None else tolerance, wanted, out, redact, allowed_signers,
                      compare or gpu_hour_price or currency or verify_only or expect_digest or slo_ttft_ms or slo_tpot_ms)  # fmt: skip
        return
    if tolerance is not None:
        raise UsageFailure("--tolerance goes with --fleet")
    if len(run_dirs) > 1:
        raise UsageFailure(f"kit report takes one run directory (got {len(run_dirs)}); --fleet compares several")
    run_dir = run_dirs[0] if run_dirs else None
    if run_dir is None:
        try:
            run_dir = newest_run()
        except (FileNotFoundError, ValueError) as exc:
            raise UsageFailure(str(exc)) from None
    if not (run_dir / "run.json").is_file():
        raise UsageFailure(f"{run_dir} is not a run directory (no run.json): give the folder `kit run` wrote")
    if expect_digest is not None and not verify_only:
        raise UsageFailure("--expect-digest goes with --verify")
    if verify_only:
        try:
            wanted_digest = None if expect_digest is None else expected_digest(expect_digest)
        except ValueError as exc:
            raise UsageFailure(str(exc)) from None
        problems = verify(run_dir)
        if wanted_digest is not None and not problems:
            problems = digest_mismatch(run_dir, wanted_digest)
        verdict = output.results()
        for problem in problems:
            verdict.print(f"[red]{escape(problem)}[/]", soft_wrap=True)
        verdict.print(f"{escape(str(run_dir))}: " + ("[red]does not match its evidence[/]" if problems else "[green]every file matches SHA256SUMS[/]"
                                                    + (f", whose digest is the one expected ({wanted_digest})" if wanted_digest else "")),
                      soft_wrap=True)  # fmt: skip
        signed = _signatures_hold([run_dir], allowed_signers)
        sys.exit(1 if problems or not signed else 0)
    try:
        chosen_formats(wanted)
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    output.log().print(f"rendering the report of {run_dir}" + (f", compared with {', '.join(compare)}" if compare else ""))
    slo = _objectives(slo_ttft_ms, slo_tpot_ms)
    priced = {"currency": currency} if currency else {}
    _write_documents(lambda: render(run_dir, list(compare), wanted, out or run_dir, redact, gpu_hour_price, allowed_signers, slo,
                                    **priced),
                     [run_dir, *(Path(item) for item in compare if item != REFERENCE)], allowed_signers)  # fmt: skip


def _objectives(ttft_ms: float | None, tpot_ms: float | None):
    """The serving objectives of a report: those given, the default (kit.serve.slo) for the others."""
    from kit.serve.slo import DEFAULT_SLO, Slo

    return Slo(ttft_s=DEFAULT_SLO.ttft_s if ttft_ms is None else ttft_ms / 1000,
               tpot_s=DEFAULT_SLO.tpot_s if tpot_ms is None else tpot_ms / 1000)  # fmt: skip


def _signatures_hold(run_dirs, allowed_signers: Path | None) -> bool:
    """Each run's signature, checked against the allowed signers given, said in one line (red where
    it fails); True where none fails."""
    from rich.markup import escape

    from kit.console import SIGNATURE_STYLE
    from kit.rundir.signing import check_signature

    checks = [(folder, check_signature(folder, allowed_signers)) for folder in run_dirs]
    verdict = output.results()
    for folder, check in checks:
        verdict.print(f"{escape(str(folder))}: [{SIGNATURE_STYLE[check.state]}]{escape(check.summary)}[/]", soft_wrap=True)
    return not any(check.failed for _, check in checks)


def _write_documents(render_them, run_dirs, allowed_signers: Path | None) -> None:
    """Render, print each file written; a run that fails its evidence exits 1 in red, one that
    cannot be read exits 2 in one line; a run whose signature fails is reported, and exits 1."""
    from pydantic import ValidationError
    from rich.markup import escape

    from kit.rundir.directory import UnreadableRun, first_problem
    from kit.rundir.evidence import EvidenceError

    try:
        written = render_them()
    except EvidenceError as exc:
        output.alerts().print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        sys.exit(1)
    except ValidationError as exc:  # a part of a run (its estimates, a rank's details) that is not what this kit reads
        raise UsageFailure(f"a run holds {exc.title} data this kit cannot read: {first_problem(exc)}") from None
    except (ValueError, UnreadableRun) as exc:
        raise UsageFailure(str(exc)) from None
    for path in written:
        click.echo(f"wrote {path}")
    if not _signatures_hold(run_dirs, allowed_signers):
        sys.exit(1)


def _fleet_report(run_dirs, tolerance, wanted, out, redact, allowed_signers, other_options) -> None:
    """kit report --fleet: the fleet report of the run directories, or one line on why not."""
    from kit.report.fleet import render_fleet

    if other_options:
        raise UsageFailure("--fleet takes run directories, --tolerance, --format, --out, --redact and --allowed-signers only")
    if not 0 < tolerance < 100:
        raise UsageFailure(f"--tolerance is a percentage between 0 and 100; got {tolerance:g}")
    _write_documents(lambda: render_fleet(run_dirs, wanted, out, redact, tolerance / 100, allowed_signers), run_dirs, allowed_signers)


def _traceback_if_verbose() -> None:
    """With -v, the traceback behind an error said in one line (the one being handled)."""
    if output.verbosity.verbose:
        import traceback

        traceback.print_exc()


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # an option or argument: one line, what is wrong and where the options are listed
        command = exc.ctx.command_path if exc.ctx else "kit"
        click.echo(f"error: {exc.format_message()} (see `{command} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        _traceback_if_verbose()
        click.echo(f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}. Free space on its file system (df -h) "
                   "or make it writable; a run keeps every finished case, and `kit run --resume RUN_DIR` goes on.", err=True)  # fmt: skip
        sys.exit(1)
    except Exception as exc:
        # Only a command that read a manifest or a run directory can have failed on one, or found it in use.
        from kit.manifest import ManifestError
        from kit.rundir.directory import RunInUse, UnreadableRun

        if not isinstance(exc, (ManifestError, UnreadableRun, RunInUse)):
            raise
        _traceback_if_verbose()
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
