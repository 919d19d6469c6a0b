#!/usr/bin/env bash
# The presets (CMakePresets.json) build with Ninja. A build directory configured earlier with another
# generator (before they did: Unix Makefiles) makes CMake stop with "generator ... does not match";
# this removes such a directory (its nested package-test builds hold caches of the old generator too)
# so that the next configure starts it afresh.
# Usage: cmake/clear_stale_build.sh BUILD_DIR...
set -euo pipefail
for dir in "$@"; do
  cache=$dir/CMakeCache.txt
  [ -f "$cache" ] || continue
  if ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache"; then
    echo "rotary: $dir was configured with another generator; removing it"
    rm -rf "$dir"
  fi
done
