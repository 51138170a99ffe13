"""manifests/images.lock.yaml and `kit images`: what the lock accepts, and lock vs local images.

The verify tests use real images in the local engine: the smoke image, and images derived from
it that differ in one known way, each checked against a lock that names them.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import yaml
from support.docker_engine import engine_or_skip, smoke_image_or_skip

from kit import images
from kit.images import (
    ImagesLock,
    LockedImage,
    constraint_pins,
    context_sha256,
    load_lock,
    version_matches,
)
from kit.manifest import ManifestError
from kit.plan.protocol import build_plan, load_protocol

DIGEST = "sha256:" + "ab" * 32
KIT = [sys.executable, "-m", "kit.cli"]


def write_lock(directory, images_: dict) -> None:
    (directory / "images.lock.yaml").write_text(
        yaml.safe_dump({"schema_version": 1, "images": images_, "environments": {}})
    )


# --- the lock itself --------------------------------------------------------------------------


def test_every_image_a_protocol_case_names_is_in_the_lock():
    protocol, lock = load_protocol(), load_lock()
    for profile in protocol.profiles:
        for case in build_plan(protocol, profile).cases:
            assert case.image in lock.images, f"{case.id} runs in {case.image!r}, which the lock lacks"


def test_the_smoke_profile_runs_the_kit_in_the_smoke_image_and_serves_with_vllm(smoke_plan):
    """Serving runs the engine as published: vLLM's image (GPU only), else an environment of its
    pinned wheel: the CPU build, or on a GPU host without docker the CUDA wheel of the image's release."""
    assert {case.image for case in smoke_plan.cases if case.stage != "serve"} == {"smoke"}
    assert {case.image for case in smoke_plan.cases if case.stage == "serve"} == {"serve-vllm"}
    lock = load_lock()
    assert lock.images["serve-vllm"].devices == ("cuda",)
    vllm = {(env.engine, env.device) for env in lock.environments.values() if env.engine == "vllm"}
    assert vllm == {("vllm", "cpu"), ("vllm", "cuda")}
    assert lock.environments["vllm-cuda"].requirement == f"vllm=={lock.images['serve-vllm'].versions['vllm']}"


def test_the_lock_hashes_match_the_build_contexts_in_the_tree():
    for name, image in load_lock().images.items():
        if image.build:
            assert context_sha256(image.build) == image.context_sha256, (
                f"containers/{name} changed: set its context_sha256 to {context_sha256(image.build)} in the lock"
            )


FRAMEWORKS = ("torch", "transformers", "peft", "accelerate", "deepspeed", "bitsandbytes")


def test_the_smoke_images_framework_versions_are_those_of_constraints_cpu():
    smoke = load_lock().images["smoke"]
    pins = constraint_pins(images.repo_root() / "constraints-cpu.txt")
    assert set(FRAMEWORKS) <= set(smoke.versions) & set(pins)
    for name in set(smoke.versions) & set(pins):  # the lock adds the local label: torch 2.13.0+cpu
        assert smoke.versions[name].split("+")[0] == pins[name], name


def test_the_train_image_has_the_same_framework_versions_as_the_smoke_image():
    lock = load_lock()
    train, smoke = lock.images["train"].versions, lock.images["smoke"].versions
    assert {name: train[name].split("+")[0] for name in FRAMEWORKS} == {
        name: smoke[name].split("+")[0] for name in FRAMEWORKS
    }


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"reference": "a/b:1", "digest": None}, "needs a note"),
        ({"reference": "a/b:1", "digest": "sha256:123", "digest_source": "x"}, "not sha256"),
        ({"reference": "a/b:1", "digest": DIGEST}, "digest_source"),
        ({"reference": "a/b:latest", "digest": DIGEST, "digest_source": "x"}, "latest"),
        ({"reference": f"a/b:1@{DIGEST}", "digest": None, "note": "n"}, "must be repo:tag"),
        (
            {
                "reference": "a/b:1",
                "digest": None,
                "note": "n",
                "context_sha256": "0",
                "build": {"context": "c", "base": "python:3.11", "base_source": "x"},
            },
            "not pinned",
        ),
    ],
    ids=[
        "null digest without note",
        "malformed digest",
        "digest without source",
        "latest tag",
        "digest inside the reference",
        "unpinned base",
    ],
)
def test_the_lock_refuses(entry, problem, manifests_copy):
    write_lock(manifests_copy, {"img": entry})
    with pytest.raises(ManifestError, match=problem):
        load_lock()


def test_an_image_without_a_digest_keeps_its_note():
    image = LockedImage(reference="ghcr.io/x/y:1", digest=None, note="not published yet")
    assert image.pinned_reference == "ghcr.io/x/y:1"
    assert LockedImage(reference="x/y:1", digest=DIGEST, digest_source="s").pinned_reference == f"x/y:1@{DIGEST}"


