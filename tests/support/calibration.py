"""A preflight calibration with given figures, for the tests of the arithmetic that reads one."""

from __future__ import annotations

from kit.host.fingerprint import Calibration, MeasuredFigure

H100 = "NVIDIA H100 80GB HBM3"


def h100_calibration(matmul_tflops: float, copy_gb_s: float) -> Calibration:
    """A calibration of one H100 with the figures given (inputs of the arithmetic under test)."""

    def figure(value: float, unit: str) -> MeasuredFigure:
        return MeasuredFigure(value=value, unit=unit, per_device=[value], how="as given")

    return Calibration(
        device="cuda",
        device_names=[H100],
        matmul_dtype="bf16",
        matmul=figure(matmul_tflops, "TFLOPS"),
        memory_copy=figure(copy_gb_s, "GB/s"),
        raw_samples="raw",
        seconds=9.0,
    )
