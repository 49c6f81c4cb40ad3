#!/usr/bin/env bash
# gpu-bench.sh — the Vulkan backend on a real GPU, in one call: the Vulkan
# tests (golden models, speculative = plain, ring = full cache,
# checkpoints), then benchmarks of random-weight models of real shapes and
# of the default models, CPU and Vulkan side by side.
#
#   tools/gpu-kit.sh                      here: packs .gpu/ (binaries,
#                                         libraries, Vulkan loader, goldens)
#   OUT=DIR BANDWIDTH=GBS tools/gpu-bench.sh   there, carrying .gpu
#
# Through the device tool, whose calls bring back at most 8 files:
#   KK_PACK_LOGS=$OUT/gpu-logs.tgz OUT=/tmp/gb BANDWIDTH=4800 \
#       bash tools/gpu-bench.sh
#
# OUT        where the logs and JSON reports go (default build/gpu-bench)
# BANDWIDTH  the GPU's memory bandwidth in GB/s, for the roofline (H200:
#            4800, H100 SXM: 3350); without it no roofline is reported
# KK_GPU_MODELS  shapes to benchmark (default "smollm2-360m llama3.2-1b")
# KK_PACK_LOGS   also pack every log into this one .tar.gz
# KK_GPU_CPU_BENCH=0  skip the CPU benchmarks of the shapes
# KK_GPU_SPEC=0  skip speculative vs plain on the default models (~3 min)
# KK_GPU_PROFILE=1  also time every dispatch of each shape's quick bench
#                (KAKEYA_VK_PROFILE=1; the table is in profile-SHAPE.err)
# KK_GPU_CONTEXT  a second bench of each shape on the GPU after a prompt of
#                this many tokens (default 4096; 0: none), where attention
#                weighs more (bench-vulkan-SHAPE-ctxN)
#
# With .gpu/ present the binaries and libraries come from it; otherwise the
# script builds here (a machine with the -dev packages). NVIDIA's stock ICD
# file names the GLX library, which needs a display; a headless machine
# reaches the same driver through its EGL library, so the script points
# the loader at an ICD file naming that one.
#
# Every step writes its own file under OUT; a failing step is reported and
# the rest still run, so one call gives everything there is to give.
set -u
cd "$(dirname "$0")/.."
. tools/gpu-common.sh
OUT=${OUT:-build/gpu-bench}
BW=${BANDWIDTH:-}
MODELS=${KK_GPU_MODELS:-"smollm2-360m llama3.2-1b"}
THREADS=$(nproc)
mkdir -p "$OUT" build/gpu-models
status=0

if [ -f .gpu/kit.tar.xz ]; then
    gpu_unpack_kit .gpu/kit.tar.xz /tmp/kk || exit 1
    K=/tmp/kk/bin/kakeya T=/tmp/kk/bin/test_vulkan O=/tmp/kk/bin/test_vk_ops
    export KK_SHARED=.gpu/shared
else
    make -j"$THREADS" build/kakeya build/tests/test_vulkan \
        build/tests/test_vk_ops || exit 1
    K=build/kakeya T=build/tests/test_vulkan O=build/tests/test_vk_ops
fi
gpu_use_nvidia_icd
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
    > "$OUT/gpu.txt" 2>&1 || true

step() { # name, command...: runs one step, logs it, remembers a failure
    local name=$1; shift
    echo "== $name: $*"
    local t0=$SECONDS
    if "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; then
        echo "   ok ($((SECONDS - t0)) s)"
    else
        echo "   FAILED ($((SECONDS - t0)) s); last lines:"
        tail -n 15 "$OUT/$name.txt" "$OUT/$name.err" | sed 's/^/   | /'
        status=1
    fi
}

step devices "$K" info --devices
step test_vk_ops "$O"
step test_vulkan env KK_BIN="$K" "$T"

