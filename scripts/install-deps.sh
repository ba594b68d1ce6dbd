#!/usr/bin/env bash
# Installs the Debian packages tilec builds with. Quietly does nothing when
# they are all present; otherwise needs root (or sudo) and Debian's mirrors.
set -euo pipefail

# clang-14 and libclang-rt-14-dev (libFuzzer's runtime and the sanitizers,
# what -fsanitize=fuzzer links) build the fuzz targets (scripts/fuzz.sh).
# libopenblas-dev multiplies the reference executor's GEMMs that have no FP8
# operand (kernels/blas.h); its pthread variant's headers are the ones
# //third_party/system:openblas compiles against. libtcmalloc-minimal4 is
# the malloc every tool links (//third_party/system:tcmalloc).
packages=(
  bazel-bootstrap
  bazel-rules-java
  chromium
  clang-14
  flatbuffers-compiler
  g++
  libflatbuffers-dev
  libclang-rt-14-dev
  libgflags-dev
  libgmock-dev
  libgoogle-glog-dev
  libgtest-dev
  libonnx-dev
  libonnx-testdata
  libopenblas-dev
  libopenblas-pthread-dev
  libprotobuf-dev
  libtcmalloc-minimal4
  nlohmann-json3-dev
  python3
)

# One dpkg-query for all of them: scripts/run.sh asks on every run.
declare -A installed=()
while read -r p; do
  installed[$p]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null |
  awk '/ install ok installed$/ { print $1 }')
missing=()
for p in "${packages[@]}"; do
  [ -n "${installed[$p]:-}" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
