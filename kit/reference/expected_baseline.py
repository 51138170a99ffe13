"""The kit's own expectation for a host's GPU, standing in for a baseline where none exists (`kit
baseline RUN --expectation`): per training and serving case of the run, the roofline bound of
kit.plan.predictions per GPU at the GPU's hardware.yaml peaks, or at what the preflight measured
where it measured less (kit.measure.calibration.Achievable). Named as such everywhere: a bound no
engine reaches, so a spec held to it requires a fraction of the bound (0.3, not 0.95), not of a
measured machine."""

from __future__ import annotations

from kit.measure.calibration import Achievable
from kit.plan.predictions import device_spec, serving_bounds, training_throughput_bound
from kit.plan.workload_phrase import workload_phrase
from kit.reference.baseline import Baseline, BaselineFigure, BaselineSource
from kit.reference.quantities import QUANTITIES, QuantityName
from kit.rundir.schema import Result
from kit.theory.hardware import load_hardware


def _expected(result: Result, source: BaselineSource) -> tuple[QuantityName, float] | None:
    """The case's quantity and its bound per GPU on this GPU; None where the kit has none."""
    names = [name.strip() for sample in result.samples for rank in sample.ranks for name in rank.device_name.split(",")]
    spec = device_spec(result.case, names, load_hardware())
    if spec is None:
        return None
    spec = Achievable(spec, source.measured.calibration).spec
    if QUANTITIES["training_tokens_per_s"].reads(result.case):
        bound = training_throughput_bound(result.case, spec)
        return None if bound is None else ("training_tokens_per_s", bound / result.case.gpus)
    if QUANTITIES["serving_output_tokens_per_s"].reads(result.case):
        found = serving_bounds(result.case, spec)
        return (
            None if found is None else ("serving_output_tokens_per_s", found.max_output_tokens_per_s / result.case.gpus)
        )
    return None


def expectation_baseline(source: BaselineSource, made_at: str) -> Baseline:
    """The expectation for the GPU of `source`'s run, for each of its ok cases the kit bounds
    (ValueError where it bounds none: a CPU run, or a GPU hardware.yaml does not list)."""
    figures = []
    for result in source.measured.results.values():
        found = _expected(result, source) if result.status == "ok" else None
        if found is None:
            continue
        quantity, value = found
        measured = result.metrics.get(QUANTITIES[quantity].metric)
        if measured is None:
            continue
        unit = QUANTITIES[quantity].unit(measured)
        figures.append(
            BaselineFigure(
                quantity=quantity,
                case_id=result.case_id,
                workload=workload_phrase(result.case),
                unit=unit,
                values=(value,),
                median=value,
                spread=0.0,
            )
        )
    if not figures:
        raise ValueError(
            f"the kit has no expectation for the cases of {source.run.run_id} on {source.measured.devices}: "
            "its roofline bounds need a GPU that manifests/hardware.yaml lists"
        )
    calibrated = source.measured.calibration is not None and source.measured.calibration.device == "cuda"
    gpu = source.measured.gpu_names[0]
    return Baseline(
        name=f"the kit's expectation for {gpu}: roofline bounds at "
        + ("its peaks, or the preflight's measured figures where lower" if calibrated else "its datasheet peaks")
        + " (manifests/hardware.yaml); no machine measured it",
        kind="expectation",
        gpu_model=gpu,
        driver=source.driver,
        kit_version=source.kit_version,
        images=source.images,
        made_at=made_at,
        runs=(source.run,),
        figures=tuple(figures),
    ).sealed()
