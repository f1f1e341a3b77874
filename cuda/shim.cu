// shim.cu — the module's own copies of the few PURE helpers of the core that
// kernels use (dtype sizes/names, strides, contiguity).  The module is linked
// with -fvisibility=hidden and dlopened RTLD_LOCAL, so these definitions bind
// only inside nabla_cuda.so; everything with state goes through ncu::host.
// The source is the core's own tensor/tpure.c, compiled here as C++, so the
// two copies cannot drift apart.
#include "common.cuh"

extern "C" {
#include "tensor/tpure.c"
}
