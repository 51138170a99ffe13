#!/usr/bin/env bash
# What CI needs before its tests to drive the real docker executor: a docker engine, a base
# image made without a registry, and the smoke image built on it (the tests run smoke cases in
# it: tests/execute/test_docker.py). Each step is skipped when its result is already there
# (engine running, base imported, image of the same context and base built), and the slow
# inputs are cached under $KIT_CACHE: the debootstrap root filesystem and the wheels.
#
#   containers/smoke/ci-build.sh          (as root: it may install packages and start dockerd)
set -euo pipefail
cd "$(dirname "$0")/../.."

export KIT_CACHE="${KIT_CACHE:-$HOME/.cache/kit}"
BASE_IMAGE="${KIT_SMOKE_BASE:-kit-base/bookworm-python3:local}"
started=$SECONDS

engine_up() { python -c 'import docker; docker.from_env(timeout=5).ping()' >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    echo "installing docker.io and debootstrap (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi

if ! engine_up; then
    echo "starting dockerd (log: /tmp/kit-dockerd.log)"
    nohup dockerd >/tmp/kit-dockerd.log 2>&1 &
    for _ in $(seq 60); do engine_up && break; sleep 1; done
    engine_up || { tail -20 /tmp/kit-dockerd.log >&2; echo "dockerd did not come up" >&2; exit 1; }
fi

bash containers/smoke/local-base.sh "$BASE_IMAGE"
python -m kit.cli images build smoke --base "$BASE_IMAGE"
echo "docker engine, base image and smoke image ready in $((SECONDS - started)) s"
