"""The pinned images: manifests/images.lock.yaml, and building, pulling and verifying them.

The lock names, per image, the reference the executor runs (repo:tag), the registry digest it is
pinned to (or why there is none yet), the framework versions inside, and, for the images the kit
builds itself, the pinned base and a hash of the build context. `verify` compares what the local
docker engine holds with the lock and names every difference; it never changes anything.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from kit.cache import cache_dir, exclusive
from kit.manifest import ManifestError, load_manifest, manifests_dir, whole_number
from kit.plan.protocol import Strict
from kit.rundir.schema import ImagePreparation

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# repo:tag as docker reads a reference: an optional registry (host[:port]/), lowercase path
# components, a tag of word characters, '.' and '-'; nothing that could be read as an option.
REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
)
PINNED_REFERENCE = re.compile(REFERENCE.pattern.removesuffix("$") + r"@sha256:[0-9a-f]{64}$")
LABEL_PREFIX = "kit."
CONTEXT_LABEL = "kit.context-sha256"
BASE_LABEL = "org.opencontainers.image.base.name"
# Certificate bundles pip may need inside a build stage (the first that exists is copied).
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


class BuildSpec(Strict):
    """How the kit builds an image: its folder, the pinned base, and what joins the context."""

    context: str = Field(description="folder with the Dockerfile, relative to the repository root")
    base: str = Field(description="default base image, repo:tag@sha256:digest")
    base_source: str = Field(description="where the base digest was found")
    files: tuple[str, ...] = Field(default=(), description="repository files copied into the context")
    host_wheels: tuple[str, ...] = Field(
        default=(), description="distributions whose wheel the host supplies (versions from the constraints file)"
    )
    constraints: str | None = Field(default=None, description="constraints file that pins host_wheels")

    @model_validator(mode="after")
    def _pinned(self) -> BuildSpec:
        if not PINNED_REFERENCE.match(self.base):
            raise ValueError(f"base {self.base!r} is not pinned as repo:tag@sha256:<64 hex>")
        if self.host_wheels and not self.constraints:
            raise ValueError("host_wheels need a constraints file that pins their versions")
        return self


class LockedImage(Strict):
    """One image of the lock."""

    reference: str = Field(description="repo:tag the executor runs")
    digest: str | None = Field(description="registry digest (sha256:...) of the published image; null when unknown")
    digest_source: str | None = None
    note: str | None = None
    versions: dict[str, str] = {}
    devices: tuple[Literal["cuda", "cpu"], ...] = ("cuda", "cpu")  # what its software runs on
    build: BuildSpec | None = None
    context_sha256: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LockedImage:
        if not REFERENCE.match(self.reference):
            raise ValueError(f"reference {self.reference[:80]!r} must be repo:tag (the digest goes under digest)")
        if self.reference.endswith(":latest"):
            raise ValueError(f"reference {self.reference!r} uses the moving tag 'latest'")
        if self.digest is not None and not DIGEST.match(self.digest):
            raise ValueError(f"digest {self.digest!r} is not sha256:<64 hex>")
        if self.digest is None and not self.note:
            raise ValueError("an image without a digest needs a note saying why")
        if self.digest is not None and not self.digest_source:
            raise ValueError("a digest needs digest_source: where it was found")
        if self.build is not None and not self.context_sha256:
            raise ValueError("a built image needs context_sha256")
        return self

    @property
    def pinned_reference(self) -> str:
        """repo:tag@sha256:... where the lock has a digest, else repo:tag."""
        return f"{self.reference}@{self.digest}" if self.digest else self.reference

    @property
    def repository(self) -> str:
        return self.reference.rsplit(":", 1)[0]


class LockedEnvironment(Strict):
    """An engine's Python environment for a host where its image cannot run (a CPU host): what
    pip installs into a virtual environment the kit makes, and what it must take out again."""

    engine: str = Field(description="the engine (kit.serve.engines) this environment runs")
    device: Literal["cpu", "cuda"]
    requirement: str = Field(description="what pip installs, pinned: name==version")
    source: str = Field(description="where the distribution comes from, and what it is")
    remove: tuple[str, ...] = Field(default=(), description="distributions uninstalled after the install")
    remove_reason: str | None = None
    provides: str | None = Field(
        default=None, description="name==version of dist-info the engine's command looks itself up by"
    )
    entrypoint: tuple[str, ...] = Field(description="the command in the environment's bin/ that starts the engine")

    @model_validator(mode="after")
    def _pinned(self) -> LockedEnvironment:
        if "==" not in self.requirement:
            raise ValueError(f"requirement {self.requirement!r} is not pinned as name==version")
        if self.remove and not self.remove_reason:
            raise ValueError("removing distributions needs remove_reason")
        return self


class ImagesLock(Strict):
    """The lock's three keys, each required: a lock cut short (its last part, the environments,
    missing) is refused rather than read as one without the images it lost."""

    schema_version: Annotated[Literal[1], BeforeValidator(whole_number)]
    images: dict[str, LockedImage] = Field(min_length=1)
    environments: dict[str, LockedEnvironment]


def lock_path() -> Path:
    return manifests_dir() / "images.lock.yaml"


def load_lock(path: Path | None = None) -> ImagesLock:
    return load_manifest(path or lock_path(), ImagesLock)


def repo_root() -> Path:
    """The checkout the Dockerfiles live in (manifests/ sits beside containers/)."""
    return Path(__file__).resolve().parent.parent


def kit_source_dir() -> Path:
    """The `kit` package, mounted read-only into containers so pinned images stay as published."""
    return Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# Build contexts
# ---------------------------------------------------------------------------------------------


class NoBuildContext(RuntimeError):
    """An image's build context is not here: the Dockerfiles are in the source checkout, which an
    installed wheel of the kit is not."""


def has_build_context(spec: BuildSpec, root: Path | None = None) -> bool:
    return ((root or repo_root()) / spec.context / "Dockerfile").is_file()


def context_files(spec: BuildSpec, root: Path | None = None) -> dict[str, Path]:
    """Name in the context -> file: the image's folder, then the repository files it names."""
    root = root or repo_root()
    folder = root / spec.context
    if not has_build_context(spec, root):
        raise NoBuildContext(
            f"{folder / 'Dockerfile'} not found: the kit builds its images from a source checkout (git clone)"
        )
    ignored = _dockerignore(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and not any(fnmatch.fnmatch(rel, p) for p in ignored):
            files[rel] = path
    for name in spec.files:
        files[Path(name).name] = root / name
    return files


def _dockerignore(folder: Path) -> list[str]:
    """Patterns of the folder's .dockerignore: documentation and host-side scripts stay out."""
    path = folder / ".dockerignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")] + [".dockerignore"]


