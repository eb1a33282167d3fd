#!/usr/bin/env bash
# Builds qrepack's Debian packages (cmake/package.cmake) from the release build
# (scripts/build-release.sh: the tree make demo and make bench use, so nothing is compiled twice)
# into OUT_DIR:
#   qrepack_<version>-1_<arch>.deb         the binary, man page, completions, docs
#   libqrepack-dev_<version>-1_<arch>.deb  the static library, headers, CMake package, qrepack.pc
# Usage: scripts/package.sh [OUT_DIR [RELEASE_DIR]]   (defaults build/package build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build/package}")
dir="${2:-build/release}"
bash scripts/build-release.sh "$dir" package
mkdir -p "$out"
rm -f "$out"/*.deb
(cd "$dir" && cpack -G DEB -B "$out" >/dev/null)
rm -rf "$out/_CPack_Packages"
ls "$out"/*.deb
