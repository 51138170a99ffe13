"""Kubernetes manifests of a case: what the kit would submit to a cluster, written to be read,
kept as golden files (tests/golden/k8s/) and applied with `kubectl apply -f`.

Pure functions of the case, the lock and the options; nothing here talks to a cluster (running
and following the jobs is a later step). The container is the docker executor's, moved to a pod:
the same command, environment and mount points (kit.execute.docker), the image by the registry
digest the lock pins, the run directory on a PersistentVolumeClaim, /dev/shm as a memory
emptyDir. Kubernetes has no ulimit field, so the launch raises its own soft limits as far as the
node's container runtime allows.

- One node (one process, or one pod launching its ranks as the docker executor does): a
  batch/v1 Job whose pod asks for the case's GPUs (`nvidia.com/gpu`).
- More GPUs than a node holds (`gpus_per_node`): a Kubeflow PyTorchJob (kubeflow.org/v1), one
  Master and Workers, each pod starting its node's ranks with torchrun; the operator gives every
  pod the master's address and port, and `RANK` (its node's rank).
- A serve case: a Job whose pod runs the engine's image as published, with its documented
  arguments, the model folder read-only from the volume (the client beside it: not yet).

The claim holds (paths within it):
  kit/                      the kit's source (read-only, where the images look for it)
  run/cases/<case-id>/      the case folder: case.json in, each run's results out
  cache/<image>/            the image's cache (built ops, HOME)
  cache/checkpoints/        synthetic checkpoints (read-only)
  models/<model-key>/       a serve case's model folder (read-only)
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from pathlib import Path

from pydantic import BaseModel, Field

from kit import images
from kit.execute import memory_cap_bytes, nccl_tests, processes
from kit.execute.docker import (
    CACHE_MOUNT,
    CASE_MOUNT,
    MODELS_MOUNT,
    SHM_SIZE,
    SOURCE_MOUNT,
    TOKEN_VARIABLES,
    ULIMITS,
    container_command,
    container_environment,
)
from kit.execute.slurm_script import layout
from kit.plan.protocol import Case, ServeParams
from kit.rundir.schema import SlurmOptions

GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA's device plugin
TOKEN_SECRET_KEY = "HF_TOKEN"
NAME_LIMIT = 52  # a PyTorchJob's pods and services are named <name>-worker-<n>: DNS labels of 63 at most
RUN_VOLUME = "run"
SHM_VOLUME = "dshm"
BINARY_UNITS = {"g": "Gi", "m": "Mi", "k": "Ki"}  # docker's sizes count in powers of 1024
CONFINED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}  # as the docker executor: no capabilities
PYTORCHJOB_PORT = 23456  # the training operator's default for the port it names pytorchjob-port


class K8sOptions(BaseModel):
    """`kit k8s manifests`'s options."""

    pvc: str = Field(
        description="the PersistentVolumeClaim holding the run directory (ReadWriteMany for several nodes)"
    )
    namespace: str | None = None
    image_pull_secret: str | None = None
    token_secret: str | None = Field(
        default=None, description=f"a Secret whose key {TOKEN_SECRET_KEY} holds a token for gated models"
    )
    gpus_per_node: int | None = Field(
        default=None, ge=1, description="GPUs of a node; a case with more becomes a PyTorchJob"
    )


class NotWritable(ValueError):
    """A case that has no manifest (yet), with why."""