bw_args=()
[ -n "$BW" ] && bw_args=(--bandwidth "$BW")
for shape in $MODELS; do
    f=build/gpu-models/$shape-q8_0.gguf
    [ -f "$f" ] || "$K" mkmodel --shape "$shape" --type Q8_0 -o "$f" \
        > /dev/null || { echo "mkmodel $shape failed"; status=1; continue; }
    step "bench-vulkan-$shape" "$K" bench -m "$f" --backend vulkan \
        "${bw_args[@]}"
    [ "${KK_GPU_CONTEXT:-4096}" != 0 ] &&
        step "bench-vulkan-$shape-ctx${KK_GPU_CONTEXT:-4096}" "$K" bench \
            -m "$f" --backend vulkan --context "${KK_GPU_CONTEXT:-4096}" \
            "${bw_args[@]}"
    [ "${KK_GPU_PROFILE:-0}" = 1 ] &&
        step "profile-$shape" env KAKEYA_VK_PROFILE=1 "$K" bench -m "$f" \
            --backend vulkan --quick "${bw_args[@]}"
    [ "${KK_GPU_CPU_BENCH:-1}" = 0 ] ||
        step "bench-cpu-$shape" "$K" bench -m "$f" --backend cpu \
            -t "$THREADS" --quick
done

# The default model alone: c(L) on the GPU.
if [ -f data/models/kakeya-chat.gguf ]; then
    step bench-vulkan-kakeya-chat "$K" bench -m data/models/kakeya-chat.gguf \
        --backend vulkan "${bw_args[@]}"
fi

# Speculative vs plain on the default models, on the GPU.
if [ -f data/models/kakeya-chat.gguf ] && [ "${KK_GPU_SPEC:-1}" != 0 ]; then
    step bench-spec-vulkan "$K" bench --backend vulkan \
        --spec-model data/models/kakeya-chat.gguf \
        --draft data/models/kakeya-draft.gguf
fi

# One summary line per report, so the log alone tells the story.
for j in "$OUT"/bench-*.txt; do
    [ -f "$j" ] || continue
    python3 - "$j" <<'EOF' 2>/dev/null || true
import json, sys
p = sys.argv[1]
try:
    r = json.load(open(p))
except Exception:
    sys.exit(0)
e = r.get("engine")
if e:
    c = {v["L"]: v["c"] for v in e.get("verify_cost", [])}
    print(f"{p}: after {e.get('prefill_tokens', 0)} positions, decode"
          f" {e['decode_tok_per_s']:.1f} tok/s"
          f" ({100 * e.get('decode_share_of_roofline', 0):.1f}% of roofline"
          f" {e.get('roofline_tok_per_s', 0):.0f}), prefill"
          f" {e['prefill_tok_per_s']:.0f} tok/s, c(2) {c.get(2, 0):.2f}"
          f" c(4) {c.get(4, 0):.2f} c(8) {c.get(8, 0):.2f}"
          f" c(16) {c.get(16, 0):.2f}")
    for key, what in (("decode_sampled", "drawn on the host"),
                      ("decode_sampled_in_pass", "drawn in the pass")):
        d = e.get(key)
        if d:
            print(f"{p}: sampled (temperature {d['temperature']}, top-p"
                  f" {d['top_p']}), {what}: decode {d['tok_per_s']:.1f}"
                  f" tok/s, a step {d['median_over_logits']:.2f}x the step"
                  f" with logits alone")
    g = {v["L"]: v["c"] for v in e.get("verify_cost_greedy", [])}
    if g:
        print(f"{p}: greedy (argmax rows): decode"
              f" {e['decode_greedy_tok_per_s']:.1f} tok/s, c(2)"
              f" {g.get(2, 0):.2f} c(4) {g.get(4, 0):.2f} c(8)"
              f" {g.get(8, 0):.2f} c(16) {g.get(16, 0):.2f}")
s = r.get("speculative")
if s:
    print(f"{p}: {json.dumps(s)[:1500]}")
EOF
done
# A device call brings back few files: one archive of them all, on asking.
if [ -n "${KK_PACK_LOGS:-}" ]; then
    tar -C "$OUT" --exclude="$(basename "$KK_PACK_LOGS")" -czf "$KK_PACK_LOGS" . &&
        echo "logs: $KK_PACK_LOGS"
fi
exit $status
