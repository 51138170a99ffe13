"""The docker executor's serve path against images that behave like the published engines.

Each stand-in (tests/engine_images) keeps its engine's ENTRYPOINT, USER, Python layout, port,
routes and wire format, and refuses any argument its engine does not document. A serve case per
engine runs through the real docker engine with `kit run --executor docker`, exactly as a user
with the published images would run it; the result must carry the engine's name and version, the
client's and the engine's token counts (equal), and the serving bound (or why there is none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from support.docker_engine import engine_stand_ins_or_skip, smoke_image_or_skip
from support.planted_tokens import PLANTED, files_holding_a_token

from kit.rundir.serving import RequestRecord, aggregate

pytestmark = pytest.mark.docker
KIT = [sys.executable, "-m", "kit.cli"]


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    smoke_image_or_skip()  # the kit's own CPU image makes TGI's and LightLLM's checkpoint
    return engine_stand_ins_or_skip(tmp_path_factory.mktemp("engine-images"))


def pin_stand_ins(manifests, stand_ins: dict[str, str]) -> None:
    """The lock names the stand-ins where it names the published images; the smoke profile serves
    with all three engines (bf16: TGI takes float16 or bfloat16 only)."""
    lock_file = manifests / "images.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    for name, reference in stand_ins.items():
        lock["images"][name].update(
            reference=reference,
            digest=None,
            devices=["cuda", "cpu"],
            note="a test stand-in built from tests/engine_images",
        )
    lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    protocol_file = manifests / "protocol.yaml"
    protocol = yaml.safe_load(protocol_file.read_text())
    serve = protocol["profiles"]["smoke"]["stages"]["serve"]
    serve["methods"] = ["vllm", "tgi", "lightllm"]
    serve["params"].update(dtype="bf16", prompts=24, timeout_s=300, ready_timeout_s=120)
    protocol_file.write_text(yaml.safe_dump(protocol, sort_keys=False))


def test_each_engine_image_serves_a_case_through_the_docker_executor(stand_ins, manifests_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))  # the checkpoint is made here, by the kit's image
    pin_stand_ins(manifests_copy, stand_ins)
    run = tmp_path / "run"
    env = {**os.environ, **PLANTED}  # handed on to each engine's container, written down nowhere
    done = subprocess.run(
        [*KIT, "run", "--profile", "smoke", "--stage", "serve", "--executor", "docker", "--out", str(run)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert files_holding_a_token(run, done.stdout, done.stderr) == []
    for engine in ("vllm", "tgi", "lightllm"):
        case_dir = run / "cases" / f"serve.tiny-llama.{engine}.g1"
        result = json.loads((case_dir / "result.json").read_text())
        assert result["status"] == "ok", f"{engine}: {result['reason']}"
        sample = result["samples"][0]
        details = sample["ranks"][0]["details"]
        launch = details["engine"]
        assert launch["name"] == engine and launch["version"] and launch["placement"] == "docker"
        assert launch["image"] == stand_ins[f"serve-{engine}"] and launch["port"]["host"].startswith("127.0.0.1:")
        assert launch["user"].startswith("root")  # the image's own USER: the kit sets none
        assert launch["stop"]["exit_code"] == 0  # it stopped on SIGTERM, as a server does
        assert (
            launch["confinement"]["CapDrop"] == ["ALL"] and "no-new-privileges" in launch["confinement"]["SecurityOpt"]
        )
        tokens = details["tokens"]
        assert tokens["equal"] and tokens["client_counted"] == tokens["server_counters"]["generated_tokens"] == 24 * 32
        assert details["bounds"]["unavailable"].startswith("no peak figures")
        rows = [
            RequestRecord.model_validate_json(line)
            for line in (case_dir / "runs/1/requests.jsonl").read_text().splitlines()
        ]
        assert len(rows) == 24 and all(r.ok and r.output_tokens == 32 for r in rows)
        assert aggregate(rows, details["aggregates"]["duration_s"]).model_dump() == details["aggregates"]
        if engine != "vllm":  # a checkpoint, made by the kit's own image into the host cache, mounted read-only
            assert (
                details["model"]["kind"] == "synthetic checkpoint" and "model.safetensors" in details["model"]["files"]
            )
            assert details["model"]["path"].startswith(str(tmp_path / "cache" / "checkpoints"))
        log = (case_dir / "runs/1/engine.log").read_text()
        assert "python on PATH: False" in log if engine == "vllm" else "python on PATH: True" in log
    assert "serve.tiny-llama.tgi.g1" in (run / "SHA256SUMS").read_text()
    # made once, by the first that needed it (the preflight's TGI request), in the kit's smoke image
    made = [log for log in (run / "preflight").rglob("log.txt") if "making the synthetic checkpoint" in log.read_text()]
    assert len(made) == 1 and "checkpoint: /kit/cache/checkpoints/" in made[0].read_text()


def test_an_argument_the_engine_does_not_document_fails_the_case_with_the_engines_words(
    stand_ins, manifests_copy, tmp_path, monkeypatch
):
    """The stand-ins refuse unknown flags as the engines do: a kit that added one would fail here."""
    pin_stand_ins(manifests_copy, stand_ins)
    protocol_file = manifests_copy / "protocol.yaml"
    protocol = yaml.safe_load(protocol_file.read_text())
    protocol["profiles"]["smoke"]["stages"]["serve"]["methods"] = ["tgi"]
    protocol["profiles"]["smoke"]["stages"]["serve"]["params"]["dtype"] = "fp32"  # TGI has no float32
    protocol_file.write_text(yaml.safe_dump(protocol, sort_keys=False))
    run = tmp_path / "run"
    done = subprocess.run(
        [*KIT, "run", "--profile", "smoke", "--stage", "serve", "--executor", "docker", "--out", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1
    result = json.loads((run / "cases/serve.tiny-llama.tgi.g1/result.json").read_text())
    assert (
        result["status"] == "error"
        and result["reason"].startswith("preflight:")
        and "before it was ready" in result["reason"]
    )
    engine_log = next((run / "preflight").glob("*/runs/1/engine.log")).read_text()  # the preflight found it in minutes
    assert "invalid choice: 'float32'" in engine_log
