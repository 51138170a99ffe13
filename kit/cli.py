"""The `kit` command: options in, calls into the modules, nothing decided here."""

from __future__ import annotations

import errno
import json
import math
import signal
import sys
from pathlib import Path

import click

from kit import __version__, output

# A disk full, over quota, read-only or not ours: the user's to fix, said in one line.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


FOLDER = click.Path(path_type=Path)
FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
EXECUTORS = ("docker", "local", "slurm")
FORMATS_HELP = "comma-separated: html, pdf, json (report.json), csv (report-claims.csv, report-metrics.csv)"
PRICE_HELP = "price of one GPU-hour (or $KIT_GPU_HOUR_PRICE): the report prices a million tokens with it"


def profile_name(ctx, param, value: str | None) -> str | None:
    """--profile: a name as the protocol writes one (a byte that is not UTF-8 is said, not raised)."""
    from kit.files.names import NAME_PATTERN

    if value is not None and not NAME_PATTERN.fullmatch(value):
        shown = value.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")[:80]
        raise click.BadParameter(f"'{shown}' is not a profile name (paper, quick, smoke, or one of the protocol's)")
    return value


PROFILE_OPTION = click.option(
    "--profile",
    callback=profile_name,
    shell_complete=lambda *a: complete_profile(*a),
    help="paper, quick, acceptance, cluster or smoke (default: paper with GPUs, else smoke)",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="as JSON")
REDACT_OPTION = click.option("--redact", is_flag=True, help="replace hostname and GPU serials/UUIDs with tokens")
DCGM_DIAG_OPTION = click.option(
    "--dcgm-diag",
    "dcgm_level",
    type=click.IntRange(1, 4),
    help="also run DCGM's diagnostic at this level (dcgmi diag -r 1..4, about 1 min to over an hour) in the health check",
)


class UsageFailure(click.ClickException):
    """A problem with what was asked (exit code 2), reported as one line."""

    exit_code = 2


def writable_folder(ctx, param, value: Path | None) -> Path | None:
    """--out: a folder that is there or can be made, and can be written in."""
    from kit.files.folders import writable_folder_problem

    if value is not None and (problem := writable_folder_problem(value)) is not None:
        raise click.BadParameter(problem)
    return value


def positive_number(ctx, param, value: float | None) -> float | None:
    """A price or a duration: a positive, finite number (nan and inf are floats click takes, and
    compare as no bound would have them)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"a positive number is needed; got {value:g}")
    return value


SLO_TTFT_OPTION = click.option(
    "--slo-ttft-ms", type=float, callback=positive_number, help="serving objective: p99 time to first token (ms)"
)
SLO_TPOT_OPTION = click.option(
    "--slo-tpot-ms", type=float, callback=positive_number, help="serving objective: p99 time per output token (ms)"
)


def regular_file(ctx, param, value: Path | None) -> Path | None:
    """A file the kit or ssh-keygen reads: a regular file (a FIFO would keep the read waiting)."""
    if value is not None and not value.is_file():
        raise click.BadParameter(f"{value} is not a regular file")
    return value


def complete_profile(ctx, param, incomplete: str) -> list[str]:
    from kit.plan.plan_cache import profile_names

    return [name for name in profile_names() if name.startswith(incomplete)]


def complete_formats(ctx, param, incomplete: str) -> list[str]:
    """Shell completion of --format, a comma-separated list: the formats not given yet, each after
    those that are."""
    from kit.report import FORMATS

    given, _, last = incomplete.rpartition(",")
    chosen = given.split(",")
    return [f"{given},{name}" if given else name for name in FORMATS if name.startswith(last) and name not in chosen]


class KitGroup(click.Group):
    """The commands, each ending in one line and its exit status where its request ran into
    something the user, the host or the evidence must fix (`_said`), here or under a test runner."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            status = _said(exc)
            if status is None:
                raise
            ctx.exit(status)


