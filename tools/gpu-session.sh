#!/usr/bin/env bash
# gpu-session.sh — everything a session lent a GPU machine (the `device` tool)
# needs, so that its scarce minutes go to the GPU and nothing is lost.
#
# Here (a dev machine, with the Debian packages and a package registry):
#     tools/gpu-session.sh prepare
#   builds build-gpu/ (release, -Dcuda=enabled; GPUKIT_BUILD=DIR packs another
#   build that has cuda/nabla_cuda.so) and packs .gpukit/ (GPUKIT=DIR elsewhere;
#   ignored by git, ~20 MB): the binaries (build.tar.xz, laid out like a build
#   dir) and the Debian runtime .debs of the libraries nabla links against.
# On the device machine (carry [".gpukit"]; no registry, no meson or ninja,
# nvcc/CUDA 13 libraries, compute-sanitizer, python3 with torch):
#     tools/gpu-session.sh device [PHASE...]
#   unpacks the kit, takes from the carried .debs only the libraries the
#   device lacks, finds its cuBLAS/NCCL, and runs tests/cuda/run_gpu.sh
#   --no-build on the kit's build dir.  PHASEs as in run_gpu.sh (default:
#   tests); each call is bounded to 540 s (GPU_CALL_BUDGET) and ends with a
#   summary and the next command to run.  Everything is written into $OUT as
#   it happens (gpu-kit.log: this script; gpu-session.log and <suite>.log:
#   run_gpu.sh; bench results), so a call killed at the limit returns what it
#   had.  A GPU that nvidia-smi lists but CUDA cannot use fails loudly with
#   the reason; a machine with no GPU at all is a SKIP (exit 0).
# The whole path is tested on the CPU by tests/cuda/test_gpu_kit.py.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KIT=${GPUKIT:-.gpukit}
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
ORDER="tests numerics memcheck racecheck dist distbench zero demo bench gpt2"

# libraries nabla links against that a CUDA image may lack (libzmq's deps included)
DEBS="libzmq5 libsodium23 libsleef3 libpgm-5.3-0 libnorm1 libjansson4 libreadline8 libtinfo6 libopenblas0-openmp
      libgfortran5 libquadmath0 libgomp1 libbsd0 libmd0 libpng16-16 zlib1g libssl3
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2"
# the binaries run_gpu.sh runs, relative to the build dir
KIT_FILES="nabla cuda/nabla_cuda.so tests/cuda/test_cuda tests/cuda/bench_cuda tests/tensor/test_tensor tests/tensor_nn/test_tensor_nn"

