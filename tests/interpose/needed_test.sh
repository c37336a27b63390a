#!/usr/bin/env bash
# libvramtrace.so is preloaded into every process of a tree: it must need nothing but libc and
# the loader (zstd and CUPTI are dlopen'd, libstdc++ and libgcc linked in). Checks readelf -d.
#   needed_test.sh LIBRARY
set -euo pipefail
needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
other=$(tr ' ' '\n' <<<"$needed" | grep -Ev '^(libc\.so\.6|ld-linux[-a-z0-9_.]*\.so\.[0-9]+)?$' || true)
if [[ -n "$other" || " $needed" != *" libc.so.6 "* ]]; then
  echo "FAIL: $1 needs: $needed(only libc.so.6 and the loader are allowed)"
  exit 1
fi
echo "ok: $1 needs $needed"