@click.group(cls=KitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kit")
@click.option("-q", "--quiet", is_flag=True, help="results, warnings and errors only: no progress, no log lines")
@click.option("-v", "--verbose", is_flag=True, help="also each case's runs, and the traceback behind a one-line error")
@click.option("--no-progress", is_flag=True, help="no live progress bar (each finished case is still a line on stderr)")
def cli(quiet: bool, verbose: bool, no_progress: bool) -> None:
    """Reproduce the LLM runtime benchmarks of arXiv:2311.03687 on this host. Results (tables,
    verdicts, --json) go to stdout; progress and logs to stderr.

    \b
    kit list                      the plan of cases (paper profile on GPUs, smoke on CPU)
    kit run --all                 run every case; results go to runs/<time>-<profile>/
    kit run --resume RUN_DIR      finish an interrupted run
    kit sign RUN_DIR --key KEY    sign a finished run with an SSH key
    kit baseline RUN... --out F   a baseline for acceptance from accepted runs
    kit report RUN --accept SPEC  ACCEPT, REJECT or INCONCLUSIVE against a spec and a baseline
    kit images verify             the pinned images: lock vs this host
    """
    output.configure(quiet, verbose, progress=not no_progress)
    from kit.execute.owners import dead_marks

    if dead_marks():  # a kit that was killed with containers running: whatever runs next removes them
        from kit.execute.leftovers import remove_leftovers

        remove_leftovers(output.say)


@cli.command("doctor")
@PROFILE_OPTION
@JSON_OPTION
@REDACT_OPTION
@DCGM_DIAG_OPTION
def doctor(profile: str | None, as_json: bool, redact: bool, dcgm_level: int | None) -> None:
    """Fingerprint this host and check it against manifests/environment.yaml (exit 1 on a failure)."""
    from kit.execute.preflight import check_host, failing
    from kit.host.this_host import this_host
    from kit.plan.protocol import plan_for

    plan = plan_for(this_host(), profile)
    fingerprint, checks = check_host(plan, redact=redact, dcgm_level=dcgm_level)
    if as_json:
        click.echo(
            json.dumps(
                {"fingerprint": fingerprint.model_dump(mode="json"), "checks": [c.model_dump() for c in checks]},
                indent=2,
            )
        )
    else:
        from kit.console import show_doctor

        show_doctor(plan.profile, fingerprint, checks)
    sys.exit(1 if failing(checks) else 0)


@cli.command("preflight")
@PROFILE_OPTION
@click.option("--executor", type=click.Choice(["docker", "local"]), help="check the images as this executor runs them")
@JSON_OPTION
@DCGM_DIAG_OPTION
def preflight(profile: str | None, executor: str | None, as_json: bool, dcgm_level: int | None) -> None:
    """Check every image and engine the plan needs, in minutes, before hours of work (exit 1 on a failure)."""
    from kit.execute.preflight import preflight_for

    result = preflight_for(profile, executor, say=output.say, dcgm_level=dcgm_level)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        from kit.console import preflight_table

        output.results().print(preflight_table(result))
    if any(line.status == "fail" for line in result.lines):
        sys.exit(1)


@cli.command("list")
@PROFILE_OPTION
@JSON_OPTION
@click.option(
    "--fingerprint", "fingerprint_file", type=FILE, callback=regular_file, help="plan for the host it describes"
)
def list_cases(profile: str | None, as_json: bool, fingerprint_file: Path | None) -> None:
    """Show the plan: every case of a profile, fitted to this host's GPUs (or the fingerprint's)."""
    from kit.host.this_host import host_described_by, this_host
    from kit.plan.listing import listing

    try:
        host = host_described_by(fingerprint_file) if fingerprint_file is not None else this_host()
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    found = listing(profile, host, own_host=fingerprint_file is None)
    if as_json:
        click.echo(json.dumps(found.data, indent=2))
        return
    click.echo(found.summary)
    click.echo(found.table)
    click.echo(found.notes)


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into an exception so that running cases are torn down and run.json says so."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@cli.command("run")
@click.option("--all", "run_all", is_flag=True, help="every case of the profile")
@click.option("--stage", "stages", multiple=True, help="only this stage (repeatable)")
@click.option("--case", "case_ids", multiple=True, help="only this case id (repeatable; see `kit list`)")
@PROFILE_OPTION
@click.option("--out", type=FOLDER, callback=writable_folder, help="run directory (default: runs/<time>-<profile>)")
@click.option("--resume", type=FOLDER, help="finish this run directory")
@click.option("--dry-run", is_flag=True, help="show what would run, run nothing")
@click.option("--force", is_flag=True, help="start even if environment or health checks fail (recorded in run.json)")
@DCGM_DIAG_OPTION
@click.option("--executor", type=click.Choice(EXECUTORS), help="where cases run (default: docker, else local)")
@click.option("--partition", help="slurm: the partition jobs go to")
@click.option("--account", help="slurm: the account jobs are charged to")
@click.option("--nodes", type=click.IntRange(min=1), help="slurm: nodes per job (default: as many as the ranks need)")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="slurm: a node's GPUs; a GPU case's ranks fill nodes")
@click.option("--time-limit", help="slurm: each job's --time (default: the case's timeout)")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, help="slurm: one more sbatch argument, e.g. --qos=high")
@click.option(
    "--container-mode", type=click.Choice(["none", "pyxis"]), help="slurm: ranks in this Python or their image"
)
@click.option("--nodelist", help="slurm: every job on these nodes (sbatch --nodelist)")
@click.option("--per-node", is_flag=True, help="slurm: the run on each node at once, into OUT/<node>/")
@click.option("--skip-predicted-oom", is_flag=True, help="skip GPU cases predicted not to fit (recorded in run.json)")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    help="every case at least this many independent runs (a verdict needs 3; a max-batch search stays one search)",
)
@click.option(
    "--runs-for",
    "runs_for",
    type=FILE,
    callback=regular_file,
    help="every case the runs this acceptance spec asks: its min_runs, and where it says `repeat:`, more until "
    "each interval is narrow or its time cap is spent",
)
@click.option("--soak", "soak_minutes", type=float, callback=positive_number, help="also a soak of so many minutes")
@click.option("--no-preflight", is_flag=True, help="start without checking each image first (recorded in run.json)")
@REDACT_OPTION
@click.option("--accept-changes", is_flag=True, help="with --resume: go on though files differ from SHA256SUMS")
@click.option("--sign", "sign_key", type=FILE, callback=regular_file, help="sign the finished run with this SSH key")
def run(**options) -> None:
    """Run cases of the protocol into a run directory."""
    from kit import runner
    from kit.console import ConsoleUi, show_run

    request = runner.RunRequest.of_options(options)
    if request.per_node:
        _run_per_node(request)
    _stop_on_sigterm()
    outcome = runner.run(request, ConsoleUi())
    show_run(outcome)
    if request.sign_key and outcome.run_dir is not None and outcome.plan_text is None:
        _sign(outcome.run_dir, request.sign_key)
    if outcome.plan_text is None and outcome.finished_before is None:
        output.results().print(outcome.summary, soft_wrap=True)
        sys.exit(1 if outcome.failed else 0)


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


