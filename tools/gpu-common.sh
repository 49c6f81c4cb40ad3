# gpu-common.sh — what the GPU-machine scripts share (sourced by
# gpu-kit.sh, gpu-bench.sh and gpu-ab.sh).

# Copies into DIR every shared library BINARY... loads but the C runtime
# itself (the GPU machine's glibc is newer than ours, which is all that
# needs), and the Vulkan loader, which that machine lacks.
gpu_pack_libs() { # DIR BINARY...
    local dir=$1; shift
    mkdir -p "$dir"
    ldd "$@" | awk '/=> \//{print $3}' | sort -u |
        grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" "$dir/"; done
    cp -L "$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/{print $NF; exit}')" "$dir/"
}

# Packs DIR/bin (the binaries, stripped) and the libraries BINARY... load
# (gpu_pack_libs) into one archive, DIR/kit.tar.xz: what a device call
# carries, compressed (uncompressed, three binaries took 22 MB of its
# 64 MiB).
gpu_pack_kit() { # DIR BINARY...
    local dir=$1; shift
    strip "$dir"/bin/* &&
        gpu_pack_libs "$dir/lib" "$@" &&
        tar -C "$dir" -cJf "$dir/kit.tar.xz" bin lib &&
        rm -rf "$dir/bin" "$dir/lib"
}

# There: unpacks KIT (gpu_pack_kit's archive) into DIR, its libraries first
# on the library path. The binaries are DIR/bin/NAME.
gpu_unpack_kit() { # KIT DIR
    mkdir -p "$2" && tar -C "$2" -xJf "$1" || return 1
    export LD_LIBRARY_PATH=$2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# NVIDIA's stock ICD file names the GLX library, which needs a display; a
# headless machine reaches the same driver through its EGL library, so
# point the loader at an ICD file naming that one (unless the caller chose).
gpu_use_nvidia_icd() {
    if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] &&
       ldconfig -p | grep -q libEGL_nvidia.so.0; then
        printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.3.0"}}\n' \
            libEGL_nvidia.so.0 > /tmp/kk_nvidia_icd.json
        export VK_ICD_FILENAMES=/tmp/kk_nvidia_icd.json
    fi
}
