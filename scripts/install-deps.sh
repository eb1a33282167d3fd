#!/usr/bin/env bash
# Installs the Debian packages qrepack needs to build, test, benchmark and run its demo.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

packages=(
  g++ cmake make pkg-config git
  nlohmann-json3-dev   # strict JSON (safetensors headers, index, config.json, manifests)
  libcli11-dev         # command-line parsing
  libfmt-dev           # formatting of tables and messages
  libhwy-dev           # SIMD kernels with dynamic dispatch
  libxxhash-dev        # xxhash64 checksums in manifests
  libre2-dev           # linear-time regular expressions for every name a user or file supplies
  zlib1g-dev           # crc32 for torch .pt zip records
  libssl-dev           # SHA-256 (libcrypto) of staged shards, as the engine's meta files record
  libcurl4-openssl-dev # remote sources (hf://, https://): HTTP/1.1 and HTTP/2 range requests
  nginx-light          # the loopback model hub the remote-source tests and bench stand up
  libgtest-dev libgmock-dev
  libbenchmark-dev
  clang-format         # the format check that runs inside `make test`
  clang-14 libclang-rt-14-dev  # libFuzzer targets (fuzz/), a short pass of which runs in `make test`
  python3-numpy python3-torch  # interoperability tests against Debian's real PyTorch only
  parallel             # the tested GNU parallel example of a sharded conversion
  dpkg-dev             # make package: dpkg-shlibdeps for the .deb's Depends, dpkg-architecture
  groff-base zsh       # the package test renders the man page and loads the zsh completion
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 3; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
