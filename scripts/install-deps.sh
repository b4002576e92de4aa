#!/usr/bin/env bash
# Installs the Debian packages tbmfs needs to build, test and demo, when any
# is missing. Safe to run again: it does nothing once everything is there.
set -euo pipefail

packages=(
    gcc pkg-config meson ninja-build
    libfuse3-dev fuse3 libjson-c-dev libopenblas-dev libcmocka-dev zlib1g-dev
    libcurl4-openssl-dev nginx
    python3 python3-numpy python3-pil python3-torch python3-boto3
    clang libclang-rt-14-dev attr
    nodejs rclone openssl
)

# The S3 tests' signing server, from npm (which comes with the nodejs package), pinned,
# outside the source tree.
S3RVER_DIR=${TBMFS_S3RVER:-/opt/tbmfs-test/s3rver}
S3RVER_PKG=@20minutes/s3rver@5.0.0
install_s3rver() {
    [ -f "$S3RVER_DIR/node_modules/@20minutes/s3rver/package.json" ] && return 0
    echo "installing: $S3RVER_PKG into $S3RVER_DIR"
    mkdir -p "$S3RVER_DIR"
    for try in 1 2; do
        timeout 300 npm install --no-audit --no-fund --loglevel=error --prefix "$S3RVER_DIR" \
            "$S3RVER_PKG" && return 0
        echo "npm install of $S3RVER_PKG failed (try $try)" >&2
    done
    return 1
}

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
    echo "installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
install_s3rver