def _run_per_node(request) -> None:
    """kit run --per-node: this run on each node of the allocation at once, into OUT/<node>/ (with
    --redact, OUT/<the node's token>/); exits with the worst of their exit statuses. With --sign,
    each run that finished is signed here, where a passphrase or a hardware key can be asked for."""
    from kit.execute.slurm import SlurmUnavailable
    from kit.rundir.directory import RunDir
    from kit.runner import run_per_node

    try:
        runs = run_per_node(_options_as_given({"per_node", "out", "sign_key"}), request, output.say)
    except SlurmUnavailable as exc:
        raise UsageFailure(str(exc)) from None
    for node, (folder, code) in runs.items():
        click.echo(f"{node}: {folder} (exit status {code})")
        if request.sign_key and code in (0, 1):  # finished, each case with a result
            run = RunDir(folder)
            run.lock()
            _sign(run, request.sign_key)
    click.echo("compare them: kit report --fleet " + " ".join(str(folder) for folder, _ in runs.values()))
    sys.exit(max(code for _, code in runs.values()))


def no_engine(exc: Exception) -> UsageFailure:
    """The line for cases to run in their images without a docker engine to run them in."""
    return UsageFailure(
        f"{exc}: with docker each case runs in its pinned image (install docker and, on a GPU host, "
        "the NVIDIA container toolkit); --executor local runs them in this Python"
    )


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

    try:
        images.build_all(names, base, force, say=output.say)
    except (KeyError, ValueError) as exc:
        raise UsageFailure(str(exc).strip("'\"")) from None
    except (images.EngineUnavailable, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


@images_group.command("pull")
@click.argument("names", nargs=-1)
def images_pull(names) -> None:
    """Pull images by their pinned digest (default: every image the kit does not build)."""
    from kit import images

    try:
        failures = images.pull_all(names, say=output.say)
    except KeyError as exc:
        raise UsageFailure(str(exc).strip("'\"")) from None
    for failure in failures:
        click.echo(f"error: {failure}", err=True)
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
@click.option(
    "--profile",
    default="paper",
    show_default=True,
    callback=profile_name,
    shell_complete=complete_profile,
    help="paper, quick or smoke",
)
@click.option("--stage", "stages", multiple=True, help="only this stage (repeatable; default: every case)")
@click.option("--case", "case_ids", multiple=True, help="only this case id (repeatable; see `kit list`)")
@click.option("--pvc", required=True, help="the PersistentVolumeClaim holding the run directory and the kit's source")
@click.option("--namespace", help="the namespace the jobs go to (default: kubectl's)")
@click.option("--image-pull-secret", help="a Secret the pods pull the images with")
@click.option("--hf-token-secret", "token_secret", help="a Secret whose key HF_TOKEN holds a token (named, never read)")
@click.option(
    "--gpus-per-node", type=click.IntRange(min=1), help="GPUs of a node; a case with more becomes a PyTorchJob"
)
@click.option("--out", required=True, type=FOLDER, callback=writable_folder, help="folder for the manifests")
def k8s_manifests(profile, stages, case_ids, out, **options) -> None:
    """One manifest per case into OUT (a Job, or a PyTorchJob across nodes), and each case's case.json."""
    from kit.execute.k8s_manifests import K8sOptions, write_profile_manifests

    cases, left_out = write_profile_manifests(profile, stages, case_ids, K8sOptions(**options), out)
    click.echo(f"{cases - len(left_out)} of {cases} manifests written to {out}")
    for reason in sorted(set(left_out.values())):
        ids = [case_id for case_id, why in left_out.items() if why == reason]
        click.echo(
            f"not written: {', '.join(ids[:3])}{f' and {len(ids) - 3} more' if len(ids) > 3 else ''}: {reason}",
            err=True,
        )
    sys.exit(1 if left_out else 0)


@cli.command("sign")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--key",
    "key",
    required=True,
    metavar="KEY",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    callback=regular_file,
    help="an SSH private key, or its .pub where an agent holds the key; any key `ssh-keygen -Y sign` takes, a hardware key too",
)
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
    """Sign the held run with `key`, saying by whom (said without the console's imports, a second of `kit sign`)."""
    from kit.rundir.directory import SIGNATURE_FILES
    from kit.rundir.signing import sign_run

    output.say(
        f"signing {run.root} with {key} (ssh-keygen -Y sign: it asks for a passphrase, or a hardware key's touch, "
        "if the key needs one)"
    )
    click.echo(f"signed by {sign_run(run, key)}: {', '.join(SIGNATURE_FILES)}")


