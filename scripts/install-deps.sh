#!/usr/bin/env bash
# Installs the Debian packages tbmfs needs to build, test and demo, when any
# is missing. Safe to run again: it does nothing once everything is there.
set -euo pipefail

packages=(
    gcc pkg-config meson ninja-build
    libfuse3-dev fuse3 libjson-c-dev libopenblas-dev libcmocka-dev zlib1g-dev
    libcurl4-openssl-dev nginx
    python3 python3-numpy python3-pil python3-torch
    clang libclang-rt-14-dev attr
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
