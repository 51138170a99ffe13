"""The Kubernetes manifests the kit writes: golden files in tests/golden/k8s/ (KIT_UPDATE_GOLDEN=1
rewrites them), every key a field of the object it sits in, images by the lock's digest, no token.

No cluster answers here (kubectl validates against a server's OpenAPI), so the fields are checked
against the names of the Kubernetes API (batch/v1 Job, core/v1 PodSpec, as the Kubernetes Python
client's models name them) and of Kubeflow's PyTorchJob (kubeflow.org/v1,
pkg/apis/kubeflow.org/v1/pytorch_types.go and common_types.go of kubeflow/training-operator).
"""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner
from support.golden_files import assert_golden

from kit import images
from kit.cli import cli
from kit.execute.k8s_manifests import K8sOptions, NotWritable, manifest, manifest_yaml, object_name

TRAIN_DIGEST = "sha256:" + "ab" * 32

# The fields each object may have (a subset of each API's: those the kit writes and their peers).
FIELDS = {
    "Job": {"apiVersion", "kind", "metadata", "spec"},
    "ObjectMeta": {"name", "namespace", "labels", "annotations"},
    "JobSpec": {
        "activeDeadlineSeconds",
        "backoffLimit",
        "completions",
        "parallelism",
        "template",
        "ttlSecondsAfterFinished",
        "podFailurePolicy",
        "suspend",
    },
    "PodTemplateSpec": {"metadata", "spec"},
    "PodSpec": {
        "restartPolicy",
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
        "securityContext",
        "nodeSelector",
        "tolerations",
    },
    "Container": {
        "name",
        "image",
        "command",
        "args",
        "env",
        "ports",
        "resources",
        "securityContext",
        "volumeMounts",
        "workingDir",
        "readinessProbe",
        "startupProbe",
    },
    "EnvVar": {"name", "value", "valueFrom"},
    "EnvVarSource": {"secretKeyRef"},
    "SecretKeySelector": {"name", "key", "optional"},
    "ContainerPort": {"name", "containerPort", "protocol"},
    "Probe": {"httpGet"},
    "HTTPGetAction": {"path", "port"},
    "ResourceRequirements": {"limits", "requests"},
    "SecurityContext": {"allowPrivilegeEscalation", "capabilities"},
    "Capabilities": {"drop", "add"},
    "VolumeMount": {"name", "mountPath", "subPath", "readOnly"},
    "Volume": {"name", "persistentVolumeClaim", "emptyDir"},
    "PersistentVolumeClaimVolumeSource": {"claimName", "readOnly"},
    "EmptyDirVolumeSource": {"medium", "sizeLimit"},
    "LocalObjectReference": {"name"},
    "PyTorchJob": {"apiVersion", "kind", "metadata", "spec"},
    "PyTorchJobSpec": {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"},
    "RunPolicy": {
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
        "suspend",
    },
    "ReplicaSpec": {"replicas", "template", "restartPolicy"},
}
# What the value of a field is, where it is an object (or a list of objects).
TYPES = {
    ("Job", "metadata"): "ObjectMeta",
    ("Job", "spec"): "JobSpec",
    ("JobSpec", "template"): "PodTemplateSpec",
    ("PodTemplateSpec", "metadata"): "ObjectMeta",
    ("PodTemplateSpec", "spec"): "PodSpec",
    ("PodSpec", "containers"): "Container",
    ("PodSpec", "volumes"): "Volume",
    ("PodSpec", "imagePullSecrets"): "LocalObjectReference",
    ("Container", "env"): "EnvVar",
    ("EnvVar", "valueFrom"): "EnvVarSource",
    ("EnvVarSource", "secretKeyRef"): "SecretKeySelector",
    ("Container", "ports"): "ContainerPort",
    ("Container", "readinessProbe"): "Probe",
    ("Probe", "httpGet"): "HTTPGetAction",
    ("Container", "resources"): "ResourceRequirements",
    ("Container", "securityContext"): "SecurityContext",
    ("SecurityContext", "capabilities"): "Capabilities",
    ("Container", "volumeMounts"): "VolumeMount",
    ("Volume", "persistentVolumeClaim"): "PersistentVolumeClaimVolumeSource",
    ("Volume", "emptyDir"): "EmptyDirVolumeSource",
    ("PyTorchJob", "metadata"): "ObjectMeta",
    ("PyTorchJob", "spec"): "PyTorchJobSpec",
    ("PyTorchJobSpec", "runPolicy"): "RunPolicy",
    ("ReplicaSpec", "template"): "PodTemplateSpec",
}


def check_fields(value, kind: str, where: str = "") -> None:
    """Every key of `value` is a field of `kind`, all the way down."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_fields(item, kind, f"{where}[{i}]")
        return
    assert isinstance(value, dict), f"{where}: {kind} is an object"
    unknown = set(value) - FIELDS[kind]
    assert not unknown, f"{where}: {kind} has no field {sorted(unknown)}"
    for key, item in value.items():
        if kind == "PyTorchJobSpec" and key == "pytorchReplicaSpecs":
            assert set(item) <= {"Master", "Worker"}, f"{where}.{key}: replica types are Master and Worker"
            for replica, spec in item.items():
                check_fields(spec, "ReplicaSpec", f"{where}.{key}.{replica}")
        elif (kind, key) in TYPES:
            check_fields(item, TYPES[(kind, key)], f"{where}.{key}")


@pytest.fixture
def train_pinned(manifests_copy):
    """The lock with the train image pushed to a registry (the real lock has no digest for it)."""
    lock_file = manifests_copy / "images.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["images"]["train"].update(digest=TRAIN_DIGEST, digest_source="pushed to the cluster's registry (test)")
    lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    return manifests_copy


def _case(plan, case_id: str):
    return next(c for c in plan.cases if c.id == case_id)


OPTIONS = K8sOptions(pvc="kit-runs", namespace="bench", image_pull_secret="registry", token_secret="hf-token")


@pytest.mark.parametrize(
    "case_id, gpus_per_node, golden, kind",
    [
        ("profile.llama2-7b.base.g1", None, "paper-profile-g1.yaml", "Job"),
        ("pretrain.llama2-7b.z3.g8", None, "paper-z3-g8.yaml", "Job"),
        ("serve.llama2-7b.vllm.g8", None, "paper-serve-vllm-g8.yaml", "Job"),
        ("pretrain.llama2-7b.z3.g8", 4, "paper-z3-2x4-pytorchjob.yaml", "PyTorchJob"),
    ],
)
def test_paper_cases_as_golden_manifests(paper_plan, train_pinned, case_id, gpus_per_node, golden, kind):
    case = _case(paper_plan, case_id)
    options = OPTIONS.model_copy(update={"gpus_per_node": gpus_per_node})
    text = manifest_yaml(case, options)
    assert_golden(f"k8s/{golden}", text)
    written = yaml.safe_load(text)
    assert written["kind"] == kind
    check_fields(written, kind)


def test_a_case_across_nodes_is_a_master_and_workers_each_with_its_node_s_gpus(paper_plan, train_pinned):
    written = manifest(_case(paper_plan, "pretrain.llama2-7b.z3.g8"), OPTIONS.model_copy(update={"gpus_per_node": 2}))
    replicas = written["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"], written["spec"]["nprocPerNode"]) == (
        1,
        3,
        "2",
    )
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "torchrun --nnodes=4 --nproc-per-node=2 '--node-rank=$(RANK)'" in container["command"][2]


@pytest.mark.parametrize("node, kinds", [([], {"Job"}), (["--gpus-per-node", "4"], {"Job", "PyTorchJob"})])
def test_every_manifest_written_parses_and_names_its_image_by_the_lock_s_digest(
    train_pinned, tmp_path, monkeypatch, node, kinds
):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_never_written")
    done = CliRunner().invoke(
        cli,
        [
            "k8s",
            "manifests",
            "--profile",
            "paper",
            "--stage",
            "pretrain",
            "--stage",
            "serve",
            "--stage",
            "profile",
            "--pvc",
            "kit-runs",
            "--hf-token-secret",
            "hf-token",
            *node,
            "--out",
            str(tmp_path),
        ],
    )
    # The tgi, lightllm and megatron images have no digest in the lock: those cases are named, not written.
    assert done.exit_code == 1 and "has no registry digest in the lock" in done.output
    lock = images.load_lock()
    written = sorted(tmp_path.glob("*.yaml"))
    assert len(written) > 100
    written_kinds = set()
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert "hf_secret_value_never_written" not in text
        document = yaml.safe_load(text)
        written_kinds.add(document["kind"])
        check_fields(document, document["kind"])
        case_id = document["metadata"]["annotations"]["kit/case"]
        assert path.name == f"{case_id}.yaml" and (tmp_path / "cases" / case_id / "case.json").is_file()
        image = lock.images[document["metadata"]["annotations"]["kit/image"]]
        pods = [spec["template"] for spec in document["spec"].get("pytorchReplicaSpecs", {}).values()] or [
            document["spec"]["template"]
        ]
        for pod in pods:
            assert [c["image"] for c in pod["spec"]["containers"]] == [f"{image.reference}@{image.digest}"]
    assert written_kinds == kinds


def test_a_token_is_a_reference_to_a_secret_never_a_value(paper_plan, train_pinned, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_never_written")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_secret_value_never_written")
    case = _case(paper_plan, "pretrain.llama2-7b.z3.g8")
    text = manifest_yaml(case, OPTIONS)
    assert "hf_secret_value_never_written" not in text
    env = yaml.safe_load(text)["spec"]["template"]["spec"]["containers"][0]["env"]
    tokens = [item for item in env if item["name"] in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
    assert [item["valueFrom"]["secretKeyRef"]["name"] for item in tokens] == ["hf-token", "hf-token"]
    assert all("value" not in item for item in tokens)
    without = manifest_yaml(case, OPTIONS.model_copy(update={"token_secret": None}))
    assert "HF_TOKEN" not in without and "hf_secret_value_never_written" not in without


def test_an_image_without_a_registry_digest_has_no_manifest_and_says_what_to_do(paper_plan):
    with pytest.raises(NotWritable, match="push it to a registry"):
        manifest(_case(paper_plan, "pretrain.llama2-7b.z3.g8"), OPTIONS)


def test_a_max_batch_search_is_not_a_fixed_job(paper_plan, train_pinned):
    case = next(c for c in paper_plan.cases if c.stage == "maxbatch" and c.params.max_batch_search is not None)
    with pytest.raises(NotWritable, match="max-batch search"):
        manifest(case, OPTIONS)


def test_names_are_dns_labels_short_enough_for_a_pytorchjob_s_pods():
    assert object_name("pretrain.llama2-7b.z3+o+r.g8") == "kit-pretrain-llama2-7b-z3-o-r-g8"
    long = object_name("finetune.llama2-70b.qlora+z3+offload+recompute+flash.g8.b4.extra-long-suffix")
    assert len(long) <= 52 and long.replace("-", "").isalnum() and long.islower()
    assert long != object_name("finetune.llama2-70b.qlora+z3+offload+recompute+flash.g8.b4.extra-long-suffiy")


def test_smoke_cases_are_written_on_the_cpu_without_this_host_s_thread_count(smoke_plan, manifests_copy):
    lock_file = manifests_copy / "images.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["images"]["smoke"].update(digest=TRAIN_DIGEST, digest_source="pushed to the cluster's registry (test)")
    lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    case = _case(smoke_plan, "pretrain.tiny-llama.naive.g2")
    written = manifest(case, OPTIONS)
    container = written["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in container
    assert "OMP_NUM_THREADS" not in {item["name"] for item in container["env"]}
    assert "kit.workloads.launch --nproc 2" in container["command"][2]


def test_a_process_that_drives_all_its_gpus_is_not_split_over_nodes(paper_plan):
    serve = _case(paper_plan, "serve.llama2-7b.vllm.g8")
    assert manifest(serve, OPTIONS.model_copy(update={"gpus_per_node": 8}))["kind"] == "Job"
    for case in (serve, _case(paper_plan, "comm.all_reduce.g8")):
        with pytest.raises(NotWritable, match="drives all 8 GPUs, more than a node of 4"):
            manifest(case, OPTIONS.model_copy(update={"gpus_per_node": 4}))


def test_an_image_is_not_asked_to_run_on_a_device_it_does_not_support(smoke_plan):
    # The smoke profile serves with vLLM on the CPU: the lock's vLLM image is for CUDA only.
    with pytest.raises(NotWritable, match="runs on cuda, not cpu"):
        manifest(_case(smoke_plan, "serve.tiny-llama.vllm.g1"), OPTIONS)


def test_a_case_naming_an_engine_the_kit_does_not_know_is_named_not_written(manifests_copy, tmp_path):
    protocol = manifests_copy / "protocol.yaml"
    protocol.write_text(protocol.read_text().replace("params: {engine: vllm}", "params: {engine: vlm}", 1))
    done = CliRunner().invoke(
        cli, ["k8s", "manifests", "--profile", "paper", "--stage", "serve", "--pvc", "kit-runs", "--out", str(tmp_path)]
    )
    assert done.exit_code == 1 and "no engine 'vlm' (known: vllm, tgi, lightllm, sglang)" in done.output, done.output
    assert not list(tmp_path.glob("serve.*vllm*.yaml"))