def context_sha256(spec: BuildSpec, root: Path | None = None) -> str:
    """SHA-256 over the context's files in name order (name, NUL, bytes, NUL).

    Only what the repository holds counts: the host's wheels and CA bundle vary by machine and
    are not part of what the lock pins.
    """
    digest = hashlib.sha256()
    for name, path in sorted(context_files(spec, root).items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def constraint_pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a constraints file, names normalised (PEP 503)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = (part.strip() for part in line.split("==", 1))
            pins[normalise(name)] = version
    return pins


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_cache(name: str) -> Path:
    """Wheels an earlier build of this image used; they make the next build work offline."""
    return cache_dir() / "wheels" / name


def whole_wheel(path: Path) -> bool:
    """A wheel is a zip whose central directory (written last) reads back."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def host_ca_bundle() -> Path:
    """The CA bundle this host's pip trusts (behind an intercepting proxy, only it works)."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), *CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    import certifi  # a dependency of the docker SDK's HTTP client

    return Path(certifi.where())


def has_wheel(folder: Path, distribution: str, version: str) -> bool:
    """A wheel of this distribution and public version (local label aside) lies in the folder."""
    for wheel in folder.glob("*.whl"):
        name, found = wheel.name.split("-")[:2]
        if normalise(name) == normalise(distribution) and found.split("+")[0] == version.split("+")[0]:
            return True
    return False


def fetch_host_wheel(requirement: str, into: Path, python: str | None = None) -> None:
    """The wheel of one pinned distribution, from this host's pip sources, for the image's Python.

    A local wheel directory or index configured for pip (find-links) is tried alone first; then
    the PyTorch CPU index for torch, the package index for anything else.
    """
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(into), requirement]
    if python:
        base += ["--python-version", python]
    attempts = [base + ["--no-index"]]
    if requirement.startswith("torch=="):
        attempts.append(base + ["--index-url", "https://download.pytorch.org/whl/cpu"])
    attempts.append(base)
    problems = []
    for command in attempts:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            return
        problems.append(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    raise RuntimeError(f"no wheel for {requirement}: {'; '.join(problems)}")


@contextmanager
def build_context(name: str, image: LockedImage, root: Path | None = None) -> Iterator[Path]:
    """A temporary folder holding exactly what `docker build` of this image gets to see."""
    spec = image.build
    assert spec is not None
    root = root or repo_root()
    with tempfile.TemporaryDirectory(prefix=f"kit-build-{name}-") as tmp:
        context = Path(tmp)
        for rel, path in context_files(spec, root).items():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, context / rel)
        wheels = context / "wheels"
        wheels.mkdir()
        cached = wheel_cache(name)
        if cached.is_dir():
            for wheel in cached.glob("*.whl"):
                if whole_wheel(wheel):
                    shutil.copy2(wheel, wheels / wheel.name)
                else:  # cut short by a crash or a full disk: fetched again below or in the build
                    wheel.unlink()
        if spec.host_wheels:
            assert spec.constraints, "BuildSpec requires a constraints file with host_wheels"
            pins = constraint_pins(root / spec.constraints)
            for distribution in spec.host_wheels:
                version = pins.get(normalise(distribution))
                if version is None:
                    raise ManifestError(
                        lock_path(),
                        f"images.{name}.build.host_wheels",
                        f"{distribution} is not pinned in {spec.constraints}",
                    )
                if not has_wheel(wheels, distribution, version):
                    fetch_host_wheel(f"{distribution}=={version}", wheels, image.versions.get("python"))
        (context / "build-ca.pem").write_bytes(host_ca_bundle().read_bytes())
        yield context


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class EngineUnavailable(RuntimeError):
    """No docker engine answers (not installed, not running, or no permission)."""