def object_name(case_id: str) -> str:
    """The case id as a DNS label: lowercase, dashes for dots, shortened with a hash if long."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"kit-{case_id}".lower()).strip("-")
    if len(name) > NAME_LIMIT:
        name = f"{name[: NAME_LIMIT - 9].rstrip('-')}-{hashlib.sha256(case_id.encode()).hexdigest()[:8]}"
    return name


def quantity(docker_size: str) -> str:
    """A docker size (16g, 512m) as a Kubernetes quantity of the same bytes (16Gi, 512Mi)."""
    return docker_size[:-1] + BINARY_UNITS[docker_size[-1].lower()]


def pinned_image(case: Case) -> str:
    """The case's image as name@sha256:..., exactly as the lock pins it."""
    found = images.image_for_case(case.image)
    if found is None:
        raise NotWritable(f"the lock ({images.lock_path()}) has no image {case.image!r}")
    if found[1].digest is None:
        raise NotWritable(
            f"image {found[1].reference} ({case.image}) has no registry digest in the lock: push it to a registry "
            "the cluster pulls from and pin its digest in manifests/images.lock.yaml"
        )
    if case.device not in found[1].devices:
        raise NotWritable(
            f"image {found[1].reference} ({case.image}) runs on {', '.join(found[1].devices)}, not {case.device}"
        )
    return found[1].pinned_reference


def active_deadline_s(case: Case) -> int:
    """The case's timeout for all of its runs: Kubernetes stops the job past it."""
    return math.ceil(case.params.timeout_s * case.params.runs)


def limits_prelude(case: Case) -> list[str]:
    """Shell lines raising the soft limits the docker executor sets (memlock, stack) as far as the
    hard ones allow, and a CPU case's memory cap as its soft data limit."""
    stack_kib = ULIMITS["stack"][0] // 1024
    lines = [
        'ulimit -S -l "$(ulimit -H -l)"',
        f'ulimit -S -s {stack_kib} 2>/dev/null || ulimit -S -s "$(ulimit -H -s)"',
    ]
    cap = memory_cap_bytes(case)
    return lines + ([f"ulimit -S -d {cap // 1024}"] if cap is not None else [])


def launches(case: Case, command_of) -> list[list[str]]:
    """The command lines of the case's runs: one launch doing them all where the case shares one,
    else one launch per run, one after another (`command_of(indices)`)."""
    indices = list(range(1, case.params.runs + 1))
    if case.shares_launch:
        return [command_of(indices)]
    return [command_of([index]) for index in indices]


def shell_command(case: Case, commands: list[list[str]]) -> list[str]:
    """bash running the limits' lines, then each launch; the first that fails ends the pod."""
    script = ["set -euo pipefail", *limits_prelude(case), *(shlex.join(command) for command in commands)]
    return ["bash", "-c", "\n".join(script)]


def environment(case: Case, options: K8sOptions) -> list[dict]:
    """The docker executor's variables (never a token's value: that one comes from a Secret, when
    one is named). A CPU case's thread count is the node's to decide, not this host's."""
    env = container_environment(case, host_environment={})
    if case.device == "cpu" and "OMP_NUM_THREADS" not in case.params.env:
        env.pop("OMP_NUM_THREADS", None)
    listed: list[dict] = [{"name": name, "value": value} for name, value in env.items()]
    if options.token_secret:
        listed += [
            {
                "name": name,
                "valueFrom": {
                    "secretKeyRef": {"name": options.token_secret, "key": TOKEN_SECRET_KEY, "optional": True}
                },
            }
            for name in TOKEN_VARIABLES
        ]
    return listed


def workload_mounts(case: Case) -> list[dict]:
    """The docker executor's mount points, from the claim."""
    return [
        {"name": RUN_VOLUME, "mountPath": SOURCE_MOUNT, "subPath": "kit", "readOnly": True},
        {"name": RUN_VOLUME, "mountPath": CASE_MOUNT, "subPath": f"run/cases/{case.id}"},
        {"name": RUN_VOLUME, "mountPath": CACHE_MOUNT, "subPath": f"cache/{case.image}"},
        {
            "name": RUN_VOLUME,
            "mountPath": f"{CACHE_MOUNT}/checkpoints",
            "subPath": "cache/checkpoints",
            "readOnly": True,
        },
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
    ]


def volumes(options: K8sOptions, shm_size: str) -> list[dict]:
    return [
        {"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": options.pvc}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity(shm_size)}},
    ]


def with_gpus(container: dict, case: Case, gpus: int) -> dict:
    """The container asking for `gpus` GPUs on a GPU case (a CPU case asks for none)."""
    return {**container, "resources": {"limits": {GPU_RESOURCE: gpus}}} if case.device == "cuda" else container


