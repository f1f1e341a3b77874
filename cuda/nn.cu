#include "common.cuh"
namespace ncu { void register_nn(void) {} }
