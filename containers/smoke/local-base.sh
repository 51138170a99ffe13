#!/usr/bin/env bash
# A Debian bookworm base image with Python 3.11, made without any registry: debootstrap a
# minimal root filesystem and `docker import` it. The root filesystem tarball is cached under
# $KIT_CACHE/base, so a machine that has made it once only re-imports it (seconds).
#
#   containers/smoke/local-base.sh [IMAGE]     default IMAGE: kit-base/bookworm-python3:local
#
# `kit images build smoke --base IMAGE` then builds the smoke image on it. Needs root (debootstrap).
set -euo pipefail

IMAGE="${1:-kit-base/bookworm-python3:local}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=python3,python3-venv,python3-pip,ca-certificates
CACHE="${KIT_CACHE:-$HOME/.cache/kit}/base"
# The tarball's name carries what went into it, so changing the package list makes a new one.
KEY=$(printf '%s %s %s' "$SUITE" "$MIRROR" "$PACKAGES" | sha256sum | cut -c1-12)
TARBALL="$CACHE/$SUITE-minbase-$KEY.tar"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE: already present"
    exit 0
fi

if [ ! -s "$TARBALL" ]; then
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
    mkdir -p "$CACHE"
    rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$rootfs" "$TARBALL.partial"' EXIT
    echo "debootstrap $SUITE ($PACKAGES) from $MIRROR"
    started=$SECONDS
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # Package lists and downloaded .debs are not part of a base image.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -cf "$TARBALL.partial" .
    mv "$TARBALL.partial" "$TARBALL"
    echo "root filesystem cached: $TARBALL ($((SECONDS - started)) s)"
fi

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase --include=$PACKAGES $SUITE" \
    "$TARBALL" "$IMAGE" >/dev/null
echo "base image $IMAGE: imported from $TARBALL"
