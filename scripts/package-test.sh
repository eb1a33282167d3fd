#!/usr/bin/env bash
# Installs qrepack's Debian packages (scripts/package.sh) into a scratch root with dpkg -x and
# uses them as a user would: the package metadata and contents, every installed public header
# compiled alone against the installed tree, a consumer program built with find_package(qrepack)
# and with pkg-config, converting through the library byte-identically to the installed
# binary, the binary's --version and inspect, the man page, and the bash and zsh completions.
# Usage: scripts/package-test.sh [PACKAGE_BUILD_DIR]   (a ctest test of make test)
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD"
pkgdir="${1:-build/package}"
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
trap 'echo "package-test: FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR

bin_deb=$(ls "$pkgdir"/qrepack_*.deb 2>/dev/null | sed -n 1p)
dev_deb=$(ls "$pkgdir"/libqrepack-dev_*.deb 2>/dev/null | sed -n 1p)
[ -n "$bin_deb" ] && [ -n "$dev_deb" ] || fail "no packages in $pkgdir (run scripts/package.sh)"
work=$(mktemp -d /tmp/qrepack-package-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
root="$work/root"

# --- metadata: the binary's shared libraries from dpkg-shlibdeps, the -dev package's Debian
# -dev packages, sections, a maintainer, and the files each must carry.
depends=$(dpkg-deb -f "$bin_deb" Depends)
for lib in libfmt9 libhwy1 libre2-9 libxxhash0 zlib1g libssl3 libcurl4 libstdc++6 libc6; do
  [[ "$depends" == *"$lib "* || "$depends" == *"$lib," || "$depends" == *"$lib" ]] ||
    fail "qrepack Depends lacks $lib: $depends"
done
dev_depends=$(dpkg-deb -f "$dev_deb" Depends)
for pkg in libfmt-dev libhwy-dev libre2-dev libxxhash-dev zlib1g-dev libssl-dev libcurl4-openssl-dev pkg-config; do
  [[ "$dev_depends" == *"$pkg"* ]] || fail "libqrepack-dev Depends lacks $pkg: $dev_depends"
done
[ "$(dpkg-deb -f "$bin_deb" Section)" = science ] || fail "qrepack Section"
[ "$(dpkg-deb -f "$dev_deb" Section)" = libdevel ] || fail "libqrepack-dev Section"
[[ "$(dpkg-deb -f "$bin_deb" Maintainer)" == *"<"*"@"*">" ]] || fail "Maintainer has no address"
synopsis=$(dpkg-deb -f "$bin_deb" Description | sed -n 1p)
[ ${#synopsis} -le 80 ] || fail "Description synopsis longer than 80 characters: $synopsis"

bin_files=$(dpkg-deb -c "$bin_deb" | awk '{print $2 " " $6}')
for f in ./usr/bin/qrepack ./usr/share/man/man1/qrepack.1.gz \
  ./usr/share/bash-completion/completions/qrepack ./usr/share/zsh/vendor-completions/_qrepack \
  ./usr/share/doc/qrepack/copyright ./usr/share/doc/qrepack/changelog.Debian.gz \
  ./usr/share/doc/qrepack/README.md; do
  grep -q " $f\$" <<<"$bin_files" || fail "qrepack lacks $f"
done
[ -z "$(grep -v "^root/root " <<<"$bin_files")" ] || fail "files not owned by root"
dev_files=$(dpkg-deb -c "$dev_deb" | awk '{print $6}')
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
for f in ./usr/lib/$multiarch/libqrepack.a ./usr/lib/$multiarch/pkgconfig/qrepack.pc \
  ./usr/lib/$multiarch/cmake/qrepack/qrepackConfig.cmake \
  ./usr/lib/$multiarch/cmake/qrepack/qrepackConfigVersion.cmake \
  ./usr/include/qrepack/exec/convert.h ./usr/share/doc/libqrepack-dev/copyright; do
  grep -qx "$f" <<<"$dev_files" || fail "libqrepack-dev lacks $f"
done

dpkg -x "$bin_deb" "$root"
dpkg -x "$dev_deb" "$root"
usr="$root/usr"
qrepack="$usr/bin/qrepack"

# --- the public headers: each compiles alone against the installed tree, and none includes a
# dependency the library links privately.
if grep -rlE '#include *[<"](nlohmann|re2|hwy|xxhash|zlib|CLI)' "$usr/include/qrepack"; then
  fail "a public header includes a private dependency (listed above)"
fi
find "$usr/include/qrepack" -name '*.h' | sort >"$work/headers"
[ "$(wc -l <"$work/headers")" -ge 40 ] || fail "too few installed headers"
export usr
xargs -P "$(nproc)" -I{} sh -c \
  'echo "#include \"{}\"" | g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only \
     -I"$usr/include" -x c++ - || { echo "header does not compile alone: {}" >&2; exit 255; }' \
  <"$work/headers" || fail "a public header does not compile alone"

# --- the installed binary.
"$qrepack" --version >"$work/version" || fail "--version"
grep -q "^qrepack 0\." "$work/version" || fail "--version: $(head -1 "$work/version")"
grep -q "^SIMD target dispatched: " "$work/version" || fail "--version names no SIMD target"
"$qrepack" fixture moe-fp8 -o "$work/fx" >/dev/null || fail "fixture moe-fp8"
"$qrepack" inspect "$work/fx" >"$work/inspect" || fail "inspect"
grep -q "glm_moe_dsa\|GLM" "$work/inspect" || fail "inspect did not recognise the fixture"
"$qrepack" convert "$work/fx" -o "$work/cli-out" >/dev/null || fail "convert"

# --- a consumer through find_package(qrepack): the same conversion, byte for byte.
cmake -S "$src/tests/package" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$usr" \
  -DCMAKE_BUILD_TYPE=Release >"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "consumer configure"; }
grep -q "qrepack_DIR.*$root" "$work/consumer/CMakeCache.txt" || fail "consumer found another qrepack"
cmake --build "$work/consumer" -j "$(nproc)" >>"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log"; fail "consumer build"; }
"$work/consumer/qrepack_consumer" "$work/lib-fx" "$work/lib-out" >"$work/consumer.out" ||
  fail "consumer run: $(cat "$work/consumer.out")"
grep -q "^consumer: .* outputs in .* load$" "$work/consumer.out" || fail "consumer output"
for f in "$work"/cli-out/*.safetensors; do
  cmp -s "$f" "$work/lib-out/$(basename "$f")" || fail "library and binary differ: $(basename "$f")"
done
[ "$(ls "$work"/lib-out/*.safetensors | wc -l)" = "$(ls "$work"/cli-out/*.safetensors | wc -l)" ] ||
  fail "library and binary wrote different shard counts"

# --- the same consumer through pkg-config (qrepack.pc finds its prefix from its location).
export PKG_CONFIG_PATH="$usr/lib/$multiarch/pkgconfig"
[ "$(pkg-config --modversion qrepack)" = "$(sed -n 's/^qrepack //p' "$work/version")" ] ||
  fail "qrepack.pc version differs from --version"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 -o "$work/consumer-pc" "$src/tests/package/consumer.cc" \
  $(pkg-config --cflags --libs qrepack) || fail "pkg-config consumer build"
[[ "$(pkg-config --cflags qrepack)" == *"$root"* ]] || fail "qrepack.pc is not relocatable"
"$work/consumer-pc" "$work/pc-fx" "$work/pc-out" >/dev/null || fail "pkg-config consumer run"
for f in "$work"/lib-out/*.safetensors; do
  cmp -s "$f" "$work/pc-out/$(basename "$f")" || fail "pkg-config consumer differs: $(basename "$f")"
done

# --- the man page: renders without a warning, names every command.
zcat "$usr/share/man/man1/qrepack.1.gz" >"$work/qrepack.1"
groff -man -Tutf8 -ww -z "$work/qrepack.1" 2>"$work/groff.err" || fail "groff failed"
[ ! -s "$work/groff.err" ] || fail "groff warnings: $(head -3 "$work/groff.err")"
sed 's/\\-/-/g' "$work/qrepack.1" >"$work/qrepack.1.txt"
for cmd in convert merge check-load verify eval oracle validate check fixture inspect reshard; do
  grep -q "^\.SS qrepack $cmd\$" "$work/qrepack.1.txt" || fail "man page lacks $cmd"
done
grep -q 'QREPACK_FORCE_TARGET' "$work/qrepack.1" || fail "man page lacks the environment"

# --- bash completion: subcommands, options, schemes, presets, family fixtures.
complete_words() {  # complete_words WORD... : what bash offers for the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _qrepack;
           printf "%s\n" "${COMPREPLY[@]}"' _ "$usr/share/bash-completion/completions/qrepack" "$@"
}
offers() {  # offers EXPECTED WORD... : bash offers EXPECTED for the last word
  local expected="$1" offered
  shift
  offered=$(complete_words "$@")
  grep -qx -- "$expected" <<<"$offered" || fail "bash offers no $expected after '$*': $offered"
}
offers convert qrepack con
offers --to qrepack convert --t
offers int4-g128 qrepack convert SRC --to int4-g1
offers fp8-passthrough qrepack convert SRC --to fp8
offers count qrepack fixture moe-fp8 --preset c
offers qwen3-moe qrepack fixture q
offers zsh qrepack completion z

# --- zsh completion: parses, and completes subcommands, schemes, presets and families.
if command -v zsh >/dev/null; then
  zsh -n "$usr/share/zsh/vendor-completions/_qrepack" || fail "zsh: syntax"
  grep -q "fp8-passthrough" "$usr/share/zsh/vendor-completions/_qrepack" || fail "zsh: schemes"
  # A real completion: an interactive zsh on a pseudo-terminal (zpty) loads _qrepack through
  # compinit and completes a line; compadd is wrapped to record the candidates it is given.
  cat >"$work/zcap.zsh" <<'ZSH'
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT="
zpty -w z "fpath=($1 \$fpath); autoload -U compinit; compinit -u -d $2/.zcompdump"
zpty -w z "bindkey '^I' complete-word"
zpty -w z "zstyle ':completion:*' list-grouped false; zstyle ':completion:*' insert-tab false"
zpty -w z 'compadd () { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi; typeset -a __hits; builtin compadd -A __hits "$@"; (( $#__hits )) && print -l -- ${__hits} >> '"$2"'/zsh.out; builtin compadd "$@" }'
zpty -w z "$3"$'\t'
for i in {1..100}; do [[ -s $2/zsh.out ]] && break; sleep 0.1; done
sleep 0.5
zpty -d z
ZSH
  zsh_offers() {  # zsh_offers EXPECTED LINE : zsh completes LINE with EXPECTED among the candidates
    rm -f "$work/zsh.out"
    timeout 30 zsh -f "$work/zcap.zsh" "$usr/share/zsh/vendor-completions" "$work" "$2" \
      >/dev/null 2>&1 || true
    grep -qx -- "$1" "$work/zsh.out" 2>/dev/null ||
      fail "zsh offers no $1 for '$2': $(tr '\n' ' ' <"$work/zsh.out" 2>/dev/null)"
  }
  zsh_offers convert "qrepack con"
  zsh_offers int4-g128 "qrepack convert x --to int4-g1"
  zsh_offers count "qrepack fixture moe-fp8 --preset "
  zsh_offers qwen3-moe "qrepack fixture q"
else
  fail "zsh is not installed (scripts/install-deps.sh installs it)"
fi
echo "package-test: ok ($(basename "$bin_deb"), $(basename "$dev_deb"))"
