/* tmatmul.c — placeholder, filled in below */
#include "tinternal.h"
void nt_cpu_register_matmul(void) {}
