"""No credential reaches a run directory or a report: a token in a case's env is refused where the
manifest is read, and tokens in the environment kit runs in are used, never written down."""

from __future__ import annotations

import gzip
import html
import json
import os
import shutil
import subprocess
import sys

import pytest
from support import REPO
from support.planted_tokens import PLANTED, files_holding_a_token

from kit.credentials import MASKED

KIT = [sys.executable, "-m", "kit.cli"]


@pytest.mark.parametrize(
    "name, value",
    [
        ("HF_TOKEN", "anything"),
        ("WANDB_API_KEY", "x"),
        ("NOTE", PLANTED["HF_TOKEN"]),
        ("DATABASE_URL", "postgres://u:pw@db/x"),
        ("NOTE", "AKIAIOSFODNN7EXAMPLE"),
        ("NOTE", "ghp_" + "a1" * 18),
        ("NOTE", "https://store.example/b/x?sv=2022-11-02&sig=plAnted%2Fsig"),  # an Azure SAS
        ("NCCL_TOPO_URL", "https://h.example/topo.xml?access_token=planted0token"),
        ("NOTE", "https://kit:pass/with/slashes@h.example/x"),
    ],
)
def test_a_credential_in_a_cases_env_is_refused_where_the_manifest_is_read(manifests_copy, name, value):
    path = manifests_copy / "protocol.yaml"
    text = path.read_text()
    old = 'env: {OMP_NUM_THREADS: "1"}'
    assert old in text
    path.write_text(text.replace(old, f'env: {{OMP_NUM_THREADS: "1", {name}: "{value}"}}'))
    done = subprocess.run([*KIT, "list", "--profile", "smoke"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{name} looks like a credential" in done.stderr and value not in done.stderr


@pytest.mark.parametrize(
    "entry, reason",
    [
        pytest.param('"A\\0B": "1"', "is not a variable name", id="NUL in a name"),
        pytest.param('"X" : "a\\0b"', "NUL byte", id="NUL in a value"),
        pytest.param('"' + "V" * 1000 + '": "1"', "is not a variable name", id="a name 1000 long"),
    ],
)
def test_a_variable_no_process_can_be_given_is_refused_where_the_manifest_is_read(manifests_copy, entry, reason):
    path = manifests_copy / "protocol.yaml"
    text = path.read_text()
    path.write_text(text.replace('env: {OMP_NUM_THREADS: "1"}', f'env: {{OMP_NUM_THREADS: "1", {entry}}}'))
    done = subprocess.run([*KIT, "list", "--profile", "smoke"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and reason in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.e2e
def test_a_redacted_run_with_tokens_in_its_environment_writes_neither_the_tokens_nor_what_names_the_host(tmp_path):
    """One run for both: tokens in the environment kit runs in are used, never written down (the
    redaction replaces names and paths, not tokens, so a token written anywhere would show), and
    under --redact no file names the host, its user or an identifying path."""
    import getpass
    import platform
    import re
    from pathlib import Path

    from kit.cache import cache_dir

    env = {**os.environ, **PLANTED}
    run = tmp_path / "run"
    cases = ["comm.all_reduce.g2", "profile.tiny-llama.base.g1", "serve.tiny-llama.vllm.g1"]
    done = subprocess.run(
        [
            *KIT,
            "run",
            "--profile",
            "smoke",
            *[a for c in cases for a in ("--case", c)],
            "--executor",
            "local",
            "--redact",
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = subprocess.run([*KIT, "report", str(run)], capture_output=True, text=True, env=env, timeout=900)
    assert report.returncode == 0, report.stderr[-3000:]
    assert files_holding_a_token(run, done.stdout, done.stderr, report.stdout, report.stderr) == []
    identifying = [
        str(run.resolve()),
        str(cache_dir().resolve()),
        str(Path.home()) + "/",
        str(REPO),
    ]
    words = [platform.node()] + ([getpass.getuser()] if getpass.getuser() != "root" else [])
    found = []
    for path in run.rglob("*"):
        if path.is_file() and path.suffix != ".pdf":  # the PDF's text is compressed; report.html holds the same
            raw = path.read_bytes()
            text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8", errors="replace")
            found += [(str(path.relative_to(run)), s) for s in identifying if s in text]
            found += [
                (str(path.relative_to(run)), w)
                for w in words
                if re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text)
            ]
    assert found == []
    info = json.loads((run / "run.json").read_text())
    assert info["redacted"] and info["host"]["hostname"].startswith("redacted-")
    before = json.loads((run / "fingerprint.json").read_text())["host"]["hostname"]
    assert (
        before
        == info["host"]["hostname"]
        == json.loads((run / "fingerprint-after.json").read_text())["host"]["hostname"]
    )
    check = subprocess.run([*KIT, "report", str(run), "--verify"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr[-2000:]


NCCL_PLANTED = {
    "NCCL_FUZZ_TOKEN": "hf_plantedInANcclName0123456789",
    "NCCL_DEBUG_FILE": "postgres://u:planted-pw@db/x",
    "NCCL_SOCKET_IFNAME": "AKIAPLANTEDEXAMPLE01",
    "NCCL_NET_PLUGIN_URL": "https://s3.example/p.so?X-Amz-Credential=x&X-Amz-Signature=planted0sig",
    "NCCL_TOPO_FILE": "https://kit:planted/pass@h.example/topo.xml",
    "NCCL_GRAPH_FILE": "https://h.example/g.xml?token=planted0token2",
}


def test_an_nccl_variable_that_looks_like_a_credential_is_masked_in_the_fingerprint(real_smoke_run):
    """As kit.host.fingerprint.collect records the variables of the environment the kit runs in."""
    from kit.host.fingerprint import Fingerprint

    fingerprint = json.loads((real_smoke_run / "fingerprint.json").read_text())
    recorded = Fingerprint.model_validate({**fingerprint, "nccl_environment": {**NCCL_PLANTED, "NCCL_DEBUG": "INFO"}})
    assert recorded.nccl_environment == {**dict.fromkeys(NCCL_PLANTED, MASKED), "NCCL_DEBUG": "INFO"}
    assert not [value for value in NCCL_PLANTED.values() if value in recorded.model_dump_json()]


def test_a_report_masks_what_an_earlier_kit_recorded_of_the_nccl_variables(real_smoke_run, tmp_path, kit_in_process):
    """A run an earlier kit made kept them as they were: the report shows them masked."""
    from kit.rundir.directory import RunDir

    run = tmp_path / "run"
    shutil.copytree(real_smoke_run, run)
    for name in ("fingerprint.json", "fingerprint-after.json"):
        fingerprint = json.loads((run / name).read_text())
        (run / name).write_text(json.dumps({**fingerprint, "nccl_environment": NCCL_PLANTED}))
    RunDir(run).write_sums()
    code, out, err = kit_in_process("report", run, "--format", "html,json", "--out", tmp_path / "report")
    assert code == 0, out + err
    written = "".join(path.read_text() for path in (tmp_path / "report").iterdir())
    assert html.escape(MASKED) in written and not [
        value for value in NCCL_PLANTED.values() if value in written + out + err
    ]


def test_an_nccl_value_that_is_not_utf8_is_written_as_its_escape(real_smoke_run):
    """os.environ holds such a byte as a lone surrogate, which no JSON file can: once, it ended
    the fingerprint's writing in a traceback."""
    from kit.host.fingerprint import Fingerprint

    fingerprint = json.loads((real_smoke_run / "fingerprint.json").read_text())
    recorded = Fingerprint.model_validate({**fingerprint, "nccl_environment": {"NCCL_DEBUG": "IN\udcffFO"}})
    assert json.loads(recorded.model_dump_json())["nccl_environment"] == {"NCCL_DEBUG": "IN\\xffFO"}
