#!/usr/bin/env bash
# Builds the CPU images with podman on this machine, without a registry:
#
#   1. the base image localhost/shardd-debian:12: a Debian 12 (bookworm)
#      root file system made with `debootstrap --variant=minbase` from the
#      Debian mirror, kept as a tar in the cache directory and imported with
#      `podman import` (both reused on later runs);
#   2. localhost/shardd:test and localhost/shardd-coordinator:test from
#      deploy/docker/Containerfile.local, with the binaries Bazel has
#      already built and the runtime packages runtime-packages.sh names.
#
#   deploy/docker/build-local.sh [--bin DIR] [--tag TAG] [--refresh-base]
#
#   --bin DIR        a tree laid out like bazel-bin (daemon/node/shardd,
#                    daemon/coordinator/coordinator, client/shardctl,
#                    client/example_trainer); default: bazel-bin
#   --tag TAG        image tag (default: test)
#   --refresh-base   debootstrap the base again (e.g. for security updates)
#
# Environment: SHARDD_PODMAN_CACHE (default /var/cache/shardd-podman),
# SHARDD_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# CONTAINERS_CONF (default deploy/docker/containers-local.conf: runc,
# cgroupfs, no ulimits; see that file for why).
# Needs root (debootstrap, rootful podman), podman and debootstrap
# (`scripts/install-deps --containers`) and the binaries built:
#   bazel build //daemon/node:shardd //daemon/coordinator:coordinator \
#     //client:shardctl //client:example_trainer
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PATH=$PATH:/usr/sbin:/sbin

bin_dir=bazel-bin
tag="test"
refresh_base=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin_dir=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --refresh-base) refresh_base=1; shift ;;
    *) sed -n '2,25p' "$0" >&2; exit 2 ;;
  esac
done

[[ $(id -u) -eq 0 ]] || { echo "build-local: needs root" >&2; exit 1; }
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || {
    echo "build-local: $tool is missing (scripts/install-deps --containers)" >&2
    exit 1
  }
done
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers-local.conf}
cache=${SHARDD_PODMAN_CACHE:-/var/cache/shardd-podman}
mirror=${SHARDD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=localhost/shardd-debian:12
mkdir -p "$cache"

binaries=(daemon/node/shardd daemon/coordinator/coordinator client/shardctl
  client/example_trainer)
for b in "${binaries[@]}"; do
  [[ -x "$bin_dir/$b" ]] || {
    echo "build-local: $bin_dir/$b is missing: bazel build it first" >&2
    exit 1
  }
done

# --- the base image ---------------------------------------------------------
base_tar=$cache/debian12-minbase.tar
if [[ $refresh_base -eq 1 ]]; then
  rm -f "$base_tar"
  podman image rm -f "$base" >/dev/null 2>&1 || true
fi
if [[ ! -s "$base_tar" ]]; then
  echo "build-local: debootstrap --variant=minbase bookworm (a few minutes)"
  rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" \
    >"$cache/debootstrap.log" 2>&1; then
    tail -20 "$cache/debootstrap.log" >&2
    echo "build-local: debootstrap failed; see $cache/debootstrap.log" >&2
    exit 1
  fi
  # The images' apt sees the point releases and security updates too, as
  # debian:12-slim does.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar --numeric-owner -C "$rootfs" -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf "$rootfs"
  trap - EXIT
  podman image rm -f "$base" >/dev/null 2>&1 || true
fi
if ! podman image exists "$base"; then
  echo "build-local: podman import $base_tar as $base"
  podman import --quiet --change 'CMD ["/bin/bash"]' "$base_tar" "$base" >/dev/null
fi

# --- the runtime images -----------------------------------------------------
context=$(mktemp -d /tmp/shardd-image-context.XXXXXX)
trap 'rm -rf "$context"' EXIT
mkdir "$context/bin"
for b in "${binaries[@]}"; do cp -L "$bin_dir/$b" "$context/bin/"; done
# runtime-packages.sh asks dpkg about every library (minutes on a machine
# with many packages): its answer is kept per set of library paths.
libs_key=$(for b in "$context"/bin/*; do ldd "$b"; done |
  awk '$2 == "=>" { print $3 }' | sort -u | sha256sum | cut -c1-16)
packages=$cache/runtime-packages.$libs_key.txt
if [[ ! -s "$packages" ]]; then
  "$here/runtime-packages.sh" "$context"/bin/* >"$packages.tmp"
  mv "$packages.tmp" "$packages"
fi
cp "$packages" "$context/runtime-packages.txt"
echo "build-local: runtime packages: $(tr '\n' ' ' <"$context/runtime-packages.txt")"

# --network=host: the RUN steps reach the Debian mirror the way the host
# does, whatever podman's bridge networking can do on this machine.
for target in shardd coordinator; do
  image=localhost/shardd:$tag
  [[ $target == coordinator ]] && image=localhost/shardd-coordinator:$tag
  echo "build-local: podman build --target $target -t $image"
  if ! podman build --network=host --build-arg BASE="$base" \
    --target "$target" -t "$image" -f "$here/Containerfile.local" \
    "$context" >"$cache/build-$target.log" 2>&1; then
    tail -30 "$cache/build-$target.log" >&2
    echo "build-local: podman build failed; see $cache/build-$target.log" >&2
    exit 1
  fi
done
podman images --filter reference='localhost/shardd*' \
  --format '{{.Repository}}:{{.Tag}} {{.Size}}'