@cli.command("baseline")
@click.argument("run_dirs", nargs=-1, required=True, type=FOLDER)
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="the baseline file to write (JSON)"
)
@click.option(
    "--name", help="the baseline's name, as a spec and the sign-off name it (default: the GPU model and the runs)"
)
@click.option(
    "--sign-key",
    type=FILE,
    callback=regular_file,
    help="an SSH key to sign the baseline with (FILE.sig); needed where a run is signed",
)
@click.option(
    "--expectation",
    is_flag=True,
    help="no measured baseline: the kit's roofline bounds for the run's GPU (hardware.yaml, the preflight's "
    "figures where lower), named as such",
)
@SLO_TTFT_OPTION
@SLO_TPOT_OPTION
def baseline(
    run_dirs: tuple[Path, ...],
    out: Path,
    name: str | None,
    sign_key: Path | None,
    expectation: bool,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> None:
    """Make a baseline for acceptance (`kit report RUN --accept SPEC --baseline FILE`) from finished
    runs of one GPU model: per quantity and case, the median and spread per GPU over the runs, with
    their GPU model, driver, images, kit version and evidence digests; hashed, and signed where the
    runs were (exit 1 if a run does not match its evidence). Serving capacities are held to the
    objectives given (default: those of the kit's spec)."""
    from kit.console import show_baseline
    from kit.measure.slo import given_slo
    from kit.reference.baseline_runs import write_baseline
    from kit.rundir.schema import utc_now

    try:
        made = write_baseline(
            list(run_dirs), out, name, sign_key, utc_now(), expectation, given_slo(slo_ttft_ms, slo_tpot_ms)
        )
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    show_baseline(out, made, signed=sign_key is not None)


@cli.command("report")
@click.argument("run_dirs", nargs=-1, type=FOLDER)
@click.option(
    "--fleet", is_flag=True, help="compare the runs given, one per node of a fleet, and flag the unlike nodes"
)
@click.option("--tolerance", type=float, help="with --fleet: flag a node more than this % below the fleet median (10)")
@click.option(
    "--compare", multiple=True, help="'reference' (the paper's findings) or another run directory; repeatable"
)
@click.option(
    "--format", "formats", default="html,pdf", show_default=True, shell_complete=complete_formats, help=FORMATS_HELP
)
@click.option("--gpu-hour-price", type=float, envvar="KIT_GPU_HOUR_PRICE", callback=positive_number, help=PRICE_HELP)
@click.option("--currency", help="the currency of --gpu-hour-price, named in the report (default USD)")
@SLO_TTFT_OPTION
@SLO_TPOT_OPTION
@click.option(
    "--out", type=FOLDER, callback=writable_folder, help="folder for the report files (default: the run directory)"
)
@REDACT_OPTION
@click.option(
    "--verify", "verify_only", is_flag=True, help="only re-hash the run against its SHA256SUMS, check its signature"
)
@click.option(
    "--expect-digest", help="with --verify: the evidence digest a report printed (16 or more of its characters)"
)
@click.option(
    "--allowed-signers", type=FILE, callback=regular_file, help="the keys trusted to sign runs (ssh-keygen's format)"
)
@click.option(
    "--accept",
    type=FILE,
    callback=regular_file,
    help="an acceptance spec (manifests/acceptance.yaml is the default one): page one opens with ACCEPT, REJECT or "
    "INCONCLUSIVE; exit 0, 1 or 3",
)
@click.option(
    "--baseline",
    type=FILE,
    callback=regular_file,
    help="with --accept: the baseline (`kit baseline`), if not the spec's",
)
def report(**options) -> None:
    """Render a run as HTML and PDF (and/or JSON and CSV for spreadsheets), compared with the paper and/or another run (default: newest run);
    with --fleet, compare runs of one profile, one per node. Each run's signer is named; a signature that fails exits 1.
    The serving sweeps are held to the latency objectives given (default: MLPerf Inference's for Llama-2-70B, Server).
    With --accept SPEC, the run is decided against the spec and a baseline: exit 0 accept, 1 reject, 3 inconclusive."""
    from kit.console import show_report
    from kit.report.request import ReportRequest, make_report

    outcome = make_report(ReportRequest(**options), say=lambda line: output.log().print(line, soft_wrap=True))
    show_report(outcome)
    sys.exit(outcome.exit_status)


def main() -> None:
    try:
        status = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # an option or argument: one line, what is wrong and where the options are listed
        command = exc.ctx.command_path if exc.ctx else "kit"
        click.echo(output.elided(f"error: {exc.format_message()} (see `{command} --help`)"), err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(output.elided(f"Error: {exc.format_message()}"), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    if isinstance(status, int) and status:
        sys.exit(status)


def _said(exc: Exception) -> int | None:
    """An error a command's request ran into, said in one line, and its exit status: the user's to
    fix (2), the host's, the disk's or the evidence's (1, in red), interrupted (130); None for one
    the kit did not expect, which is raised with its traceback."""
    from pydantic import ValidationError

    from kit.files.atomic import UnsafeWrite
    from kit.images import EngineUnavailable
    from kit.manifest import ManifestError, first_problem
    from kit.rundir.directory import RunInUse, UnreadableRun
    from kit.rundir.evidence import EvidenceError
    from kit.rundir.signing import SigningFailed
    from kit.runner import RefusedToStart, RequestError, RunInterrupted

    if output.verbosity.verbose:
        import traceback

        traceback.print_exc()
    if isinstance(exc, OSError) and exc.errno in NO_ROOM:
        click.echo(
            output.elided(
                f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}. Free space on its file system "
                "(df -h) or make it writable; a run keeps every finished case, and `kit run --resume RUN_DIR` goes on."
            ),
            err=True,
        )
        return 1
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # a path argument past the system's limits
        click.echo(
            output.elided(f"error: {exc.filename or 'a path'}: a name longer than the file system allows"), err=True
        )
        return 2
    if isinstance(exc, (RefusedToStart, EvidenceError, RunInterrupted)):
        output.alerts().print(
            output.elided(str(exc)), style="yellow" if isinstance(exc, RunInterrupted) else "red", soft_wrap=True
        )
        return 130 if isinstance(exc, RunInterrupted) else 1
    if isinstance(exc, (RequestError, SigningFailed, EngineUnavailable, ValidationError)):
        said = (
            no_engine(exc)
            if isinstance(exc, EngineUnavailable)
            else UsageFailure(
                f"a run holds {exc.title} data this kit cannot read: {first_problem(exc)}"
                if isinstance(exc, ValidationError)
                else str(exc)
            )
        )
        click.echo(output.elided(f"Error: {said.format_message()}"), err=True)
        return 2
    if isinstance(exc, UnsafeWrite):  # a link or a special file planted where the kit writes
        click.echo(output.elided(f"error: will not write {exc.filename}: {exc.strerror}"), err=True)
        return 2
    if isinstance(exc, (ManifestError, UnreadableRun, RunInUse)):  # a manifest or a run directory that cannot be used
        click.echo(output.elided(f"error: {exc}"), err=True)
        return 2
    return None


if __name__ == "__main__":
    main()
