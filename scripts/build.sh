#!/usr/bin/env bash
# Configures and builds Sluice into build/ (Release) against the LibTorch 2.11
# that scripts/setup.sh installs (scripts/env.sh names it). Extra args go to
# the build tool, e.g. `scripts/build.sh sluice` builds only the CLI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/env.sh"
# ccache and precompiled headers: let ccache reuse objects built with the PCH.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cache="$root/build/CMakeCache.txt"
# A build tree configured against another LibTorch (an older checkout's) is configured afresh.
if [ -f "$cache" ] && ! grep -q "^Torch_DIR:PATH=$SLUICE_TORCH_ENV/" "$cache"; then
  echo "build: build/ was configured against another LibTorch; configuring again"
  rm -rf "$cache" "$root/build/CMakeFiles"
fi
if [ ! -f "$cache" ]; then
  cmake -S "$root" -B "$root/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$root/build" --parallel "$(nproc)" -- "$@"
