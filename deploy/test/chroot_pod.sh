#!/usr/bin/env bash
# Runs one container of a pod from an image's mounted root filesystem, as the
# kubelet would start it: in its own mount namespace, with /proc, /sys, a
# minimal /dev and the pod's volumes mounted, only the container's
# environment, as the pod's user. Execs all the way (the caller's pid becomes
# the program's), so that signals reach the program itself.
#   chroot_pod.sh ROOT UID:GID ENV_FILE MOUNTS_FILE -- PROGRAM ARGS...
# ENV_FILE: NAME=VALUE, NUL-separated (pod_command.js --env-out).
# MOUNTS_FILE: "SOURCE<TAB>TARGET<TAB>ro|rw" lines, TARGET inside ROOT.
set -euo pipefail

if [ "${HERD_CHROOT_POD_NS:-}" != 1 ]; then
  # Mounts made below vanish with the namespace when the program exits.
  HERD_CHROOT_POD_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi

[ $# -ge 6 ] && [ "$5" = -- ] || { echo "usage: chroot_pod.sh ROOT UID:GID ENV_FILE MOUNTS_FILE -- PROGRAM ARGS..." >&2; exit 2; }
root="$1" user="$2" env_file="$3" mounts_file="$4"
shift 5

mount -t proc proc "$root/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t tmpfs -o mode=0755,nosuid dev "$root/dev"
for node in null zero full random urandom tty; do
  touch "$root/dev/$node"
  mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir -p "$root/dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"

while IFS=$'\t' read -r source target mode; do
  [ -n "$source" ] || continue
  mkdir -p "$root$target"
  mount --bind "$source" "$root$target"
  [ "$mode" = ro ] && mount -o remount,bind,ro "$root$target"
done <"$mounts_file"

mapfile -d '' environment <"$env_file"
# The PATH container runtimes default to, then the container's variables.
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${environment[@]}" \
  /usr/sbin/chroot --userspec="$user" "$root" "$@"
