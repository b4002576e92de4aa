#!/usr/bin/env bash
# Installs what is missing, builds tbmfs, writes a small llama-like sample
# model and mounts it, then shows what to try. Unmount with the printed command.
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
/usr/bin/python3 scripts/gen_model.py llama "$demo/llama.tbm"
build/src/tbmfs "$demo/llama.tbm" "$mnt"

t="$mnt/tensors/model.layers.0.self_attn.q_proj.weight"
cat <<MSG
Mounted $demo/llama.tbm on $mnt. Try:

  ls -R $mnt | head -30
  jq . $mnt/model.json
  jq '{name, shape, dtype, nm_n, nm_m, kept, density, problems}' $t/header.json
  cat $t/selftest
  cat $mnt/selftest
  /usr/bin/python3 -c "import numpy as np; a = np.load('$t/dense.npy', mmap_mode='r'); print(a.shape, a[:2, :8])"
  rm -rf /tmp/q_proj && cp -r $t /tmp/q_proj && ls -l /tmp/q_proj
  $PWD/build/src/tbmfs --check $demo/llama.tbm

Unmount with:  fusermount3 -u $mnt
MSG
