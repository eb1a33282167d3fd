#!/usr/bin/env bash
# The release build that make demo, make bench, make package and make test share (one tree, one
# compile): g++ 12, Release, -Werror, installed under /usr when packaged (so GNUInstallDirs
# picks Debian's multiarch library directory; `cmake --install DIR --prefix P` still works).
# usage: scripts/build-release.sh DIR [package]   (package: only what the .debs hold)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: build-release.sh DIR [package]}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DQREPACK_WERROR=ON -DQREPACK_BUILD_TESTS=OFF -DQREPACK_BUILD_BENCH=ON >/dev/null
if [ "${2:-}" = package ]; then
  cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target qrepack_cli qrepack qrepack_docs
else
  cmake --build "$dir" -j "${JOBS:-$(nproc)}"
fi
