#!/usr/bin/env bash
# gpu-ab.sh — measures a change to the Vulkan backend on the project's GPU
# machine the way its README figures were measured: the binary before the
# change and the one after, `kakeya bench` on a random-weight model of a
# real shape, alternately, several rounds, in one device call. Single runs
# on a freshly started GPU vary by ±3%, more than most changes are worth;
# alternating cancels the drift, and the rounds show the spread.
#
#   tools/gpu-ab.sh pack [REV]   here: builds REV (default HEAD) in a
#                                scratch worktree as kakeya-base and the
#                                working tree as kakeya, and packs both,
#                                test_vk_ops and the libraries into .gpu-ab/
#                                (git-ignored through .git/info/exclude)
#   bash tools/gpu-ab.sh run     there, carrying .gpu-ab
#
# pack's settings, NAME=... entries separated by spaces, each packed as
# bin/NAME for VARIANTS to name:
#   EXTRA_REVS  NAME=REV: further revisions (say, commits on a throwaway
#               branch), each built clean in a scratch worktree as the
#               base is; the safe way to compare variants of a shader.
#               Each revision's test_vk_ops comes along as
#               bin/test_vk_ops-NAME, the base's as test_vk_ops-kakeya-base
#   EXTRA_BINS  NAME=PATH: kakeya binaries built elsewhere, as they are
#               (a copied build/ directory keeps the shaders it was built
#               with unless they are rebuilt)
#
# run's settings (environment):
#   VARIANTS  NAME:BINARY:ENV entries separated by spaces (default
#             "base:kakeya-base: new:kakeya:"); ENV is VAR=VALUE pairs
#             joined by commas, for variants that differ by a setting
#             rather than a build
#   ROUNDS    rounds, each benchmarking every variant once (default 4)
#   MODELS    the models, separated by spaces: shapes for `kakeya mkmodel`
#             (Q8_0) or .gguf files of the tree (default llama3.2-1b);
#             every round benchmarks every variant on each
#   BANDWIDTH the GPU's bandwidth in GB/s, for the roofline (default 4800)
#   BENCH_ARGS further arguments for every bench (e.g. "--context 4096")
#   TESTS=1   run test_vk_ops on the GPU first, this tree's and each
#             revision's (a variant's shaders are checked by its own
#             tests; an EXTRA_BINS entry named test_vk_ops-NAME is run
#             too); with KK_TEST_FILTER (a cmocka pattern, say
#             "test_sample*") only the tests it names (all of test_vk_ops
#             takes over 90 s on the H200, once per binary)
#   PROFILE   variants (as VARIANTS) to time per dispatch afterwards
#             (KAKEYA_VK_PROFILE=1, a --quick bench on the first model)
#   STATS     with PROFILE: a pattern (grep -E) of pipelines whose driver
#             statistics (registers, spills as local memory, shared
#             memory) each profile prints too, say
#             STATS="matmul_chain|matmul_one": a variant's register count
#             is often the first thing to know, and the profiles' files
#             are deleted once packed into all.tgz
#   OUT       where the reports go (default /tmp/gpu-ab); they are packed
#             into OUT/all.tgz, since a device call brings back few files
#
# Each bench prints a line: decode tok/s, the median ms a token, prefill,
# and verify times for L = 1, 2, 4, 8, 16; and, where the binary measures
# them, a second line with the same for greedy decoding (only each row's
# argmax coming back).
set -u
cd "$(dirname "$0")/.."
. tools/gpu-common.sh
KIT=.gpu-ab

# Builds REV's kakeya and test_vk_ops in a scratch worktree and copies
# them to DEST and test_vk_ops-NAME beside it (NAME: DEST's file name): a
# clean build, so nothing of this tree's build/ (shaders compiled from
# other sources) comes along.
build_rev() { # REV DEST
    local scratch ok=1
    scratch=$(mktemp -d)
    if ! git worktree add -q --detach "$scratch/tree" "$1"; then
        echo "gpu-ab: cannot check out $1 (a commit, branch or tag?)" >&2
        rm -rf "$scratch"
        return 1
    fi
    if make -C "$scratch/tree" -j"$(nproc)" build/kakeya \
        build/tests/test_vk_ops > "$scratch/build.log" 2>&1; then
        cp "$scratch/tree/build/kakeya" "$2" &&
            cp "$scratch/tree/build/tests/test_vk_ops" \
                "$(dirname "$2")/test_vk_ops-$(basename "$2")" || ok=0
    else
        echo "gpu-ab: $1 does not build:" >&2
        tail -n 20 "$scratch/build.log" >&2
        ok=0
    fi
    git worktree remove --force "$scratch/tree"
    rm -rf "$scratch"
    [ "$ok" = 1 ]
}

# The binaries into $KIT/bin: this tree's, REV's as kakeya-base, and the
# extras.
pack_bins() { # REV
    local extra
    mkdir -p "$KIT/bin" &&
        cp build/kakeya build/tests/test_vk_ops "$KIT/bin/" &&
        build_rev "$1" "$KIT/bin/kakeya-base" || return 1
    for extra in ${EXTRA_REVS:-}; do
        build_rev "${extra#*=}" "$KIT/bin/${extra%%=*}" || return 1
    done
    for extra in ${EXTRA_BINS:-}; do
        cp "${extra#*=}" "$KIT/bin/${extra%%=*}" || return 1
    done
}