def pod_template(options: K8sOptions, container: dict, shm_size: str) -> dict:
    """A pod of one container, never restarted in place: a failed run is the case's answer."""
    spec = {"restartPolicy": "Never", "containers": [container], "volumes": volumes(options, shm_size)}
    if options.image_pull_secret:
        spec["imagePullSecrets"] = [{"name": options.image_pull_secret}]
    return {"metadata": {"labels": {"app.kubernetes.io/part-of": "kit"}}, "spec": spec}


def metadata(case: Case, options: K8sOptions) -> dict:
    meta = {
        "name": object_name(case.id),
        "labels": {"app.kubernetes.io/part-of": "kit", "kit/stage": case.stage},
        "annotations": {"kit/case": case.id, "kit/image": case.image},
    }
    if options.namespace:
        meta["namespace"] = options.namespace
    return meta


def job(case: Case, options: K8sOptions, container: dict, shm_size: str) -> dict:
    """A batch/v1 Job of one pod, never retried (a failed measurement is the case's answer), ended
    past the case's timeout."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(case, options),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_s(case),
            "template": pod_template(options, container, shm_size),
        },
    }


def single_node_job(case: Case, options: K8sOptions) -> dict:
    """One pod launching the case's ranks as the docker executor does (kit.workloads.launch)."""
    binary = nccl_tests.runs_binary(case)
    container = {
        "name": "workload",
        "image": pinned_image(case),
        "command": shell_command(case, launches(case, lambda indices: container_command(case, indices))),
        "env": environment(case, options),
        "securityContext": CONFINED,
        "volumeMounts": [m for m in workload_mounts(case) if m["name"] == SHM_VOLUME]
        if binary
        else workload_mounts(case),
    }
    if not binary:
        container["workingDir"] = CASE_MOUNT
    return job(case, options, with_gpus(container, case, case.gpus), SHM_SIZE)


def torchrun_command(case: Case, nodes: int, per_node: int, indices: list[int]) -> list[str]:
    """One node's ranks of a launch: torchrun with the node's rank (RANK) and the master's address
    and port, which the training operator adds to each pod's environment ($(VAR): Kubernetes
    expands it in the command). torchrun sets each rank's variables as the kit's launcher does."""
    outs = [part for index in indices for part in ("--out", f"{CASE_MOUNT}/runs/{index}")]
    return [
        "torchrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={per_node}",
        "--node-rank=$(RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        "-m",
        "kit.workloads",
        "--case",
        f"{CASE_MOUNT}/case.json",
        *outs,
    ]


def pytorch_job(case: Case, options: K8sOptions, nodes: int, per_node: int) -> dict:
    """A Kubeflow PyTorchJob: a Master and nodes-1 Workers, each pod with its node's GPUs."""
    container = {
        "name": "pytorch",  # the container the operator gives the rendezvous variables to
        "image": pinned_image(case),
        "ports": [{"name": "pytorchjob-port", "containerPort": PYTORCHJOB_PORT}],  # where the master listens
        "command": shell_command(
            case, launches(case, lambda indices: torchrun_command(case, nodes, per_node, indices))
        ),
        "env": environment(case, options),
        "securityContext": CONFINED,
        "volumeMounts": workload_mounts(case),
        "workingDir": CASE_MOUNT,
    }
    pod = with_gpus(container, case, per_node)
    replicas = {"Master": 1, "Worker": nodes - 1}
    specs = {
        kind: {"replicas": count, "restartPolicy": "Never", "template": pod_template(options, pod, SHM_SIZE)}
        for kind, count in replicas.items()
        if count
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata(case, options),
        "spec": {
            "nprocPerNode": str(per_node),
            "runPolicy": {"backoffLimit": 0, "activeDeadlineSeconds": active_deadline_s(case)},
            "pytorchReplicaSpecs": specs,
        },
    }


