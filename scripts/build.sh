#!/usr/bin/env bash
# Configures and builds Sluice into build/ (Release). Extra args go to the build tool,
# e.g. `scripts/build.sh sluice` builds only the CLI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# ccache and precompiled headers: let ccache reuse objects built with the PCH.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$root/build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$root/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$root/build" --parallel "$(nproc)" -- "$@"
