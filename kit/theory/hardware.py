"""The hardware table: vendor peak figures per GPU, each with its source.

Derived numbers (MFU, roofline bounds, the link-rate ceiling for bus bandwidth) divide by
these peaks, so every figure carries the document it came from, and a figure nobody could
trace to a vendor document is null with a note saying why, never an estimate.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from kit.manifest import load_manifest, manifests_dir

HARDWARE_FILE = "hardware.yaml"

N = TypeVar("N", int, float)


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt field must not silently drop a figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Strict, Generic[N]):
    """One number with its provenance: a value needs a source, a missing value a note."""

    value: N | None
    source: str | None = Field(default=None, min_length=1)
    note: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _provenance(self) -> Figure[N]:
        if self.value is None:
            if self.note is None:
                raise ValueError("a null figure needs a note saying why it is unknown")
        elif self.source is None:
            raise ValueError("a figure needs a source (vendor document and where in it)")
        elif self.value <= 0:
            raise ValueError("a figure must be positive")
        return self


class MemoryFigure(Figure[float]):
    """Memory size in the unit the vendor states, since 80 GB and 80 GiB differ by 7 %."""

    unit: Literal["GB", "GiB"]


class GpuSpec(_Strict):
    """One GPU model. Peak TFLOPS are dense (no 2:4 sparsity) tensor-core figures."""

    vendor: Literal["NVIDIA", "AMD"]
    model: str = Field(min_length=1)
    nvml_name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    bf16_dense_tflops: Figure[float]
    fp16_dense_tflops: Figure[float]
    memory: MemoryFigure
    memory_bandwidth_tb_per_s: Figure[float]
    interconnect: Literal["NVLink", "Infinity Fabric"] | None
    interconnect_generation: Figure[int]
    interconnect_bidirectional_gb_per_s: Figure[float]
    pcie_generation: Figure[int]
    pcie_lanes: Figure[int]
    note: str | None = None

    @property
    def names(self) -> list[str]:
        """Every device name this entry answers to."""
        return [self.nvml_name, *self.aliases]


def normalise_name(name: str) -> str:
    """Compare device names without regard to case or runs of whitespace."""
    return " ".join(name.split()).casefold()


class HardwareTable(_Strict):
    """All known GPUs, keyed by a short id; a device name may belong to one entry only."""

    gpus: dict[str, GpuSpec] = Field(min_length=1)
    _by_name: dict[str, GpuSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _index_names(self) -> HardwareTable:
        owners: dict[str, str] = {}
        for key, spec in self.gpus.items():
            for name in spec.names:
                normalised = normalise_name(name)
                if normalised in owners:
                    raise ValueError(f"device name {name!r} is listed by both {owners[normalised]!r} and {key!r}")
                owners[normalised] = key
                self._by_name[normalised] = spec
        return self

    def lookup(self, nvml_name: str) -> GpuSpec | None:
        """The entry whose name or alias equals nvml_name; None for any GPU not listed.

        Matching is exact after normalising case and whitespace, never by prefix or
        similarity: an H100 PCIe must not borrow the SXM part's peaks.
        """
        return self._by_name.get(normalise_name(nvml_name))


def load_hardware(path: Path | None = None) -> HardwareTable:
    """Read the hardware table (default: manifests/hardware.yaml), once per version of the file:
    a report asks for it per case, and a paper-size run has hundreds of them."""
    path = Path(path or manifests_dir() / HARDWARE_FILE).resolve()
    try:
        stat = path.stat()
    except OSError:
        return load_manifest(path, HardwareTable)  # which says in one line what is wrong
    return _load_hardware(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _load_hardware(path: Path, _mtime_ns: int, _size: int) -> HardwareTable:
    """The table read from `path`; the file's mtime and size are part of the key, so an edited
    file is read again. Callers only read the table, never change it."""
    return load_manifest(path, HardwareTable)


_PEAKS = {"bf16": "bf16_dense_tflops", "fp16": "fp16_dense_tflops"}


def peak_tflops(spec: GpuSpec, dtype: str) -> float | None:
    """Dense tensor-core peak for dtype ("bf16" or "fp16"); None where no source gives it."""
    if dtype not in _PEAKS:
        raise ValueError(f"no peak for dtype {dtype!r}; expected one of {sorted(_PEAKS)}")
    figure: Figure[float] = getattr(spec, _PEAKS[dtype])
    return figure.value