prepare() {
  local b=${GPUKIT_BUILD:-build-gpu} f files=() cache
  if [ "$b" = build-gpu ]; then
    [ -f build-gpu/build.ninja ] || meson setup build-gpu --buildtype=release -Dcuda=enabled || exit 1
    ninja -C build-gpu || exit 1
  fi
  for f in $KIT_FILES; do
    [ -e "$b/$f" ] || { echo "FAIL: gpu_kit: $b/$f is missing (is $b configured with -Dcuda=enabled and built?)"; exit 1; }
    files+=("$f")
  done
  rm -rf "$KIT"
  mkdir -p "$KIT/debs"
  # xz: the CUDA module's cubins for two architectures are ~40 MB raw, ~4 MB
  # packed; a carry is limited to 64 MiB together with the working tree
  tar -C "$b" -cf - "${files[@]}" | xz -T0 -6 >"$KIT/build.tar.xz" || exit 1
  # the .debs, downloaded once into a cache (they change only with Debian)
  cache=${GPUKIT_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nabla/gpukit-debs}
  mkdir -p "$cache"
  local missing=()
  for f in $DEBS; do ls "$cache/${f}_"*.deb >/dev/null 2>&1 || missing+=("$f"); done
  if [ ${#missing[@]} -gt 0 ]; then
    (cd "$cache" && { apt-get download "${missing[@]}" 2>/dev/null || { apt-get update >/dev/null && apt-get download "${missing[@]}"; }; }) ||
      { echo "FAIL: gpu_kit: apt-get download ${missing[*]} failed"; exit 1; }
  fi
  for f in $DEBS; do cp "$(ls -t "$cache/${f}_"*.deb | head -n 1)" "$KIT/debs/"; done
  du -sh "$KIT"
  echo "next: the device tool's run with carry [\"$KIT\"] and command \"tools/gpu-session.sh device tests\" (then the phase it prints as next; in order: $ORDER)"
}

# The sonames util/dynload.h loads on first use (NABLA_*_LIB defaults in the
# sources), but OpenBLAS, which has its own search (tensor/tblas.c).
lazy_sonames() {
  grep -rhoE '"lib[A-Za-z0-9_+-]+\.so\.[0-9]+"' --include='*.c' --include='*.h' repl wire tensor lang dist kernel util 2>/dev/null |
    tr -d '"' | grep -v '^libopenblas' | sort -u
}

# Puts in $RT/lib only the libraries the loader cannot find for FILE.
missing_libs() {
  ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | while read -r so; do
    p=$(find "$RT/x" -name "$so" 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then ln -sf "$(readlink -f "$p")" "$RT/lib/$so"; echo "  $so <- $(basename "$(dirname "$p")") (carried)"
    else echo "  $so: NOT FOUND (carried debs lack it)"; fi
  done
}

device() {
  local out=${OUT:-$ROOT/$KIT/out}
  mkdir -p "$out"
  export OUT=$out
  # this script's own account streams into $OUT from the first line
  exec > >(stdbuf -oL tee -a "$OUT/gpu-kit.log") 2>&1
  echo "# gpu-session.sh device ${*:-tests} ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname))"
  if [ ! -f "$KIT/build.tar.xz" ]; then
    echo "FAIL: gpu_kit: $KIT/build.tar.xz missing (run 'tools/gpu-session.sh prepare' here and carry $KIT)"; exit 1
  fi
  # unpack once per kit (a warm machine keeps it between calls)
  if [ ! -x "$KIT/build/nabla" ] || [ "$KIT/build.tar.xz" -nt "$KIT/build/.unpacked" ]; then
    rm -rf "$KIT/build" && mkdir -p "$KIT/build" && xz -dc "$KIT/build.tar.xz" | tar -C "$KIT/build" -xf - &&
      touch "$KIT/build/.unpacked" || { echo "FAIL: gpu_kit: cannot unpack $KIT/build.tar.xz"; exit 1; }
  fi
  echo "# nvidia-smi -L: $(timeout 30 nvidia-smi -L 2>&1 | head -n 4 | tr '\n' ' ')"
  RT=$(cd "$KIT" && pwd)/rt
  mkdir -p "$RT/x" "$RT/lib"
  local f so p cudadirs=""
  for f in "$KIT"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$RT/x"; done
  # CUDA runtime, cuBLAS and NCCL: wherever this image keeps them
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    p=$(find /usr/local/cuda/ /usr/local/cuda*/ /usr/lib /opt -maxdepth 6 -name "$so*" 2>/dev/null | head -n 1)
    echo "# $so: ${p:-not found}"
    [ -n "$p" ] && case ":$cudadirs:" in *":$(dirname "$p"):"*) ;; *) cudadirs="$cudadirs:$(dirname "$p")";; esac
  done
  export LD_LIBRARY_PATH="$RT/lib${cudadirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "# libraries taken from the carried debs:"
  for f in $KIT_FILES; do [ -f "$KIT/build/$f" ] && missing_libs "$KIT/build/$f"; done
  # Libraries nabla loads on first use (util/dynload.h: readline, SLEEF, zlib,
  # jansson, libpng, ZeroMQ, libcrypto) are not in any binary's ldd list: each
  # one the image's loader cannot find is taken from the carried debs.  The
  # sonames come from the sources carried with the kit, so a new one cannot be
  # forgotten here.
  local ldc
  ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  for so in $(lazy_sonames); do
    "$ldc" -p 2>/dev/null | grep -q "^[[:space:]]*$so " && continue
    p=$(find "$RT/x" -name "$so" 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then ln -sf "$(readlink -f "$p")" "$RT/lib/$so"; echo "  $so <- carried (loaded on first use)"; missing_libs "$p"
    else echo "  $so: NOT FOUND (carried debs lack it)"; fi
  done
  # OpenBLAS is dlopened on first use (tensor/tblas.h), so ldd does not list it:
  # the image's own when it has one, else the carried deb's (and what it needs)
  if [ ! -e "/usr/lib/$ARCH/openblas-openmp/libopenblas.so.0" ]; then
    p=$(find "$RT/x" -name libopenblas.so.0 -path '*openblas-openmp*' 2>/dev/null | head -n 1)
    if [ -n "$p" ]; then export NABLA_OPENBLAS=$p; echo "  libopenblas.so.0 <- carried ($p)"; missing_libs "$p"
    else echo "  libopenblas.so.0: NOT FOUND (carried debs lack it)"; fi
  fi
  if ldd "$KIT/build/nabla" | grep 'not found'; then echo "FAIL: gpu_kit: nabla still lacks libraries"; exit 1; fi
  export PYTHON=${PYTHON:-$(command -v python3)}
  tests/cuda/run_gpu.sh --no-build "$KIT/build" "${@:-tests}"
}

case "${1:-}" in
  prepare) prepare ;;
  device) shift; device "$@" ;;
  *) sed -n '2,24p' "$0"; exit 2 ;;
esac
