#!/usr/bin/env bash
# Build kelpie's image with no container registry: a Debian base from debootstrap, the
# locked wheels downloaded (hash-checked) on the host, then deploy/Dockerfile offline, and a
# smoke test (`kelpie --version` and `kelpie config check` inside the image, as uid 10001).
# Needs root and Debian's buildah and debootstrap. Usage: deploy/build-offline.sh [TAG]
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/kelpie:0.1.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if ! buildah inspect localhost/debian-base:bookworm >/dev/null 2>&1; then
  debootstrap --variant=minbase --include=python3-minimal,python3-venv bookworm \
    "$work/rootfs" "$mirror" >"$work/debootstrap.log"
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  base=$(buildah from scratch)
  buildah add "$base" "$work/rootfs.tar" / >/dev/null
  buildah commit -q "$base" localhost/debian-base:bookworm
  buildah rm "$base" >/dev/null
fi

ctx="$work/context"
mkdir -p "$ctx/wheels"
git archive HEAD bot pyproject.toml README.md requirements.lock | tar -x -C "$ctx"
cp deploy/Dockerfile "$ctx/Dockerfile"
python3 -m pip download -q --require-hashes --only-binary=:all: --python-version 3.11 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform linux_x86_64 \
  -r requirements.lock -d "$ctx/wheels"
python3 -m pip download -q -d "$ctx/wheels" 'setuptools>=69' wheel
buildah bud -q --layers=false -t "$tag" --build-arg BASE=localhost/debian-base:bookworm \
  --build-arg PIP_OFFLINE="--no-index --find-links /src" -f "$ctx/Dockerfile" "$ctx"

# Smoke test: the entry point runs as the unprivileged user and validates a config.
smoke=$(buildah from "$tag")
trap 'buildah rm "$smoke" >/dev/null; rm -rf "$work"' EXIT
buildah copy "$smoke" deploy/base/kelpie.yaml /config/kelpie.yaml >/dev/null
buildah run --user 10001:10001 "$smoke" -- kelpie --version
buildah run --user 10001:10001 "$smoke" -- kelpie config check /config/kelpie.yaml
buildah run "$smoke" -- id -u kelpie
