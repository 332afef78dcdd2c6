#!/usr/bin/env bash
# Prints the Debian packages that own the shared libraries the given
# binaries load (one per line, sorted), so that an image's runtime stage
# installs exactly those. Fails when a library belongs to no package: such a
# binary would not start in the runtime image.
#
#   deploy/docker/runtime-packages.sh BINARY... > runtime-packages.txt
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 BINARY..." >&2; exit 2; }

owner() {  # owner PATH: the package that installed PATH (merged /usr aware)
  local path=$1 candidate
  for candidate in "$path" "$(realpath "$path")"; do
    for variant in "$candidate" "${candidate#/usr}" "/usr${candidate}"; do
      if out=$(dpkg-query -S "$variant" 2>/dev/null); then
        # "pkg:arch: /path" or "pkg1, pkg2: /path": the first owner.
        echo "${out%%: *}" | cut -d, -f1 | cut -d: -f1
        return 0
      fi
    done
  done
  echo "runtime-packages: no Debian package owns $path" >&2
  return 1
}

libs=$(for bin in "$@"; do
  if ldd "$bin" | grep -q "not found"; then
    echo "runtime-packages: $bin has unresolved libraries:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u)
for lib in $libs; do owner "$lib"; done | sort -u