@pytest.mark.parametrize(
    "locked, local, same",
    [
        ("3.11", "3.11.2", True),
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.13.0", "2.13.0+cpu", True),
        ("2.13.0+cu130", "2.13.0+cpu", False),
        ("3.1", "3.11.2", False),
        ("0.21.2", None, False),
    ],
)
def test_versions_match_exactly_or_by_a_whole_component_or_local_label_prefix(locked, local, same):
    assert version_matches(locked, local) is same


def test_list_shows_pinned_references_and_unpinned_ones():
    done = subprocess.run(
        [*KIT, "images", "list"], capture_output=True, text=True, env={"COLUMNS": "250", **__import__("os").environ}
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert "vllm/vllm-openai:v0.30.0@sha256:8a69ffad" in out and "(unpinned)" in out


# --- lock vs real local images ------------------------------------------------------------------


@pytest.fixture(scope="module")
def derived_images():
    """Images derived from the smoke image: one missing a framework, one merely re-tagged."""
    client, smoke = smoke_image_or_skip()
    dockerfile = f"FROM {smoke.id}\nRUN rm -rf /opt/kit/lib/python3.11/site-packages/peft-*.dist-info\n"
    changed, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="kit-test/changed-smoke:1", rm=True)
    smoke.tag("kit-test/retagged", "1")
    yield {"smoke": smoke, "changed": changed}
    for reference in ("kit-test/changed-smoke:1", "kit-test/retagged:1"):
        try:
            client.images.remove(reference, noprune=False)
        except Exception:
            pass


def lock_naming(manifests_copy, **overrides) -> ImagesLock:
    """The real lock, with the smoke entry changed as given; written where KIT_MANIFESTS points."""
    data = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    data["images"]["smoke"].update(overrides)
    write_lock(manifests_copy, data["images"])
    return load_lock()


@pytest.mark.docker
def test_verify_of_the_smoke_image_names_each_difference_and_nothing_else():
    smoke_image_or_skip()
    state = images.verify(["smoke"])[0]
    fields = {d.field for d in state.differences}
    base = next((d for d in state.differences if d.field == "base"), None)
    if base is not None:  # CI builds on a debootstrap base instead of the pinned python image
        assert base.lock == load_lock().images["smoke"].build.base and base.local != base.lock
    assert fields <= {"base"}, state.differences  # the versions inside are the locked ones
    assert state.status == ("differs" if fields else "ok")


@pytest.mark.docker
def test_verify_reports_a_changed_local_image(derived_images, manifests_copy):
    lock = lock_naming(manifests_copy, reference="kit-test/changed-smoke:1")
    state = images.verify(["smoke"], lock=lock)[0]
    peft = [d for d in state.differences if d.field == "versions.peft"]
    assert state.status == "differs" and peft and peft[0].lock == "0.21.2" and peft[0].local is None


@pytest.mark.docker
def test_verify_cli_prints_the_difference_and_exits_1(derived_images, manifests_copy):
    lock_naming(manifests_copy, reference="kit-test/changed-smoke:1")
    done = subprocess.run(
        [*KIT, "images", "verify", "smoke"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "250", **__import__("os").environ},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "differs" in done.stdout and "versions.peft: 0.21.2 -> None" in done.stdout


@pytest.mark.docker
def test_verify_of_a_pulled_image_compares_the_registry_digest(derived_images, manifests_copy):
    write_lock(
        manifests_copy,
        {
            "pinned": {"reference": "kit-test/retagged:1", "digest": DIGEST, "digest_source": "test"},
            "unpinned": {"reference": "kit-test/retagged:1", "digest": None, "note": "no digest found"},
            "absent": {"reference": "kit-test/absent:1", "digest": DIGEST, "digest_source": "test"},
        },
    )
    states = {state.name: state for state in images.verify(probe=False)}
    assert states["pinned"].status == "differs"
    assert states["pinned"].differences[0].field == "digest" and states["pinned"].differences[0].lock == DIGEST
    assert states["unpinned"].status == "unpinned" and "no digest found" in " ".join(states["unpinned"].notes)
    assert states["absent"].status == "missing"


@pytest.mark.docker
def test_pull_from_an_unreachable_registry_fails_with_a_clear_message(manifests_copy):
    engine_or_skip()
    write_lock(
        manifests_copy, {"far": {"reference": "registry.invalid/kit/none:1", "digest": DIGEST, "digest_source": "test"}}
    )
    done = subprocess.run([*KIT, "images", "pull", "far"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert f"cannot pull registry.invalid/kit/none@{DIGEST}" in done.stderr and "docker load" in done.stderr


@pytest.mark.docker
def test_the_cuda_of_a_local_image_is_read_from_its_configuration_or_said_unknown():
    smoke_image_or_skip()
    smoke, missing = images.images_cuda(["smoke", "comm"])
    assert smoke.reference == images.load_lock().images["smoke"].reference
    assert smoke.cuda_version is None and "neither CUDA_VERSION" in smoke.source  # a CPU image
    if images.local_image(missing.reference) is None:
        assert missing.cuda_version is None and missing.source == "not present locally"
