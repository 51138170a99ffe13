"""Signed runs: who vouches for a run's evidence. `kit sign` writes, beside SHA256SUMS, a detached
SSH signature of it (SHA256SUMS.sig) and the run's provenance statement (kit.rundir.provenance) with a
signature of its own, both by one key and in the kit's namespace; a reviewer checks them against
the keys they trust (an allowed-signers file, as `ssh-keygen -Y verify` reads it), with the kit or
with ssh-keygen alone.

Signing and verifying both run OpenSSH's ssh-keygen (-Y sign, -Y find-principals, -Y verify,
-Y check-novalidate). Signing has to: a hardware key (sk-ssh-ed25519@openssh.com), a key an agent
holds and a passphrase are ssh-keygen's business. Verifying with it too makes the kit's verdict the
one a reviewer's own ssh-keygen gives, with every key type and the whole allowed-signers syntax
(principal patterns, cert-authority, namespaces=, valid-after/valid-before), which a parser of our
own would repeat. The kit reads only a signature's envelope (PROTOCOL.sshsig), to name the signer's
key also where the signature fails.

The files live in the run directory, so that a copied run keeps them; SHA256SUMS cannot cover
them (they sign it), a resume removes them (it writes a new SHA256SUMS), and a report names their
signer on page one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from kit.files.atomic import atomic_write_bytes
from kit.files.regular import RUN_FILE_LIMIT, UnusableJson, read_regular, sha256_file, within_bounds
from kit.rundir.directory import SIGNATURE_FILES, SUMS_FILE, RunDir
from kit.rundir.provenance import PROVENANCE_FILE, Statement, run_statement
from kit.rundir.schema import utc_now

# The signatures' namespace (ssh-keygen -n): a signature made for the kit's runs is never valid as
# a git commit's or a file's, nor theirs as the kit's. NAME@DOMAIN as ssh-keygen(1) advises for a
# namespace of one's own; the kit has no domain, and .invalid (RFC 2606) is one no one can register.
NAMESPACE = "kit-run@kit.invalid"
SUMS_SIGNATURE, _, PROVENANCE_SIGNATURE = SIGNATURE_FILES
SIGNED = {SUMS_SIGNATURE: SUMS_FILE, PROVENANCE_SIGNATURE: PROVENANCE_FILE}  # signature -> what it signs
ARMOR = ("-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----")
INSTALL_HINT = "install OpenSSH's client (Debian, Ubuntu: apt-get install openssh-client)"


class SigningFailed(RuntimeError):
    """A run that cannot be signed (unfinished, no ssh-keygen here) or ssh-keygen's refusal to
    sign it, in one line."""


class SignatureCheck(BaseModel):
    """A run's signature against the allowed signers given: `unsigned`; `verified` (by an allowed
    signer); `intact` (valid, its signer unchecked: no allowed signers given); or `failed`, with
    why in one line (an unsigned run fails where allowed signers are given, or deleting the
    signature would pass)."""

    state: Literal["unsigned", "verified", "intact", "failed"]
    summary: str  # one line: the signer's key as `ssh-keygen -l` names it ("ssh-ed25519 SHA256:…"), its principal, or why it fails

    @property
    def failed(self) -> bool:
        return self.state == "failed"


def ssh_keygen(arguments: list[str], stdin: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """OpenSSH's ssh-keygen, reading `stdin` (the data a signature is checked against); its
    absence is SigningFailed, said with how to install it."""
    if shutil.which("ssh-keygen") is None:
        raise SigningFailed(f"ssh-keygen not found, which signs and checks a run's signature: {INSTALL_HINT}")
    with open(stdin or os.devnull, "rb") as data:
        return subprocess.run(["ssh-keygen", *arguments], stdin=data, capture_output=True, text=True, cwd=cwd)


def _said(done: subprocess.CompletedProcess) -> str:
    """ssh-keygen's last line on stderr, its reason."""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _ssh_strings(blob: bytes, count: int) -> list[bytes]:
    """The first `count` SSH wire-format strings (a uint32 length, then the bytes) of `blob`."""
    found, at = [], 0
    for _ in range(count):
        if at + 4 > len(blob):
            raise ValueError("cut short")
        (length,) = struct.unpack(">I", blob[at : at + 4])
        if at + 4 + length > len(blob):
            raise ValueError("cut short")
        found.append(blob[at + 4 : at + 4 + length])
        at += 4 + length
    return found


