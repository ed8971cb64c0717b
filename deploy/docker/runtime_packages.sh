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

# owners < LIBRARIES: the package of each library. One dpkg -S for all (one
# per library takes minutes); usrmerge: dpkg may know a file under /lib
# rather than /usr/lib, so what is not found is asked again without /usr.
owners() {
  local lib real dir found missing=()
  declare -A path_of=()
  while read -r lib; do
    real="$(readlink -f "$lib")"
    for dir in "${bundled[@]}"; do
      [[ "$real" == "$dir"/* ]] && continue 2
    done
    path_of["$real"]="$lib"
  done
  [ ${#path_of[@]} -gt 0 ] || return 0
  found=$'\n'"$(dpkg -S "${!path_of[@]}" 2>/dev/null || true)"$'\n'
  for real in "${!path_of[@]}"; do
    [[ "$found" == *": $real"$'\n'* ]] || missing+=("$real")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    found+="$(dpkg -S "${missing[@]#/usr}" 2>/dev/null || true)"$'\n'
    for real in "${missing[@]}"; do
      [[ "$found" == *": ${real#/usr}"$'\n'* ]] ||
        { echo "runtime_packages.sh: no Debian package holds $real (${path_of[$real]})" >&2; return 1; }
    done
  fi
  # "pkg:arch: /path" or "pkg1, pkg2: /path" (a file two packages share).
  sed -n 's/^\(.*\): \/.*$/\1/p' <<<"$found" | tr ',' '\n' | sed 's/:.*//; s/^ *//'
}

libs="$(libraries "$@")"
packages="$(sort -u <<<"$libs" | owners)"
sort -u <<<"$packages"