def serve_job(case: Case, options: K8sOptions) -> dict:
    """The engine in its pinned image, unchanged (its ENTRYPOINT, the documented arguments and
    variables), the model folder from the claim, /dev/shm as its docs ask. The kit's client that
    fires the burst runs on the host (kit.serve.session) and has no place in the pod yet, so the
    engine stays up until the Job's deadline."""
    from kit.plan.model_key import model_key
    from kit.serve.engines import engine_for

    params = case.params_as(ServeParams)
    engine = engine_for(params)
    key = model_key(*case.named_model, params.seed)
    inside = f"{MODELS_MOUNT}/{key}"
    env = {**engine.environment(case), **params.env}
    container = {
        "name": "engine",
        "image": pinned_image(case),
        "args": [*engine.command, *engine.arguments(case, inside, "0.0.0.0", engine.container_port)],
        "ports": [{"name": "http", "containerPort": engine.container_port}],
        "readinessProbe": {"httpGet": {"path": engine.health_path, "port": engine.container_port}},
        "securityContext": CONFINED,
        "volumeMounts": [
            {"name": RUN_VOLUME, "mountPath": inside, "subPath": f"models/{key}", "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
        ],
    }
    if env:
        container["env"] = [{"name": name, "value": value} for name, value in env.items()]
    return job(case, options, with_gpus(container, case, case.gpus), engine.shm_size)


def manifest(case: Case, options: K8sOptions) -> dict:
    """The one object the case becomes (raises NotWritable, with why, where it has none)."""
    if case.max_batch_search is not None:
        raise NotWritable("a max-batch search picks each run from the one before; not a fixed job")
    one_process = case.workload == "serve" or nccl_tests.runs_binary(case)
    if one_process and case.device == "cuda" and case.gpus > (options.gpus_per_node or case.gpus):
        raise NotWritable(
            f"its one process drives all {case.gpus} GPUs, more than a node of {options.gpus_per_node} holds "
            "(a serving engine or nccl-tests across nodes is not written yet)"
        )
    if case.workload == "serve":
        return serve_job(case, options)
    place = layout(processes(case), case.device, SlurmOptions(gpus_per_node=options.gpus_per_node))
    if place.nodes > 1:
        return pytorch_job(case, options, place.nodes, place.tasks_per_node)
    return single_node_job(case, options)


def manifest_yaml(case: Case, options: K8sOptions) -> str:
    """The manifest as YAML to read: fields in the order written, a launch script as a block."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:
            return True

    def text(dumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    header = f"# kit case {case.id}: written by `kit k8s manifests`; apply with kubectl apply -f\n"
    return header + yaml.dump(manifest(case, options), Dumper=Dumper, sort_keys=False, width=1000)


def write_manifests(cases: list[Case], options: K8sOptions, out: Path) -> dict[str, str]:
    """Each case's manifest as OUT/<case-id>.yaml, and its case.json as OUT/cases/<case-id>/ (to
    be copied to the claim's run/cases/); the cases left out, with why."""
    from kit.files.atomic import atomic_write_text
    from kit.rundir.directory import atomic_write_model

    left_out = {}
    for case in cases:
        try:
            text = manifest_yaml(case, options)
        except ValueError as exc:  # NotWritable, or an engine or collective the kit does not know
            left_out[case.id] = str(exc)
            continue
        atomic_write_text(out / f"{case.id}.yaml", text)
        atomic_write_model(out / "cases" / case.id / "case.json", case)
    return left_out


def write_profile_manifests(
    profile: str, stages: tuple[str, ...], case_ids: tuple[str, ...], options: K8sOptions, out: Path
) -> tuple[int, dict[str, str]]:
    """`kit k8s manifests`: the manifests of the profile's cases asked for (ValueError naming an
    unknown stage or case); how many cases, and why each left out was."""
    from kit.plan.protocol import build_plan, load_protocol, select

    cases = select(build_plan(load_protocol(), profile, host_gpus=None), stages, case_ids)
    return len(cases), write_manifests(cases, options, out)