def envelope(armored: bytes) -> tuple[str, str]:
    """(the signer's key as `type SHA256:fingerprint`, the namespace) of an armored SSH signature:
    "SSHSIG", version 1, then the public key and the namespace as SSH strings (PROTOCOL.sshsig).
    The fingerprint is ssh-keygen's: the unpadded base64 of the key blob's SHA-256."""
    lines = armored.decode("ascii", errors="replace").strip().splitlines()
    if len(lines) < 3 or (lines[0], lines[-1]) != ARMOR:
        raise ValueError("not an armored SSH signature")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except ValueError:
        raise ValueError("its armor holds no base64") from None
    if blob[:6] != b"SSHSIG" or blob[6:10] != struct.pack(">I", 1):
        raise ValueError("not an SSHSIG blob of version 1")
    key, namespace = _ssh_strings(blob[10:], 2)
    (key_type,) = _ssh_strings(key, 1)
    fingerprint = base64.b64encode(hashlib.sha256(key).digest()).decode().rstrip("=")
    return f"{key_type.decode(errors='replace')} SHA256:{fingerprint}", namespace.decode(errors="replace")


def sign_run(run: RunDir, key: Path) -> str:
    """Sign a finished run that matches its SHA256SUMS (else EvidenceError), held by the caller
    (RunDir.lock): its provenance statement is written, then SHA256SUMS and the statement are
    signed with `key` by one ssh-keygen (one passphrase prompt; a hardware key asks for a touch per
    signature), in a folder of its own, where no earlier signature makes it ask to overwrite.
    Returns the signer's key."""
    from kit.rundir.evidence import EvidenceError, verify

    info = run.read_info()
    if info.status != "finished":
        raise SigningFailed(
            f"{run.root} is not finished (run.json status: {info.status}): finish it with "
            f"`kit run --resume {run.root}`, then sign it"
        )
    problems = verify(run.root)
    if problems:
        raise EvidenceError(run.root, problems, "it is not signed")
    statement = run_statement(run, utc_now()).json_text().encode("utf-8")
    with tempfile.TemporaryDirectory(prefix="kit-sign-") as folder:
        staged = Path(folder)
        (staged / SUMS_FILE).write_bytes((run.root / SUMS_FILE).read_bytes())
        (staged / PROVENANCE_FILE).write_bytes(statement)
        done = ssh_keygen(
            ["-q", "-Y", "sign", "-f", str(key.absolute()), "-n", NAMESPACE, SUMS_FILE, PROVENANCE_FILE], cwd=staged
        )
        if done.returncode != 0:
            raise SigningFailed(f"ssh-keygen could not sign with {key}: {_said(done)}")
        signatures = {name: (staged / name).read_bytes() for name in SIGNED}
    atomic_write_bytes(run.root / PROVENANCE_FILE, statement)
    for name, signature in signatures.items():
        atomic_write_bytes(run.root / name, signature)
    return envelope(signatures[SUMS_SIGNATURE])[0]


def remove_signature(run: RunDir) -> list[str]:
    """The signature files a run holds, removed (they sign a SHA256SUMS about to be replaced)."""
    found = [name for name in SIGNATURE_FILES if (run.root / name).exists() or (run.root / name).is_symlink()]
    for name in found:
        (run.root / name).unlink()
    return found


