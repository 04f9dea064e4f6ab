#!/usr/bin/env bash
# Build kelpie's image with no container registry: a Debian base from debootstrap (checked
# against deploy/debian-base.lock), the locked wheels downloaded (hash-checked) on the host,
# then deploy/Dockerfile offline, and a smoke test (`kelpie --version` and `kelpie config
# check` inside the image, as uid 10001). Needs root and Debian's buildah and debootstrap.
# Usage: deploy/build-offline.sh [TAG]     (default localhost/kelpie:0.1.0)
#   DEBIAN_MIRROR      where debootstrap fetches from (default deb.debian.org)
#   BASE_LOCK=warn     build even if the base differs from deploy/debian-base.lock (CI)
#   REFRESH_BASE_LOCK=1  rewrite deploy/debian-base.lock from a fresh base
#   KEEP_IMAGE=0       delete the image after the smoke test (CI: vfs copies every layer)
#   IMAGE_LOCK=requirements.lock  an image without the `graphs` extra (default: with it,
#                      requirements-graphs.lock; the smoke test then imports matplotlib)
# The base image is cached as localhost/debian-base:bookworm-<hash of the lock>.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/kelpie:0.1.0}
lock=deploy/debian-base.lock
image_lock=${IMAGE_LOCK:-requirements-graphs.lock}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
work=$(mktemp -d)
smoke=""
step="starting"
cleanup() {
  if [ -n "$smoke" ]; then buildah rm "$smoke" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "build-offline.sh: FAILED while $step (see the lines above)" >&2' ERR

# Mirrors and PyPI hiccup: each download gets three tries, 10 s then 20 s apart.
retry() {
  local attempt=1
  until "$@"; do
    if [ "$attempt" -ge 3 ]; then return 1; fi
    echo "build-offline.sh: $step failed (try $attempt of 3); retrying" >&2
    sleep $((attempt * 10))
    attempt=$((attempt + 1))
  done
}

bootstrap() {
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase --include=python3-minimal,python3-venv bookworm \
    "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    return 1
  }
}

# The base: its packages must be the locked ones (a Debian point release moves them).
locked() { grep -v '^#' "$lock"; }
base=localhost/debian-base:bookworm-$(locked | sha256sum | cut -c1-12)
if ! buildah inspect "$base" >/dev/null 2>&1; then
  step="debootstrap of Debian bookworm from $mirror"
  retry bootstrap
  step="checking the base against $lock"
  dpkg-query --admindir="$work/rootfs/var/lib/dpkg" -W -f '${Package}=${Version}\n' |
    LC_ALL=C sort >"$work/versions"
  if [ "${REFRESH_BASE_LOCK:-0}" = 1 ]; then
    { grep '^#' "$lock"; cat "$work/versions"; } >"$work/lock" && cp "$work/lock" "$lock"
    base=localhost/debian-base:bookworm-$(locked | sha256sum | cut -c1-12)
    echo "build-offline.sh: rewrote $lock; review and commit it" >&2
  elif ! diff -u --label "$lock" --label "fresh base" <(locked) "$work/versions" \
    >"$work/versions.diff"; then
    cat "$work/versions.diff" >&2
    echo "build-offline.sh: the Debian base differs from $lock (above; a point release?)." \
      "Refresh it with REFRESH_BASE_LOCK=1 deploy/build-offline.sh and commit the diff." >&2
    [ "${BASE_LOCK:-strict}" = warn ] || exit 1
    base=localhost/debian-base:bookworm-unlocked
  fi
  step="committing the base image"
  tar --sort=name -C "$work/rootfs" -cf "$work/rootfs.tar" .
  container=$(buildah from scratch)
  buildah add "$container" "$work/rootfs.tar" / >/dev/null
  buildah commit -q --rm "$container" "$base" >/dev/null
fi

step="downloading the locked wheels"
ctx="$work/context"
mkdir -p "$ctx/wheels"
git archive HEAD bot pyproject.toml README.md requirements.lock requirements-graphs.lock |
  tar -x -C "$ctx"
cp deploy/Dockerfile "$ctx/Dockerfile"
retry python3 -m pip download -q --require-hashes --only-binary=:all: --python-version 3.11 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform linux_x86_64 \
  -r "$image_lock" -d "$ctx/wheels"
retry python3 -m pip download -q -d "$ctx/wheels" 'setuptools>=69' wheel

step="building $tag"
buildah bud -q --layers=false -t "$tag" --build-arg BASE="$base" --build-arg LOCK="$image_lock" \
  --build-arg PIP_OFFLINE="--no-index --find-links /src" -f "$ctx/Dockerfile" "$ctx" >/dev/null

# Smoke test: the entry point runs as the unprivileged user and validates a config.
step="smoke-testing $tag"
smoke=$(buildah from "$tag")
buildah copy "$smoke" deploy/base/kelpie.yaml /config/kelpie.yaml >/dev/null
buildah run --user 10001:10001 "$smoke" -- kelpie --version
buildah run --user 10001:10001 "$smoke" -- kelpie config check /config/kelpie.yaml
if [ "$image_lock" = requirements-graphs.lock ]; then  # show_graph can draw
  buildah run --user 10001:10001 "$smoke" -- python3 -c \
    'from matplotlib.backends.backend_agg import FigureCanvasAgg; print("matplotlib ok")'
fi
[ "$(buildah run "$smoke" -- id -u kelpie)" = 10001 ]
if [ "${KEEP_IMAGE:-1}" = 0 ]; then
  buildah rm "$smoke" >/dev/null && smoke=""
  buildah rmi "$tag" >/dev/null
fi
step="done"
echo "build-offline.sh: built and smoke-tested $tag on $base"