_client = None


def engine_socket_may_exist() -> bool:
    """Cheap test before importing the SDK: DOCKER_HOST set, or the default socket present."""
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()


def engine():
    """The docker SDK client, connected once per process; EngineUnavailable says why not."""
    global _client
    if _client is not None:
        return _client
    if not engine_socket_may_exist():
        raise EngineUnavailable("no docker engine: DOCKER_HOST is not set and /var/run/docker.sock does not exist")
    try:
        import docker
    except ImportError:
        raise EngineUnavailable("the docker SDK is not installed (pip install 'docker>=7')") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # DockerException, connection refused, permission denied
        raise EngineUnavailable(f"the docker engine does not answer: {exc}") from None
    _client = client
    return client


def engine_reachable() -> bool:
    try:
        engine()
        return True
    except EngineUnavailable:
        return False


def local_image(reference: str):
    """The local image with this reference, or None."""
    import docker

    try:
        return engine().images.get(reference)
    except docker.errors.ImageNotFound:
        return None


def image_for_case(image_name: str, lock: ImagesLock | None = None) -> tuple[str, LockedImage] | None:
    """The lock entry a case's image name refers to, or None when the lock has no such image."""
    lock = lock or load_lock()
    entry = lock.images.get(image_name)
    return (image_name, entry) if entry else None


# ---------------------------------------------------------------------------------------------
# The CUDA an image was built with
# ---------------------------------------------------------------------------------------------

# NVIDIA's CUDA images (nvidia/cuda) set CUDA_VERSION (e.g. 13.0.1), and images built on them
# inherit it: PyTorch's devel images, vLLM's, TGI's. An image may name it itself in this label.
CUDA_VERSION_ENV = "CUDA_VERSION"
CUDA_VERSION_LABEL = "kit.version.cuda"


