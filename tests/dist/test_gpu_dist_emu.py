#!/usr/bin/python3
"""test_gpu_dist.py's ring-backend checks on every commit, on the emulated
CUDA device (NABLA_CUDA_EMULATE=force, cuda/emu/): collectives of CUDA
tensors staged through pinned host memory at world 2-4, and data-parallel
training on CUDA workers equal to one process on the whole batch.  The NCCL
checks need a GPU machine (the emulator has no NCCL) and print SKIP here.

Run: NABLA=build/nabla /usr/bin/python3 tests/dist/test_gpu_dist_emu.py"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NABLA = os.path.abspath(os.environ.get("NABLA") or os.path.join(HERE, "../../build/nabla"))
MODULE = os.path.join(os.path.dirname(NABLA), "cuda", "emu", "nabla_cuda_emu.so")
if not os.path.exists(MODULE):
    print(f"SKIP: gpu_dist_emu: this build has no emulated CUDA device ({MODULE} not built: it needs clang++, "
          "CUDA's headers and -Dcuda not disabled)")
    sys.exit(0)
env = dict(os.environ, NABLA=NABLA, NABLA_CUDA_EMULATE="force", NABLA_EMU_SMS="2")
env.pop("NABLA_CUDA_DISABLE", None)
env.pop("NABLA_CUDA_MODULE", None)
sys.exit(subprocess.run([sys.executable, os.path.join(HERE, "test_gpu_dist.py")], env=env).returncode)
