#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries BINARY... load
# (ldd, links resolved, then dpkg -S), one a line, sorted. build.sh compares
# this with deploy/docker/runtime-packages/IMAGE.txt, so each image carries
# the packages its binaries need. Libraries under a --bundled folder are
# copied into the image instead (the CUDA wheels) and are skipped.
#   deploy/docker/runtime_packages.sh [--bundled DIR]... BINARY...
set -euo pipefail
export LC_ALL=C # the order install_packages.sh compares in

bundled=()
while [ "${1:-}" = --bundled ]; do
  bundled+=("$(readlink -f "$2")")
  shift 2
done
[ $# -gt 0 ] || { echo "usage: runtime_packages.sh [--bundled DIR]... BINARY..." >&2; exit 2; }

libraries() {
  local binary out
  for binary in "$@"; do
    out="$(ldd "$binary")" || { echo "runtime_packages.sh: ldd $binary failed" >&2; return 1; }
    if grep -q 'not found' <<<"$out"; then
      echo "runtime_packages.sh: $binary: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')" >&2
      return 1
    fi
    # "libx.so.1 => /path (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
  done
}

owners() {
  local lib real owner dir
  while read -r lib; do
    real="$(readlink -f "$lib")"
    for dir in "${bundled[@]}"; do
      [[ "$real" == "$dir"/* ]] && continue 2
    done
    # usrmerge: dpkg may know the file under /lib rather than /usr/lib.
    owner="$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null)" ||
      { echo "runtime_packages.sh: no Debian package holds $real ($lib)" >&2; return 1; }
    echo "${owner%%:*}"
  done
}

libs="$(libraries "$@")"
packages="$(sort -u <<<"$libs" | owners)"
sort -u <<<"$packages"
