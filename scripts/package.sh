#!/usr/bin/env bash
# Builds qrepack's Debian packages (cmake/package.cmake) in build/package:
#   qrepack_<version>-1_<arch>.deb         the binary, man page, completions, docs
#   libqrepack-dev_<version>-1_<arch>.deb  the static library, headers, CMake package, qrepack.pc
# Usage: scripts/package.sh [BUILD_DIR]   (make package; make test runs it before ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build/package}"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DQREPACK_BUILD_TESTS=OFF -DQREPACK_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j "$(nproc)" --target qrepack_cli qrepack qrepack_docs
rm -f "$dir"/*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/*.deb