# A pack that fails leaves no kit at all: neither an older one to be run
# by mistake nor loose binaries for a device call to carry.
pack() {
    local rev=${1:-HEAD} exclude
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$KIT/" "$exclude" 2>/dev/null || echo "/$KIT/" >> "$exclude"
    make -j"$(nproc)" build/kakeya build/tests/test_vk_ops || return 1
    rm -rf "$KIT"
    if ! pack_bins "$rev" ||
       ! gpu_pack_kit "$KIT" build/kakeya build/tests/test_vk_ops; then
        rm -rf "$KIT"
        return 1
    fi
    du -sh "$KIT"
}

# One bench report as one line.
summary() { # report, label
    python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    e = json.load(open(sys.argv[1]))["engine"]
except Exception as x:
    print(f"[{sys.argv[2]}] no result: {x}")
    sys.exit()
v = {c["L"]: c["ms"] for c in e.get("verify_cost", [])}
g = {c["L"]: c["ms"] for c in e.get("verify_cost_greedy", [])}
print(f"[{sys.argv[2]}] decode {e['decode_tok_per_s']:.1f} tok/s"
      f" (median {e['decode_ms_median']:.3f} ms), prefill"
      f" {e['prefill_tok_per_s']:.0f}; verify ms "
      + " ".join(f"{L}:{v[L]:.2f}" for L in (1, 2, 4, 8, 16) if L in v))
if "decode_greedy_tok_per_s" in e:
    print(f"[{sys.argv[2]}] greedy: decode {e['decode_greedy_tok_per_s']:.1f}"
          f" tok/s (median {e['decode_greedy_ms_median']:.3f} ms); verify ms "
          + " ".join(f"{L}:{g[L]:.2f}" for L in (1, 2, 4, 8, 16) if L in g))
for key, what in (("decode_sampled", "drawn on the host"),
                  ("decode_sampled_in_pass", "drawn in the pass")):
    d = e.get(key)
    if d:
        print(f"[{sys.argv[2]}] sampled, {what}: {d['tok_per_s']:.1f} tok/s"
              f" (median {d['ms_median']:.3f} ms)")
EOF
}

# Runs variant entry $1 (NAME:BINARY:ENV) with the extra arguments.
variant() {
    local entry=$1; shift
    local rest=${entry#*:}
    local bin=${rest%%:*} envs=${rest#*:}
    # shellcheck disable=SC2086
    env ${envs//,/ } "/tmp/kk-ab/bin/$bin" "$@"
}

run() {
    local out=${OUT:-/tmp/gpu-ab} model
    mkdir -p "$out"
    gpu_unpack_kit "$KIT/kit.tar.xz" /tmp/kk-ab || return 1
    gpu_use_nvidia_icd
    if [ -n "${TESTS:-}" ]; then
        local t name
        for t in /tmp/kk-ab/bin/test_vk_ops /tmp/kk-ab/bin/test_vk_ops-*; do
            [ -x "$t" ] || continue
            name=$(basename "$t")
            "$t" > "$out/$name.txt" 2>&1
            echo "$name rc=$?: $(tail -n 1 "$out/$name.txt")"
        done
    fi
    local files=() m
    for m in ${MODELS:-llama3.2-1b}; do
        if [ "${m%.gguf}" != "$m" ]; then
            files+=("$m")
            continue
        fi
        model=/tmp/kk-ab/$m-q8_0.gguf
        /tmp/kk-ab/bin/kakeya mkmodel --shape "$m" --type Q8_0 \
            -o "$model" > /dev/null || return 1
        files+=("$model")
    done
    local variants=${VARIANTS:-"base:kakeya-base: new:kakeya:"} r v name tag
    for r in $(seq 1 "${ROUNDS:-4}"); do
        for model in "${files[@]}"; do
            tag=$(basename "$model" .gguf)
            for v in $variants; do
                name=${v%%:*}
                # shellcheck disable=SC2086
                variant "$v" bench -m "$model" --backend vulkan \
                    --bandwidth "${BANDWIDTH:-4800}" ${BENCH_ARGS:-} \
                    > "$out/bench-$tag-$name-$r.json" \
                    2> "$out/bench-$tag-$name-$r.err"
                summary "$out/bench-$tag-$name-$r.json" "$tag $name round $r"
            done
        done
    done
    for v in ${PROFILE:-}; do
        name=${v%%:*}
        KAKEYA_VK_PROFILE=1 variant "$v" bench -m "${files[0]}" \
            --backend vulkan --quick > /dev/null 2> "$out/profile-$name.err"
        echo "== $name"
        grep -E "^  [a-z]" "$out/profile-$name.err" | grep -v "host\|stats"
        [ -z "${STATS:-}" ] ||
            grep -E "^  stats ($STATS)" "$out/profile-$name.err" | sort -u
    done
    tar -C "$out" --exclude=all.tgz -czf /tmp/gpu-ab-all.tgz . &&
        mv /tmp/gpu-ab-all.tgz "$out/all.tgz" &&
        find "$out" -type f ! -name all.tgz -delete
}

case ${1:-} in
pack) shift; pack "$@" ;;
run) run ;;
*) echo "usage: tools/gpu-ab.sh pack [REV] | run (see the script's head)" >&2
   exit 2 ;;
esac
