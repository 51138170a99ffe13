"""Communication micro-benchmarks: one collective swept over message sizes (paper, Sec. VI).

The `torch` backend: torch.distributed in the processes the launcher started (gloo on CPU, NCCL
on GPU), the framework's own view of the collectives. For each size: one call checked against
the expected values, warm-up calls, a barrier, then each timed call on its own (device
synchronised before and after); an iteration lasts as long as its slowest rank, and a row
reports the median and the spread of those times. Wrong elements make the case an error.
(The `nccl-tests` backend runs NVIDIA's binary as the case's only process, with no Python:
kit/execute/nccl_tests.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

from kit.comm.collectives import (
    COLLECTIVES,
    algorithm_bandwidth_gbps,
    buffer_layout,
    bus_bandwidth_factor,
    message_sizes,
)
from kit.comm.gpu_links import topology_facts
from kit.comm.sweep import CommRow, CommSweep, Timing, spread
from kit.files.atomic import atomic_write_text
from kit.plan.protocol import Case, CommParams
from kit.rundir.schema import DeviceTelemetry
from kit.workloads.harness import Device, SelfTimedWorkload
from kit.workloads.srun_rank import node_name

TORCH_TIME_STATISTIC = "median over the timed iterations of each iteration's slowest rank"


class CommFailure(RuntimeError):
    """The collective returned wrong data: the measurement is of something broken."""


def measure(case: Case, device: Device, out_dir: Path) -> tuple[CommSweep, DeviceTelemetry]:
    """The sweep's rows, and NVML's telemetry over the sweep (clocks, temperature, throttling; no
    energy per token: a collective moves bytes, not tokens)."""
    params = case.params_as(CommParams)
    if params.collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {params.collective!r}")
    if params.backend != "torch":
        raise ValueError(
            f"{case.id}: the {params.backend} backend runs its binary as the case's process "
            "(kit/execute/nccl_tests.py), not in this workload"
        )
    sampler = device.telemetry_sampler()
    sampler.start()
    try:
        rows = torch_sweep(case, device, out_dir)
    finally:
        telemetry = sampler.stop()
    return rows, telemetry


# ---------------------------------------------------------------------------------------------
# torch.distributed
# ---------------------------------------------------------------------------------------------


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


class _Buffers:
    """The tensors of one size, filled so that every rank knows what it must receive:
    rank r contributes the value r + 1."""

    def __init__(self, name: str, count: int, ranks: int, rank: int, dtype, where):
        import torch

        self.name, self.ranks, self.rank, self.count = name, ranks, rank, count
        # Input and output lengths, nccl-tests' layout: AllGather gathers n inputs of `count`,
        # ReduceScatter scatters an input of n x `count`, AlltoAll exchanges n chunks of `count`.
        lengths = {
            "all_gather": (count, count * ranks),
            "reduce_scatter": (count * ranks, count),
            "alltoall": (count * ranks, count * ranks),
        }
        in_length, out_length = lengths.get(name, (count, None))
        self.input = torch.empty(in_length, dtype=dtype, device=where)
        self.output = None if out_length is None else torch.empty(out_length, dtype=dtype, device=where)

    def fill(self) -> None:
        self.input.fill_(self.rank + 1)
        if self.output is not None:
            self.output.zero_()

    def call(self) -> None:
        import torch.distributed as dist

        if self.name == "all_reduce":
            dist.all_reduce(self.input, op=dist.ReduceOp.SUM)
        elif self.name == "all_gather":
            dist.all_gather_into_tensor(self.output, self.input)
        elif self.name == "reduce_scatter":
            dist.reduce_scatter_tensor(self.output, self.input, op=dist.ReduceOp.SUM)
        elif self.name == "reduce":
            dist.reduce(self.input, dst=0, op=dist.ReduceOp.SUM)
        elif self.name == "broadcast":
            dist.broadcast(self.input, src=0)
        elif self.name == "alltoall":
            dist.all_to_all_single(self.output, self.input)

    def wrong(self) -> int:
        """Elements of this rank's result that differ from the expected values (small integers,
        exact in every dtype the kit uses)."""
        import torch

        total = self.ranks * (self.ranks + 1) / 2
        if self.name == "all_reduce":
            result, expected = self.input, torch.full_like(self.input, total)
        elif self.name == "reduce":
            if self.rank != 0:
                return 0  # only the root's buffer is defined
            result, expected = self.input, torch.full_like(self.input, total)
        elif self.name == "broadcast":
            result, expected = self.input, torch.ones_like(self.input)
        else:  # reduce_scatter, all_gather, alltoall: into the output buffer
            assert self.output is not None, f"{self.name} has an output buffer (__init__)"
            if self.name == "reduce_scatter":
                result, expected = self.output, torch.full_like(self.output, total)
            else:  # all_gather, alltoall: chunk j comes from rank j
                result = self.output
                values = torch.arange(1, self.ranks + 1, dtype=self.output.dtype, device=self.output.device)
                expected = values.repeat_interleave(self.count)
        return int((result != expected).sum().item())


def torch_sweep(case: Case, device: Device, out_dir: Path) -> CommSweep:
    import torch
    import torch.distributed as dist

    params = case.params_as(CommParams)
    backend = "nccl" if device.kind == "cuda" else "gloo"
    dist.init_process_group(backend)
    try:
        rank, ranks = dist.get_rank(), dist.get_world_size()
        rank_nodes = [""] * ranks  # each rank says where it runs: a sweep across nodes is inter-node
        dist.all_gather_object(rank_nodes, node_name())
        where = torch.device("cuda", torch.cuda.current_device()) if device.kind == "cuda" else torch.device("cpu")
        dtype = _torch_dtype(params.dtype)
        element_bytes = torch.empty((), dtype=dtype).element_size()
        placement = COLLECTIVES[params.collective].torch_placement
        rows = []
        for requested in message_sizes(params.min_bytes, params.max_bytes, params.step_factor):
            layout = buffer_layout(params.collective, requested, ranks, element_bytes)
            buffers = _Buffers(params.collective, layout.count, ranks, rank, dtype, where)
            buffers.fill()
            buffers.call()
            device.synchronize()
            wrong = torch.tensor([buffers.wrong()], dtype=torch.int64, device=where)
            dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
            for _ in range(params.warmup_iters):
                buffers.call()
            device.synchronize()
            dist.barrier()
            times = []
            for _ in range(params.iters):
                device.synchronize()
                start = time.perf_counter()
                buffers.call()
                device.synchronize()
                times.append(time.perf_counter() - start)
            slowest = torch.tensor(times, dtype=torch.float64, device=where)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            stats = spread(slowest.tolist())
            timing = Timing(
                time_us=stats["median"] * 1e6,
                algbw_gbps=algorithm_bandwidth_gbps(layout.size_bytes, stats["median"]),
                busbw_gbps=algorithm_bandwidth_gbps(layout.size_bytes, stats["median"])
                * bus_bandwidth_factor(params.collective, ranks),
                wrong=int(wrong.item()),
                time_us_min=stats["min"] * 1e6,
                time_us_p25=stats["p25"] * 1e6,
                time_us_p75=stats["p75"] * 1e6,
                time_us_max=stats["max"] * 1e6,
            )
            rows.append(
                CommRow(
                    size_bytes=layout.size_bytes,
                    count=layout.count,
                    dtype=params.dtype,
                    redop="sum" if params.collective in ("all_reduce", "reduce_scatter", "reduce") else None,
                    root=0 if params.collective in ("reduce", "broadcast") else None,
                    **{"in_place" if placement == "in-place" else "out_of_place": timing},
                )
            )
        sweep = CommSweep(
            collective=params.collective,
            backend=f"torch-{backend}",
            ranks=ranks,
            dtype=params.dtype,
            warmup_iters=params.warmup_iters,
            iters=params.iters,
            time_statistic=TORCH_TIME_STATISTIC,
            rows=rows,
            device_names=[device.name],
            topology=topology_facts(ranks) if device.kind == "cuda" and rank == 0 else None,
            rank_nodes=rank_nodes,
        )
        if sweep.failure:
            name = f"failed-sweep-rank-{rank}.json"
            atomic_write_text(out_dir / name, sweep.model_dump_json(indent=2) + "\n")
            raise CommFailure(f"{params.collective} returned wrong data: {sweep.failure} (rows in {name})")
        dist.barrier()
        return sweep
    finally:
        dist.destroy_process_group()


WORKLOAD = SelfTimedWorkload(measure)
