#!/usr/bin/env bash
# Fails when any C++ source differs from .clang-format (Google base, 100 columns).
set -euo pipefail
clang_format=${1:-clang-format}
cd "$(dirname "$0")/.."
mapfile -t files < <(find include src tests bench fuzz \( -name '*.h' -o -name '*.cc' \) | sort)
"$clang_format" --dry-run --Werror "${files[@]}"
echo "format ok: ${#files[@]} files"