def cuda_version_of(env: list[str] | None, labels: dict[str, str] | None) -> tuple[str | None, str]:
    """The CUDA version in an image's configuration (its Env list and labels), and where it was read."""
    for entry in env or []:
        name, _, value = entry.partition("=")
        if name == CUDA_VERSION_ENV and value:
            return value, f"env {CUDA_VERSION_ENV} of the image"
    label = (labels or {}).get(CUDA_VERSION_LABEL)
    if label:
        return label, f"label {CUDA_VERSION_LABEL} of the image"
    return None, f"the image sets neither {CUDA_VERSION_ENV} nor the label {CUDA_VERSION_LABEL}"


def images_cuda(names: list[str], lock: ImagesLock | None = None) -> list:
    """The CUDA version of each named image as present here (kit.host.fingerprint.ImageCuda)."""
    from kit.host.fingerprint import ImageCuda

    lock = lock or load_lock()
    found = []
    for name in names:
        if name not in lock.images:
            found.append(ImageCuda(name=name, reference=name, source=f"not in the lock ({lock_path()})"))
            continue
        reference = lock.images[name].reference
        try:
            image = local_image(reference)
        except EngineUnavailable as exc:
            found.append(ImageCuda(name=name, reference=reference, source=f"not read: {exc}"))
            continue
        if image is None:
            found.append(ImageCuda(name=name, reference=reference, source="not present locally"))
            continue
        version, source = cuda_version_of((image.attrs.get("Config") or {}).get("Env"), image.labels)
        found.append(ImageCuda(name=name, reference=reference, cuda_version=version, source=source))
    return found


# ---------------------------------------------------------------------------------------------
# Build and pull
# ---------------------------------------------------------------------------------------------


class BuildOutcome(BaseModel):
    name: str
    reference: str
    image_id: str
    built: bool  # False when an image of the same context and base was already there
    seconds: float
    base: str


def build(
    name: str,
    lock: ImagesLock | None = None,
    base: str | None = None,
    force: bool = False,
    say: Callable[[str], None] = print,
    root: Path | None = None,
) -> BuildOutcome:
    """Build one image of the lock from its folder; reuse an image of the same context and base."""
    lock = lock or load_lock()
    if name not in lock.images:
        raise KeyError(f"no image {name!r} in the lock (known: {', '.join(lock.images)})")
    image = lock.images[name]
    if image.build is None:
        raise ValueError(f"{name} is not built by the kit; `kit images pull {name}` fetches {image.pinned_reference}")
    started = time.monotonic()
    base = base or image.build.base
    context_hash = context_sha256(image.build, root)
    import docker

    # One builder at a time per image; a builder that waited finds the image the first one made.
    with exclusive(wheel_cache(name).with_name(f"{name}.build.lock"), f"the build of {name}", say):
        existing = local_image(image.reference)
        labels = (existing.labels or {}) if existing is not None else {}
        if not force and labels.get(CONTEXT_LABEL) == context_hash and labels.get(BASE_LABEL) == base:
            say(f"{name}: {image.reference} is up to date ({existing.id[:19]}); --force rebuilds")
            return BuildOutcome(
                name=name,
                reference=image.reference,
                image_id=existing.id,
                built=False,
                seconds=time.monotonic() - started,
                base=base,
            )
        client = engine()
        with build_context(name, image, root) as context:
            say(f"{name}: building {image.reference} on {base}")
            buildargs = {"BASE": base, "CONTEXT_SHA256": context_hash}
            try:
                built, log = _build_streamed(client, context, image.reference, buildargs, say)
                _keep_wheels(client, context, name, buildargs, say)
            except docker.errors.BuildError as exc:
                tail = "".join(chunk.get("stream", "") for chunk in exc.build_log if isinstance(chunk, dict))[-3000:]
                raise RuntimeError(f"building {name} failed: {exc.msg}\n{tail}") from None
    say(f"{name}: built {image.reference} ({built.id[:19]}) in {time.monotonic() - started:.0f} s")
    return BuildOutcome(
        name=name,
        reference=image.reference,
        image_id=built.id,
        built=True,
        seconds=time.monotonic() - started,
        base=base,
    )


