"""The provenance statement of a run: an in-toto Statement (https://github.com/in-toto/attestation/
blob/main/spec/v1/statement.md) whose subject is the run's SHA256SUMS and whose predicate names
what made the run: the kit (version, commit, source digest, uncommitted changes), each image by
digest, the host's fingerprints by digest, the command line and the times. It is signed beside
SHA256SUMS (kit.rundir.signing), so the signer vouches for the kit, images and host it names, not only for
the files.

The predicate is the kit's own (PREDICATE_TYPE): SLSA's build provenance would fit its fields, but
says that a build platform of some trust level produced the subject, which no benchmark run is.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kit.files.regular import sha256_file
from kit.rundir.directory import SIGNATURE_FILES, SUMS_FILE, RunDir
from kit.rundir.evidence import read_sums

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
# A type URI need not resolve (in-toto's field types). The kit has no domain of its own, and .invalid
# (RFC 2606) is one no one can register, so no predicate type at a registered domain collides with it.
PREDICATE_TYPE: Final = "https://kit.invalid/run-provenance/v1"
PROVENANCE_FILE = SIGNATURE_FILES[1]


class InTotoModel(BaseModel):
    """Fields in lowerCamelCase, as in-toto's specification writes them; a reader ignores the
    fields it does not know, as its parsing rules ask."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ResourceDescriptor(InTotoModel):
    """An artifact by name and digest (in-toto's ResourceDescriptor, the two fields used here)."""

    name: str
    digest: dict[str, str]


class KitProvenance(InTotoModel):
    """The kit that made the run, as run.json records it (kit.host.fingerprint.KitInfo)."""

    version: str
    git_commit: str | None
    dirty: bool | None  # the checkout had uncommitted changes; None where git could not tell
    source_sha256: str | None
    measuring_code_sha256: str
    manifests_sha256: dict[str, str]


class RunProvenance(InTotoModel):
    run_id: str
    profile: str
    executor: str
    status: str
    started_on: str
    finished_on: str | None
    resumed_on: list[str]


class RunPredicate(InTotoModel):
    """What made the run; every digest is the one SHA256SUMS lists (or run.json, for the images)."""

    kit: KitProvenance
    images: list[ResourceDescriptor]  # each image a case ran in; none where the cases ran in the host's Python
    host_fingerprints: list[ResourceDescriptor]  # before, after, and of each Slurm node, as the run wrote them
    command_line: list[str]
    run: RunProvenance
    signed_on: str


class Statement(InTotoModel):
    type: Literal["https://in-toto.io/Statement/v1"] = Field(STATEMENT_TYPE, alias="_type")
    subject: list[ResourceDescriptor]
    predicate_type: Literal["https://kit.invalid/run-provenance/v1"] = PREDICATE_TYPE
    predicate: RunPredicate

    def json_text(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def timestamp(text: str) -> str:
    """An ISO time of run.json (kit.rundir.schema.utc_now) in RFC 3339 UTC with "Z", as in-toto writes times."""
    return datetime.fromisoformat(text).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_descriptor(reference: str, digest: str) -> ResourceDescriptor:
    """run.json's image -> digest ("repo@sha256:…" pulled, "sha256:…" built) as a descriptor."""
    algorithm, _, value = digest.rpartition("@")[2].partition(":")
    return ResourceDescriptor(name=reference, digest={algorithm: value})


def run_statement(run: RunDir, signed_on: str) -> Statement:
    """The statement of a run directory that matches its SHA256SUMS (checked by the caller)."""
    info = run.read_info()
    listed = {entry.path: entry.sha256 for entry in read_sums(run.root)}
    fingerprints = [
        run.fingerprint_path.name,
        run.fingerprint_after_path.name,
        *(Path(path).as_posix() for path in info.node_fingerprints.values()),
    ]
    kit = info.kit
    images = info.images
    return Statement(
        subject=[ResourceDescriptor(name=SUMS_FILE, digest={"sha256": sha256_file(run.root / SUMS_FILE)})],
        predicate=RunPredicate(
            kit=KitProvenance(
                version=kit.version,
                git_commit=kit.git_commit,
                dirty=kit.dirty,
                source_sha256=kit.source_sha256,
                measuring_code_sha256=kit.workload_sources_sha256,
                manifests_sha256=kit.manifests_sha256,
            ),
            images=[image_descriptor(reference, digest) for reference, digest in sorted(images.items())],
            host_fingerprints=[
                ResourceDescriptor(name=name, digest={"sha256": listed[name]})
                for name in fingerprints
                if name in listed
            ],
            command_line=info.argv,
            run=RunProvenance(
                run_id=info.run_id,
                profile=info.profile,
                executor=info.executor,
                status=info.status,
                started_on=timestamp(info.started_at),
                finished_on=timestamp(info.finished_at) if info.finished_at else None,
                resumed_on=[timestamp(at) for at in info.resumed_at],
            ),
            signed_on=timestamp(signed_on),
        ),
    )