def check_signature(run_dir: Path, allowed_signers: Path | None = None) -> SignatureCheck:
    """The run's signature files checked by ssh-keygen, against `allowed_signers` where given;
    the statement's subject held to SHA256SUMS."""
    root = Path(run_dir)
    present = [name for name in SIGNATURE_FILES if (root / name).is_file()]
    if not present:
        if allowed_signers is None:
            return SignatureCheck(state="unsigned", summary=f"unsigned (no {SUMS_SIGNATURE})")
        return _failed(f"unsigned (no {SUMS_SIGNATURE}), though allowed signers ({allowed_signers.name}) were given")
    missing = [name for name in (SUMS_FILE, *SIGNATURE_FILES) if not (root / name).is_file()]
    if missing:
        return _failed(f"{missing[0]} missing beside {present[0]}")
    keys = {}
    for signature in SIGNED:
        try:
            keys[signature], namespace = envelope(read_regular(root / signature, RUN_FILE_LIMIT))
        except (OSError, ValueError) as exc:
            return _failed(f"{signature} is not an SSH signature ({exc})")
        if namespace != NAMESPACE:
            return _failed(f"{signature} is signed in the namespace {namespace!r}, not the kit's {NAMESPACE!r}")
    signer = keys[SUMS_SIGNATURE]
    if keys[PROVENANCE_SIGNATURE] != signer:
        return _failed(
            f"{PROVENANCE_SIGNATURE} is by another key ({keys[PROVENANCE_SIGNATURE]}) than {SUMS_SIGNATURE} ({signer})"
        )
    try:
        principal = None
        if allowed_signers is not None:
            found = ssh_keygen(["-Y", "find-principals", "-s", str(root / SUMS_SIGNATURE), "-f", str(allowed_signers)])
            if found.returncode != 0:
                return _failed(f"signer {signer} is not in the allowed signers ({allowed_signers.name})")
            principal = found.stdout.split()[0].split(",")[0]
        for signature, data in SIGNED.items():
            if allowed_signers is None or principal is None:  # both or neither: the principal is found above
                done = ssh_keygen(
                    ["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(root / signature)], stdin=root / data
                )
            else:
                done = ssh_keygen(
                    [
                        "-Y",
                        "verify",
                        "-f",
                        str(allowed_signers),
                        "-I",
                        principal,
                        "-n",
                        NAMESPACE,
                        "-s",
                        str(root / signature),
                    ],
                    stdin=root / data,
                )
            if done.returncode != 0:
                return _failed(f"{data} is not what {signature} signed by {signer} (ssh-keygen: {_said(done)})")
    except SigningFailed as exc:  # no ssh-keygen: the signature cannot be checked here
        return _failed(f"signed by {signer}, not checked: {exc}")
    try:
        statement = Statement.model_validate_json(within_bounds(read_regular(root / PROVENANCE_FILE, RUN_FILE_LIMIT)))
    except ValidationError as exc:
        return _failed(f"{PROVENANCE_FILE} is not the kit's provenance statement ({exc.errors()[0]['msg']})")
    except UnusableJson as exc:
        return _failed(f"{PROVENANCE_FILE} is not the kit's provenance statement ({exc})")
    except OSError as exc:
        return _failed(f"{PROVENANCE_FILE} cannot be read ({exc.strerror or exc})")
    named = next((subject.digest.get("sha256") for subject in statement.subject if subject.name == SUMS_FILE), None)
    actual = sha256_file(root / SUMS_FILE)
    if named != actual:
        return _failed(f"{PROVENANCE_FILE} names {SUMS_FILE} {named or 'not at all'}, not this run's {actual}")
    if allowed_signers is None or principal is None:
        return SignatureCheck(
            state="intact", summary=f"signed by {signer}; signer not checked (no allowed signers given)"
        )
    return SignatureCheck(
        state="verified",
        summary=f"verified: signed by {principal} ({signer}), an allowed signer of {allowed_signers.name}",
    )


def _failed(reason: str) -> SignatureCheck:
    return SignatureCheck(state="failed", summary=f"signature fails: {reason}")


FILE_NAMESPACE = (
    "kit-baseline@kit.invalid"  # a baseline's signature is never valid as a run's, nor a run's as a baseline's
)


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def sign_file(path: Path, key: Path) -> str:
    """A detached SSH signature of one file the kit wrote (a baseline), beside it as FILE.sig;
    returns the signer's key."""
    with tempfile.TemporaryDirectory(prefix="kit-sign-") as folder:
        staged = Path(folder) / path.name
        staged.write_bytes(path.read_bytes())
        done = ssh_keygen(
            ["-q", "-Y", "sign", "-f", str(key.absolute()), "-n", FILE_NAMESPACE, staged.name], cwd=staged.parent
        )
        if done.returncode != 0:
            raise SigningFailed(f"ssh-keygen could not sign {path} with {key}: {_said(done)}")
        signature = signature_path(staged).read_bytes()
    atomic_write_bytes(signature_path(path), signature)
    return envelope(signature)[0]


def check_file_signature(path: Path, allowed_signers: Path | None = None) -> SignatureCheck:
    """FILE.sig checked by ssh-keygen against FILE, and its signer against `allowed_signers` where given."""
    signed = signature_path(path)
    if not signed.is_file():
        if allowed_signers is None:
            return SignatureCheck(state="unsigned", summary=f"unsigned (no {signed.name})")
        return _failed(f"unsigned (no {signed.name}), though allowed signers ({allowed_signers.name}) were given")
    try:
        signer, namespace = envelope(read_regular(signed, RUN_FILE_LIMIT))
    except (OSError, ValueError) as exc:
        return _failed(f"{signed.name} is not an SSH signature ({exc})")
    if namespace != FILE_NAMESPACE:
        return _failed(f"{signed.name} is signed in the namespace {namespace!r}, not {FILE_NAMESPACE!r}")
    try:
        if allowed_signers is None:
            done = ssh_keygen(["-Y", "check-novalidate", "-n", FILE_NAMESPACE, "-s", str(signed)], stdin=path)
        else:
            found = ssh_keygen(["-Y", "find-principals", "-s", str(signed), "-f", str(allowed_signers)])
            if found.returncode != 0:
                return _failed(f"signer {signer} is not in the allowed signers ({allowed_signers.name})")
            principal = found.stdout.split()[0].split(",")[0]
            arguments = ["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", FILE_NAMESPACE]
            done = ssh_keygen([*arguments, "-s", str(signed)], stdin=path)
    except SigningFailed as exc:
        return _failed(f"signed by {signer}, not checked: {exc}")
    if done.returncode != 0:
        return _failed(f"{path.name} is not what {signed.name} signed by {signer} (ssh-keygen: {_said(done)})")
    if allowed_signers is None:
        return SignatureCheck(
            state="intact", summary=f"signed by {signer}; signer not checked (no allowed signers given)"
        )
    return SignatureCheck(
        state="verified",
        summary=f"verified: signed by {principal} ({signer}), an allowed signer of {allowed_signers.name}",
    )