def _build_streamed(client, context: Path, tag: str, buildargs: dict, say, target: str | None = None):
    """docker build through the low-level API, so that each step is shown as it happens."""
    import docker

    log = []
    image_id = None
    stream = client.api.build(
        path=str(context),
        tag=tag,
        buildargs=buildargs,
        rm=True,
        forcerm=True,
        decode=True,
        target=target,
        pull=False,
    )
    for chunk in stream:
        log.append(chunk)
        if "stream" in chunk:
            text = chunk["stream"].rstrip()
            if text.startswith("Step ") or text.startswith(" ---> Using cache"):
                say(f"  {text}")
            match = re.match(r"Successfully built ([0-9a-f]+)", chunk["stream"].strip())
            if match:
                image_id = match.group(1)
        if "error" in chunk:
            raise docker.errors.BuildError(chunk["error"].strip(), log)
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if image_id is None:
        raise docker.errors.BuildError("the build ended without an image", log)
    return client.images.get(image_id), log


def _keep_wheels(client, context: Path, name: str, buildargs: dict, say) -> None:
    """Copy the build stage's wheelhouse to the kit's cache (the build stage is cached: instant)."""
    dockerfile = (context / "Dockerfile").read_text(encoding="utf-8")
    if " AS build" not in dockerfile or "/build/wheelhouse" not in dockerfile:
        return
    stage_tag = f"kit-build-stage/{name}:wheels"
    stage, _ = _build_streamed(client, context, stage_tag, buildargs, lambda _: None, target="build")
    target = wheel_cache(name)
    target.mkdir(parents=True, exist_ok=True)
    container = client.containers.create(stage.id, command=["true"], labels={f"{LABEL_PREFIX}purpose": "wheel-export"})
    try:
        import io
        import tarfile

        stream, _ = container.get_archive("/build/wheelhouse")
        buffer = io.BytesIO(b"".join(stream))
        added = 0
        with tarfile.open(fileobj=buffer) as archive:
            for member in archive.getmembers():
                if member.isfile() and member.name.endswith(".whl"):
                    destination = target / Path(member.name).name
                    if not destination.exists():
                        extracted = archive.extractfile(member)
                        assert extracted is not None, "a regular file's member has its data"
                        data = extracted.read()
                        partial = destination.with_suffix(".partial")
                        partial.write_bytes(data)
                        partial.rename(destination)
                        added += 1
        say(f"{name}: wheel cache {target} ({added} new)")
    finally:
        container.remove(force=True)
        try:
            client.images.remove(stage_tag, noprune=True)  # the tag goes; the layers stay as cache
        except Exception:
            pass


class PullFailed(RuntimeError):
    """The registry could not be reached, or refused the image."""


def pull(name: str, lock: ImagesLock | None = None, say: Callable[[str], None] = print) -> str:
    """Pull an image by its pinned digest (or by tag, when unpinned) and tag it as the lock names it."""
    lock = lock or load_lock()
    if name not in lock.images:
        raise KeyError(f"no image {name!r} in the lock (known: {', '.join(lock.images)})")
    image = lock.images[name]
    client = engine()
    import docker

    if image.build is not None and image.digest is None:
        raise PullFailed(f"{name} is not published to a registry yet; build it here: kit images build {name}")
    source = f"{image.repository}@{image.digest}" if image.digest else image.reference
    say(f"{name}: pulling {source}")
    try:
        pulled = client.images.pull(source)
    except docker.errors.APIError as exc:
        explanation = getattr(exc, "explanation", None) or str(exc)
        raise PullFailed(
            f"{name}: cannot pull {source}: {explanation}. Without registry access here: `docker pull "
            f"{source}` elsewhere, `docker tag` it {image.reference} and `docker save` it, then `docker load` "
            f"it here (a loaded image has no registry digest, so `kit images verify` will say so)."
        ) from None
    except Exception as exc:  # requests' connection errors, timeouts
        raise PullFailed(f"{name}: cannot pull {source}: the registry is unreachable ({exc})") from None
    pulled.tag(image.repository, image.reference.rsplit(":", 1)[1])
    if image.digest is None:
        digests = ", ".join(pulled.attrs.get("RepoDigests") or []) or "none"
        say(
            f"{name}: UNPINNED - the lock has no digest; this pull got {digests}. Review it and record it in {lock_path()}."
        )
    return pulled.id


# ---------------------------------------------------------------------------------------------
# Prepare: what a GPU run needs, built or pulled before its first case
# ---------------------------------------------------------------------------------------------


