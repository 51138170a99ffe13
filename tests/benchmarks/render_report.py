"""How long does `kit report` take on a paper-size run?

Writes a synthetic run of every case of the `paper` profile (tests/support/paper_size_run.py: 8 x A800,
3 runs of 8 processes per training case, some OOM, errors and unavailable cases; its numbers are
synthetic) into a temporary folder, then times `kit.report.render` into the run directory, as
`kit report RUN --compare reference` does: HTML alone, PDF alone, and both (the command's
default). Each is repeated; the median is the figure, with the spread and the load beside it,
since a shared machine makes single timings noisy. The kit cache is a fresh folder of its own:
the first render draws every chart (kit.report.chart_cache) and is printed apart, as "cold";
the repeats read the drawings back, as every later report of the same run does. The CPU time of the rendering is printed too,
its forked children's included (kit.report.forked): the PDF is printed on one core, the model
before it is built on all of them, so on an idle machine the wall time is below the CPU time.

    python tests/benchmarks/render_report.py [--repeat 3] [--keep DIR] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.paper_size_run import write_paper_size_run  # noqa: E402

from kit.report.render import render  # noqa: E402
from kit.rundir.directory import RunDir

VARIANTS = {"html": ["html"], "pdf": ["pdf"], "html+pdf": ["html", "pdf"]}
LIMIT_S = 10.0  # issue 17's acceptance figure for HTML and PDF of a paper-size run


def timed(run_dir: Path, formats: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (this process's and its children's) of one render into the run directory."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    render(run_dir, ["reference"], formats, run_dir)
    return time.perf_counter() - wall, cpu_seconds() - cpu


def cpu_seconds() -> float:
    used = os.times()
    return used.user + used.system + used.children_user + used.children_system


def pages(pdf: Path) -> str:
    try:
        import pypdfium2
    except ImportError:
        return "unknown (pypdfium2 not installed)"
    return str(len(pypdfium2.PdfDocument(pdf)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="renders per variant (default 3)")
    parser.add_argument("--keep", type=Path, help="write the run here and keep it (default: a temporary folder)")
    parser.add_argument("--profile", action="store_true", help="also print where one HTML+PDF render spends its time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kit-render-bench-") as scratch:
        run_dir = args.keep or Path(scratch) / "paper-size-run"
        start = time.perf_counter()
        write_paper_size_run(run_dir)
        written_s = time.perf_counter() - start
        run = RunDir(run_dir)
        info = run.read_info()
        files = len(run.digests())
        print(f"paper-size run: {len(info.selected)} cases, {files} files, written in {written_s:.1f} s ({run_dir})")
        print(f"machine: {os.cpu_count()} CPUs, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

        os.environ["KIT_CACHE"] = str(Path(scratch) / "kit-cache")  # no chart of an earlier render
        cold_wall, cold_cpu = timed(run_dir, VARIANTS["html+pdf"])
        print(f"render html+pdf, charts not yet drawn (cold): wall {cold_wall:.2f} s; CPU {cold_cpu:.2f} s")
        results: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.repeat):  # interleaved, so that a burst of load hits every variant alike
            for name, formats in VARIANTS.items():
                results.setdefault(name, []).append(timed(run_dir, formats))
        for name, pairs in results.items():
            walls, cpus = [wall for wall, _ in pairs], [cpu for _, cpu in pairs]
            print(
                f"render {name:9s} wall median {statistics.median(walls):6.2f} s "
                f"(min {min(walls):.2f}, max {max(walls):.2f}, n={len(walls)}); "
                f"CPU median {statistics.median(cpus):.2f} s"
            )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"report.pdf: {pages(run_dir / 'report.pdf')} pages; "
            f"report.html: {(run_dir / 'report.html').stat().st_size} bytes"
        )
        both = statistics.median(wall for wall, _ in results["html+pdf"])
        print(f"HTML and PDF: median {both:.2f} s, {'within' if both <= LIMIT_S else 'ABOVE'} the {LIMIT_S:g} s target")

        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(render, run_dir, ["reference"], ["html", "pdf"], run_dir)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
