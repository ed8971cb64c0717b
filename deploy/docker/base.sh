#!/usr/bin/env bash
# Makes the images' base, a minimal Debian 12 (debootstrap minbase), and
# imports it as BASE_IMAGE into the local container store. Like the official
# debian:12-slim it tells dpkg to skip documentation, manual pages and
# translations, and keeps no apt lists or downloaded packages.
#   deploy/docker/base.sh IMAGE
set -euo pipefail

image="${1:?usage: base.sh IMAGE}"
mirror="${HERD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { echo "base.sh: $tool is missing (apt-get install buildah podman debootstrap)" >&2; exit 1; }
done

rootfs="$(mktemp -d /var/tmp/herd-base.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
  { tail -n 20 "$rootfs.log" >&2; echo "base.sh: debootstrap failed (log $rootfs.log)" >&2; exit 1; }
rm -f "$rootfs.log"

cat >"$rootfs/etc/dpkg/dpkg.cfg.d/herd-slim" <<'CFG'
# Images need no documentation (what debian:12-slim drops, copyright kept).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
cat >"$rootfs/etc/apt/apt.conf.d/herd-slim" <<'CFG'
# No package cache in the image layers.
APT::Keep-Downloaded-Packages "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
# What debootstrap installed before the excludes existed.
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/man" "$rootfs/usr/share/info" "$rootfs/usr/share/locale" -mindepth 1 -delete
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb

# buildah has no import; podman writes to the same image store.
tar -C "$rootfs" --numeric-owner -c . | podman import --quiet - "$image" >/dev/null
echo "base.sh: made $image"
