"""Signed runs (kit/rundir/signing.py, kit/rundir/provenance.py): a copy of the session's real smoke run signed
with throwaway ed25519 keys by the real ssh-keygen, checked by the kit and by ssh-keygen alone;
each way of breaking it fails verification in one line, and page one, the A/B comparison and the
fleet report name the signer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from support import REPO

from kit.report.fleet import Node, fleet_report
from kit.report.load import load_run
from kit.report.page_one import host_facts
from kit.report.sections.ab import comparison_section
from kit.rundir.directory import SIGNATURE_FILES, RunDir
from kit.rundir.evidence import verify
from kit.rundir.provenance import PREDICATE_TYPE, PROVENANCE_FILE
from kit.rundir.signing import NAMESPACE, check_signature, envelope, sign_run

SUMS_SIGNATURE, _, PROVENANCE_SIGNATURE = SIGNATURE_FILES

# The in-toto Statement v1 layout, written from its specification:
# https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md (the Statement),
# .../spec/v1/resource_descriptor.md (a subject: one of uri, digest, content at least; the Statement
# requires digest), .../spec/v1/digest_set.md (algorithm -> lowercase hex), and
# .../spec/v1/field_types.md (a TypeURI: an RFC 3986 URI, scheme in lowercase).
TYPE_URI = {"type": "string", "pattern": r"^[a-z][a-z0-9+.-]*:[^\s]+$"}
IN_TOTO_STATEMENT_V1 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["_type", "subject", "predicateType"],
    "properties": {
        "_type": {"const": "https://in-toto.io/Statement/v1"},
        "subject": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["digest"],
                "properties": {
                    "name": {"type": "string"},
                    "uri": TYPE_URI,
                    "digest": {
                        "type": "object",
                        "minProperties": 1,
                        "additionalProperties": {"type": "string"},
                        "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                    },
                    "annotations": {"type": "object"},
                },
            },
        },
        "predicateType": TYPE_URI,
        "predicate": {"type": "object"},
    },
}


def kit(*args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"}
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=environment, timeout=300
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    """Throwaway ed25519 keys: alice's, in the allowed signers; mallory's, not."""
    if shutil.which("ssh-keygen") is None:
        pytest.fail("needs ssh-keygen (Debian's openssh-client; .ci/run installs it)")
    folder = tmp_path_factory.mktemp("keys")
    for name in ("alice", "mallory"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)], check=True
        )
    public = (folder / "alice.pub").read_text().split()
    (folder / "allowed_signers").write_text(f"alice@example.com {public[0]} {public[1]}\n")
    return folder


@pytest.fixture(scope="module")
def signed_run(real_smoke_run, keys, tmp_path_factory) -> Path:
    """The real smoke run, copied and signed by alice with `kit sign`; left as it is."""
    run = Path(shutil.copytree(real_smoke_run, tmp_path_factory.mktemp("signed") / "run", symlinks=True))
    done = kit("sign", str(run), "--key", str(keys / "alice"))
    assert done.returncode == 0 and "signed by ssh-ed25519 SHA256:" in done.stdout, done.stderr
    return run


@pytest.fixture
def signed(signed_run, tmp_path) -> Path:
    """A private copy of the signed run, for a test that changes it."""
    return Path(shutil.copytree(signed_run, tmp_path / "run", symlinks=True))


def test_signing_leaves_the_evidence_as_it_was_and_its_files_outside_it(real_smoke_run, signed_run):
    assert (signed_run / "SHA256SUMS").read_bytes() == (real_smoke_run / "SHA256SUMS").read_bytes()
    assert verify(signed_run) == []
    listed = (signed_run / "SHA256SUMS").read_text()
    assert all((signed_run / name).is_file() and f"  {name}\n" not in listed for name in SIGNATURE_FILES)


def test_a_signed_run_verifies_with_the_kit_and_with_ssh_keygen_alone(signed_run, keys):
    done = kit("report", str(signed_run), "--verify", "--allowed-signers", str(keys / "allowed_signers"))
    assert done.returncode == 0, done.stderr
    assert "every file matches SHA256SUMS" in done.stdout and "verified: signed by alice@example.com" in done.stdout
    # The README's commands, as a reviewer without the kit runs them in the run directory.
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Signed runs") : readme.index("## Fleet acceptance")]
    commands = (
        section.split("```sh\n")[2].split("```")[0].replace("-f allowed_signers", f"-f {keys / 'allowed_signers'}")
    )
    done = subprocess.run(["bash", "-e", "-c", commands], cwd=signed_run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[0] == "alice@example.com" and said[1:3] == [said[1]] * 2
    assert said[1].startswith(f'Good "{NAMESPACE}" signature for alice@example.com with ED25519 key SHA256:')
    subject = json.loads((signed_run / PROVENANCE_FILE).read_text())["subject"][0]
    assert said[3] == f"{subject['digest']['sha256']}  SHA256SUMS"
    # The key the kit names is the one ssh-keygen -l names.
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(keys / "alice.pub")], capture_output=True, text=True
    ).stdout.split()[1]
    assert envelope((signed_run / SUMS_SIGNATURE).read_bytes()) == (f"ssh-ed25519 {listed}", NAMESPACE)


def test_the_provenance_statement_is_an_in_toto_statement_naming_the_kit_images_host_and_command(signed_run):
    statement = json.loads((signed_run / PROVENANCE_FILE).read_text())
    jsonschema.validate(statement, IN_TOTO_STATEMENT_V1)
    digest = hashlib.sha256((signed_run / "SHA256SUMS").read_bytes()).hexdigest()
    assert statement["subject"] == [{"name": "SHA256SUMS", "digest": {"sha256": digest}}]
    assert statement["predicateType"] == PREDICATE_TYPE
    info, predicate = RunDir(signed_run).read_info(), statement["predicate"]
    assert predicate["kit"] == {
        "version": info.kit.version,
        "gitCommit": info.kit.git_commit,
        "dirty": info.kit.dirty,
        "sourceSha256": info.kit.source_sha256,
        "measuringCodeSha256": info.kit.workload_sources_sha256,
        "manifestsSha256": info.kit.manifests_sha256,
    }
    sums = dict(reversed(line.split("  ", 1)) for line in (signed_run / "SHA256SUMS").read_text().splitlines())
    assert predicate["hostFingerprints"][0] == {
        "name": "fingerprint.json",
        "digest": {"sha256": sums["fingerprint.json"]},
    }
    images = info.images
    assert [image["name"] for image in predicate["images"]] == sorted(images)  # none where the cases ran in this Python
    assert predicate["commandLine"] == info.argv and predicate["run"]["runId"] == info.run_id
    assert predicate["signedOn"].endswith("Z") and predicate["run"]["startedOn"].endswith("Z")


def change_a_result(run: Path, keys: Path | None = None) -> None:
    result = next((run / "cases").glob("*/result.json"))
    result.write_text(result.read_text().replace('"mean": ', '"mean": 1', 1))


def change_a_result_and_hash_it_again(run: Path, keys: Path) -> None:
    change_a_result(run)
    RunDir(run).write_sums()


def swap_the_signatures(run: Path, keys: Path) -> None:
    sums, provenance = (run / SUMS_SIGNATURE).read_bytes(), (run / PROVENANCE_SIGNATURE).read_bytes()
    (run / SUMS_SIGNATURE).write_bytes(provenance)
    (run / PROVENANCE_SIGNATURE).write_bytes(sums)


def sign_by_mallory(run: Path, keys: Path) -> None:
    sign_run(RunDir(run), keys / "mallory")


def remove_the_signature(run: Path, keys: Path) -> None:
    for name in SIGNATURE_FILES:
        (run / name).unlink()


BREAKING = {
    "a changed result": (change_a_result, "changed: cases/"),  # the signature holds: SHA256SUMS is what was signed
    "a changed SHA256SUMS": (
        change_a_result_and_hash_it_again,
        "signature fails: SHA256SUMS is not what SHA256SUMS.sig signed",
    ),
    "a swapped signature": (swap_the_signatures, "signature fails: SHA256SUMS is not what SHA256SUMS.sig signed"),
    "a key outside the allowed signers": (sign_by_mallory, "signature fails: signer ssh-ed25519 SHA256:"),
    "no signature": (remove_the_signature, "signature fails: unsigned (no SHA256SUMS.sig), though allowed signers"),
    "no SHA256SUMS": (
        lambda run, keys: (run / "SHA256SUMS").unlink(),
        "signature fails: SHA256SUMS missing beside SHA256SUMS.sig",
    ),
}


@pytest.mark.parametrize("breaking", sorted(BREAKING))
def test_each_way_of_breaking_a_signed_run_fails_verification_in_one_line(signed, keys, breaking):
    """What `kit report --verify --allowed-signers` prints, a line each (the CLI's exit 1 is held
    by the tests of a report whose signature fails)."""
    change, reason = BREAKING[breaking]
    change(signed, keys)
    said = [*verify(signed), check_signature(signed, keys / "allowed_signers").summary]
    failing = [line for line in said if line.startswith(reason)]
    assert len(failing) == 1 and "\n" not in failing[0], said


def test_signing_refuses_bad_usage_with_2_and_a_run_that_differs_from_its_evidence_with_1(signed, keys, tmp_path):
    (tmp_path / "nothing").mkdir()
    (tmp_path / "not-a-key").write_text("not a key\n")
    for args, words in [
        (["sign", str(tmp_path / "nothing"), "--key", str(keys / "alice")], "is not a run directory"),
        (["sign", str(signed), "--key", str(tmp_path / "missing")], "does not exist"),
        (["sign", str(signed), "--key", str(tmp_path / "not-a-key")], "ssh-keygen could not sign with"),
    ]:
        done = kit(*args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    change_a_result(signed)
    done = kit("sign", str(signed), "--key", str(keys / "alice"))
    assert (
        done.returncode == 1 and "does not match its evidence, so it is not signed: changed: cases/" in done.stderr
    ), done.stderr


def test_a_resume_removes_the_signature_it_outdates_and_resume_with_sign_signs_again(signed, keys):
    """A finished run's resume changes nothing, its signature included; one that seals the evidence
    anew (here accepting a change) outdates it."""
    done = kit("run", "--resume", str(signed))
    assert done.returncode == 0 and "nothing to resume" in done.stdout, done.stderr
    assert check_signature(signed, keys / "allowed_signers").state == "verified"
    log = next(signed.glob("cases/*/log.txt"))
    log.write_text(log.read_text() + "a line added after the run\n")
    done = kit("run", "--resume", str(signed), "--accept-changes")
    assert done.returncode == 0, done.stderr
    assert not any((signed / name).exists() for name in SIGNATURE_FILES) and verify(signed) == []
    assert f"removed {', '.join(SIGNATURE_FILES)}" in done.stdout + done.stderr
    done = kit("run", "--resume", str(signed), "--sign", str(keys / "alice"))
    assert done.returncode == 0, done.stderr
    assert check_signature(signed, keys / "allowed_signers").state == "verified"


@pytest.fixture(scope="module")
def by_alice_and_mallory(signed_run, keys, tmp_path_factory):
    """The signed run and a copy signed by mallory, each read as a report reads it, against alice alone."""
    by_mallory = Path(shutil.copytree(signed_run, tmp_path_factory.mktemp("mallory") / "run", symlinks=True))
    sign_by_mallory(by_mallory, keys)
    return [load_run(run, False, keys / "allowed_signers") for run in (signed_run, by_mallory)]


def fact(run, label: str):
    return next(fact for fact in host_facts(run) if fact.label == label)


def test_page_one_names_the_signer_and_whether_it_verified(by_alice_and_mallory, real_smoke_run):
    alice, mallory = by_alice_and_mallory
    verified, outside = fact(alice, "Signature"), fact(mallory, "Signature")
    assert verified.tone == "good" and verified.value.startswith(
        "verified: signed by alice@example.com (ssh-ed25519 SHA256:"
    )
    assert outside.tone == "bad" and outside.value.startswith("signature fails: signer ssh-ed25519 SHA256:")
    assert outside.value.endswith("is not in the allowed signers (allowed_signers)")
    unsigned = fact(alice.model_copy(update={"signature": check_signature(real_smoke_run)}), "Signature")
    assert (unsigned.value, unsigned.tone) == ("unsigned (no SHA256SUMS.sig)", "muted")


def test_the_ab_comparison_and_the_fleet_flag_a_signer_outside_the_allowed_signers(by_alice_and_mallory):
    alice, mallory = by_alice_and_mallory
    ab = comparison_section(alice, mallory).section
    signers = next(table for table in ab.tables if table.caption == "Who signed each run")
    assert [row.cells[1].tone for row in signers.rows] == ["good", "bad"]
    report = fleet_report([Node("node-a", alice), Node("node-b", mallory)])
    flagged = next(fact for fact in report.page_one.host if fact.label == "Flagged")
    assert flagged.tone == "bad" and flagged.value.startswith("node-b: signature fails: signer ssh-ed25519")
    assert "node-a" not in flagged.value
    signatures = next(fact for fact in report.page_one.host if fact.label == "Signatures")
    assert signatures.tone == "bad" and "node-a: verified: signed by alice@example.com" in signatures.value


def test_a_report_whose_signature_fails_says_so_in_red_on_page_one_and_exits_1(by_alice_and_mallory, keys, tmp_path):
    mallory = by_alice_and_mallory[1].path
    done = kit("report", str(mallory), "--verify", "--allowed-signers", str(keys / "allowed_signers"))
    assert done.returncode == 1 and "every file matches SHA256SUMS" in done.stdout, done.stderr
    assert f"{mallory}: signature fails: signer ssh-ed25519 SHA256:" in done.stdout
    done = kit(
        "report",
        str(mallory),
        "--allowed-signers",
        str(keys / "allowed_signers"),
        "--format",
        "html",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 1 and "signature fails: signer ssh-ed25519" in done.stdout, done.stderr
    html = (tmp_path / "report.html").read_text()
    page_one = html[html.index('<section class="page-one">') : html.index('<section class="cover">')]
    assert '<th>Signature</th><td class="tone-bad">signature fails: signer ssh-ed25519 SHA256:' in page_one
