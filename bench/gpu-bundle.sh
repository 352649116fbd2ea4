#!/usr/bin/env bash
# Build, on the build machine, the binaries bench/gpu-check.sh runs on the GPU machine,
# and pack them with the shared libraries they load into .gpubin/ (in .gitignore), so
# that the GPU machine, which has none of our Debian packages and little time, does not
# have to build. gpu-check.sh falls back to building there
# (with .devdeps carried) when a bundled binary does not load.
#   bash bench/gpu-bundle.sh            (BUILD_DIR, default build-gpu; sm_90)
# Then carry .gpubin (and .devdeps for the fallback) in the device call.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
ninja -C "$build" unit_tests attention_gpu trainer_cpu attnsweep gpu_primitive_tests
bins=("$build/tests/unit_tests" "$build/bench/attention_gpu" "$build/bench/trainer_cpu" "$build/attnsweep"
      "$build/gpu_primitive_tests")
rm -rf .gpubin && mkdir -p .gpubin/stage/bin .gpubin/stage/lib .gpubin/stage/lib-cxx
cp "${bins[@]}" .gpubin/stage/bin/
# Every library the binaries load except glibc's own (the GPU machine's is newer) and the
# C++ runtime, which goes to lib-cxx and is used only if the machine's is too old.
for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libresolv.so.*|ld-linux*) ;;
    libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" .gpubin/stage/lib-cxx/ ;;
    *) cp -L "$lib" .gpubin/stage/lib/ ;;
  esac
done
git rev-parse HEAD > .gpubin/stage/commit
tar -C .gpubin/stage -cJf .gpubin/bundle.tar.xz .
rm -rf .gpubin/stage
du -sh .gpubin/bundle.tar.xz
