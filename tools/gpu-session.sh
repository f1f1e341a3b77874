#!/usr/bin/env bash
# gpu-session.sh — everything a session lent a GPU machine (the `device` tool)
# needs, in two commands, so its 30 minutes of device time go to the GPU.
#
# Here (a dev machine, with the Debian packages and a package registry):
#     tools/gpu-session.sh prepare
#   builds build-gpu/ (release, -Dcuda=enabled) and packs .gpukit/ (ignored by
#   git, ~20 MB): the binaries run_gpu.sh needs (build.tar.xz, laid out like
#   a build dir) plus the Debian runtime .debs of the libraries we link against.
# On the device machine (carry [".gpukit"]; it has no registry, no meson):
#     tools/gpu-session.sh device [PHASE...]
#   unpacks only the libraries the device lacks, finds its cuBLAS/NCCL, then
#   runs tests/cuda/run_gpu.sh --no-build .gpukit/build PHASE... and copies the
#   log and bench/results/*cuda* into $OUT.  PHASEs as in run_gpu.sh; one call
#   for "tests numerics sanitize dist demo" and one for "bench" fit the
#   10-minute limit of a call.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KIT=${GPUKIT:-.gpukit}
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

# libraries nabla links against that a CUDA image may lack (libzmq's deps included)
DEBS="libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libjansson4 libreadline8 libtinfo6 libopenblas0-openmp
      libgfortran5 libquadmath0 libgomp1 libbsd0 libmd0 libpng16-16 zlib1g libssl3
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2"

prepare() {
  [ -f build-gpu/build.ninja ] || meson setup build-gpu --buildtype=release -Dcuda=enabled || exit 1
  ninja -C build-gpu || exit 1
  rm -rf "$KIT"
  mkdir -p "$KIT/debs"
  # the binaries, laid out like a build dir, xz-compressed (the CUDA module's
  # cubins for two architectures are ~40 MB raw, ~4 MB packed; a carry is
  # limited to 64 MiB together with the working tree)
  files=()
  for f in nabla cuda/nabla_cuda.so tests/cuda/test_cuda tests/cuda/bench_cuda tests/tensor/test_tensor tests/tensor_nn/test_tensor_nn; do
    [ -e "build-gpu/$f" ] && files+=("$f")
  done
  tar -C build-gpu -cf - "${files[@]}" | xz -T0 -6 >"$KIT/build.tar.xz" || exit 1
  (cd "$KIT/debs" && { apt-get download $DEBS 2>/dev/null || { apt-get update >/dev/null && apt-get download $DEBS; }; })
  du -sh "$KIT"
  echo 'next: the device tool'"'"'s run with carry [".gpukit"] and command "tools/gpu-session.sh device tests numerics sanitize dist demo", then "... device bench"'
}

# Puts in /tmp/rtlib only the libraries the loader cannot find for FILE.
missing_libs() {
  ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | while read -r so; do
    p=$(find /tmp/rt -name "$so" 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then ln -sf "$(readlink -f "$p")" "/tmp/rtlib/$so"; echo "  $so <- $(basename "$(dirname "$p")") (carried)"
    else echo "  $so: NOT FOUND (carried debs lack it)"; fi
  done
}

device() {
  if [ -f "$KIT/build.tar.xz" ] && [ ! -x "$KIT/build/nabla" ]; then mkdir -p "$KIT/build" && xz -dc "$KIT/build.tar.xz" | tar -C "$KIT/build" -xf -; fi
  [ -x "$KIT/build/nabla" ] || { echo "FAIL: gpu_session: $KIT/build/nabla missing (run 'tools/gpu-session.sh prepare' here and carry .gpukit)"; exit 1; }
  nvidia-smi -L || true
  mkdir -p /tmp/rt /tmp/rtlib
  for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /tmp/rt; done
  # CUDA runtime, cuBLAS and NCCL: wherever this image keeps them
  cudadirs=""
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    p=$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /opt -name "$so*" -not -path '*/proc/*' 2>/dev/null | head -n 1)
    echo "# $so: ${p:-not found}"
    [ -n "$p" ] && case ":$cudadirs:" in *":$(dirname "$p"):"*) ;; *) cudadirs="$cudadirs:$(dirname "$p")";; esac
  done
  export LD_LIBRARY_PATH="/tmp/rtlib${cudadirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "# libraries taken from the carried debs:"
  for f in "$KIT/build/nabla" "$KIT/build/cuda/nabla_cuda.so" "$KIT"/build/tests/*/*; do [ -f "$f" ] && missing_libs "$f"; done
  ldd "$KIT/build/nabla" | grep 'not found' && echo "FAIL: gpu_session: nabla still lacks libraries"
  export PYTHON=${PYTHON:-python3}
  log=/tmp/gpu-session.log
  tests/cuda/run_gpu.sh --no-build "$KIT/build" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ -n "${OUT:-}" ]; then
    cp "$log" "$OUT/" 2>/dev/null
    cp bench/results/*cuda* "$OUT/" 2>/dev/null
  fi
  exit "$rc"
}

case "${1:-}" in
  prepare) prepare ;;
  device) shift; device "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
