#!/usr/bin/env bash
# gpu-kit.sh — packs what tools/gpu-bench.sh needs on the project's GPU
# machine, which has an NVIDIA driver but no Vulkan loader, no -dev
# packages, no package registry and no ../shared: the binaries built here,
# their shared libraries and the Vulkan loader as one compressed archive
# (gpu_pack_kit), and the golden models.
#
#   tools/gpu-kit.sh          fills .gpu/ (git-ignored through
#                             .git/info/exclude), then run on the GPU machine,
#                             carrying .gpu:  bash tools/gpu-bench.sh
#
# KK_GPU_GOLDEN  golden models to carry (default: the llama256 quantized
#                family, every weight type the GPU kernels read)
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu-common.sh
SHARED=${KK_SHARED:-../shared}
GOLDEN=${KK_GPU_GOLDEN:-"llama256-Q8_0 llama256-Q4_0 llama256-Q4_K_M \
llama256-Q6_K llama256-Q5_0 llama256-F16 llama256-BF16"}

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
make -j"$(nproc)" build/kakeya build/tests/test_vulkan build/tests/test_vk_ops
rm -rf .gpu && mkdir -p .gpu/bin .gpu/shared/golden/models
cp build/kakeya build/tests/test_vulkan build/tests/test_vk_ops .gpu/bin/
gpu_pack_kit .gpu build/kakeya build/tests/test_vulkan build/tests/test_vk_ops

for m in $GOLDEN; do
    cp "$SHARED/golden/gen-$m.json" .gpu/shared/golden/
    cp "$SHARED/golden/models/$m.gguf" .gpu/shared/golden/models/
    if [ -d "$SHARED/golden/full_logits/$m" ]; then
        mkdir -p .gpu/shared/golden/full_logits
        cp -r "$SHARED/golden/full_logits/$m" .gpu/shared/golden/full_logits/
    fi
done
mkdir -p .gpu/shared/models
cp "$SHARED/models/aidreams260K-F32.gguf" .gpu/shared/models/
du -sh .gpu
