/* placeholder: replaced by the full suite */
#include "tensor/tensor.h"
#include <stdio.h>
int main(void) { nt_init(); printf("PASS: init\n"); return 0; }