def prepare(
    names: list[str], lock: ImagesLock | None = None, say: Callable[[str], None] = print
) -> list[ImagePreparation]:
    """Each named image present locally, else built (the kit's own) or pulled (an engine's, by its
    pinned digest). A failure is recorded and the others go on: the cases of that image then end
    `error` saying the image is missing. Needs a reachable engine (EngineUnavailable otherwise)."""
    lock = lock or load_lock()
    engine()
    done = []
    for position, name in enumerate(names, 1):
        image = lock.images[name]
        started = time.monotonic()
        present = local_image(image.reference)
        if present is not None:
            say(f"[{position}/{len(names)}] {name}: {image.reference} is present")
            done.append(
                ImagePreparation(
                    name=name, reference=image.reference, action="present", seconds=0.0, image_id=present.id
                )
            )
            continue
        action = "built" if image.build is not None else "pulled"
        say(
            f"[{position}/{len(names)}] {name}: {image.reference} is not here; {'building' if image.build else 'pulling'} it"
        )
        try:
            image_id = build(name, lock, say=say).image_id if image.build is not None else pull(name, lock, say=say)
        except (RuntimeError, PullFailed, ValueError) as exc:
            seconds = time.monotonic() - started
            say(f"[{position}/{len(names)}] {name}: failed after {seconds:.0f} s: {exc}")
            done.append(
                ImagePreparation(
                    name=name, reference=image.reference, action="failed", seconds=seconds, error=str(exc)[:2000]
                )
            )
            continue
        seconds = time.monotonic() - started
        say(f"[{position}/{len(names)}] {name}: {action} in {seconds:.0f} s")
        done.append(
            ImagePreparation(name=name, reference=image.reference, action=action, seconds=seconds, image_id=image_id)
        )
    return done


# ---------------------------------------------------------------------------------------------
# Verify
# ---------------------------------------------------------------------------------------------


class Difference(BaseModel):
    """One way the local image is not what the lock pins."""

    field: str
    lock: str | None
    local: str | None


class ImageState(BaseModel):
    """Lock vs local for one image."""

    name: str
    reference: str
    pinned_reference: str
    status: Literal["ok", "differs", "missing", "unpinned"]
    image_id: str | None = None
    repo_digests: list[str] = []
    differences: list[Difference] = []
    notes: list[str] = []


VERSION_PROBE = """
import importlib.metadata as m, json, platform, sys
out = {}
for name in sys.argv[1:]:
    if name == "python":
        out[name] = platform.python_version()
        continue
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def probe_versions(reference: str, names: list[str]) -> dict[str, str | None]:
    """Versions inside an image: labels kit.version.<name> first, then the image's Python."""
    image = local_image(reference)
    labels = (image.labels if image is not None else {}) or {}
    found: dict[str, str | None] = {}
    wanted = []
    for name in names:
        if f"kit.version.{name}" in labels:
            found[name] = labels[f"kit.version.{name}"]
        else:
            wanted.append(name)
    if wanted:
        client = engine()
        for python in ("python3", "python"):
            try:
                output = client.containers.run(
                    reference,
                    [python, "-c", VERSION_PROBE, *wanted],
                    entrypoint=[],
                    remove=True,
                    network_disabled=True,
                    labels={f"{LABEL_PREFIX}purpose": "version-probe"},
                )
            except Exception:
                continue
            lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
            found.update(json.loads(lines[-1]))
            break
    return found


def version_matches(locked: str, local: str | None) -> bool:
    """Equal, or the lock names a prefix at a component boundary: "3.11" matches "3.11.2", and
    "0.30.0" matches "0.30.0+cu129" (a lock that names the local label pins it too)."""
    if local is None:
        return False
    return local == locked or local.startswith((locked + ".", locked + "+"))


def verify_one(name: str, image: LockedImage, probe: bool = True, root: Path | None = None) -> ImageState:
    state = ImageState(name=name, reference=image.reference, pinned_reference=image.pinned_reference, status="ok")
    if image.build is not None and not has_build_context(image.build, root):
        state.notes.append(
            f"{image.build.context} is not here: a source checkout builds the image and checks its context"
        )
    elif image.build is not None:
        current = context_sha256(image.build, root)
        if current != image.context_sha256:
            state.differences.append(
                Difference(field="lock.context_sha256 (vs the working tree)", lock=image.context_sha256, local=current)
            )
            state.notes.append(
                f"{image.build.context} changed since the lock was written: rebuild, then update context_sha256"
            )
    local = local_image(image.reference)
    if local is None and image.digest:
        local = local_image(f"{image.repository}@{image.digest}")
    if local is None:
        state.status = "unpinned" if image.digest is None and image.build is None else "missing"
        state.notes.append(f"not present locally: kit images {'build' if image.build else 'pull'} {name}")
        if state.status == "unpinned":
            state.notes.append(f"the lock has no digest: {image.note}")
        return state
    state.image_id = local.id
    state.repo_digests = list(local.attrs.get("RepoDigests") or [])
    labels = local.labels or {}
    if image.digest:
        if f"{image.repository}@{image.digest}" not in state.repo_digests:
            state.differences.append(
                Difference(
                    field="digest",
                    lock=image.digest,
                    local=", ".join(state.repo_digests) or f"none (image id {local.id})",
                )
            )
    if image.build is not None:
        if labels.get(CONTEXT_LABEL) != image.context_sha256:
            state.differences.append(
                Difference(field="context_sha256", lock=image.context_sha256, local=labels.get(CONTEXT_LABEL))
            )
        if labels.get(BASE_LABEL) != image.build.base:
            state.differences.append(Difference(field="base", lock=image.build.base, local=labels.get(BASE_LABEL)))
    if probe and image.versions:
        found = probe_versions(image.reference, list(image.versions))
        for key, locked in image.versions.items():
            if not version_matches(locked, found.get(key)):
                state.differences.append(Difference(field=f"versions.{key}", lock=locked, local=found.get(key)))
    if state.differences:
        state.status = "differs"
    elif image.digest is None and image.build is None:
        state.status = "unpinned"
        state.notes.append(f"the lock has no digest: {image.note}")
    return state


def verify(names: list[str] | None = None, probe: bool = True, lock: ImagesLock | None = None) -> list[ImageState]:
    """Lock vs local for the named images (all by default); needs a reachable engine."""
    lock = lock or load_lock()
    unknown = [n for n in names or [] if n not in lock.images]
    if unknown:
        raise KeyError(f"no image {', '.join(unknown)} in the lock (known: {', '.join(lock.images)})")
    engine()
    return [verify_one(name, lock.images[name], probe) for name in names or list(lock.images)]


class LocalSummary(BaseModel):
    """What `kit images list` shows of the local engine: per image, its ID if present."""

    engine: str | None  # None when reachable, else why not
    present: dict[str, str | None] = {}
    current_context_sha256: dict[str, str] = {}  # of the build contexts this installation holds


def local_summary(lock: ImagesLock | None = None) -> LocalSummary:
    lock = lock or load_lock()
    hashes = {
        name: context_sha256(image.build)
        for name, image in lock.images.items()
        if image.build and has_build_context(image.build)
    }
    try:
        engine()
    except EngineUnavailable as exc:
        return LocalSummary(engine=str(exc), current_context_sha256=hashes)
    present = {}
    for name, image in lock.images.items():
        local = local_image(image.reference)
        present[name] = local.id if local is not None else None
    return LocalSummary(engine=None, present=present, current_context_sha256=hashes)


def build_all(names: tuple[str, ...], base: str | None = None, force: bool = False, say=print) -> None:
    """`kit images build`: each image named (default: every image the kit builds itself)."""
    lock = load_lock()
    for name in names or tuple(name for name, image in lock.images.items() if image.build is not None):
        build(name, lock, base=base, force=force, say=say)


def pull_all(names: tuple[str, ...], say=print) -> list[str]:
    """`kit images pull`: each image named (default: every image the kit does not build) by its
    pinned digest; why each that could not be pulled was not (KeyError for a name the lock lacks)."""
    lock = load_lock()
    failures = []
    for name in names or tuple(name for name, image in lock.images.items() if image.build is None):
        try:
            pull(name, lock, say=say)
        except (EngineUnavailable, PullFailed) as exc:
            failures.append(str(exc))
    return failures
