/*
** lplot.c — plotting builtins: plot, scatter, hist, imshow (filled in by the
** plotting work; registered from nb_vm_new).
*/
#include "lvm.h"

void nbG_plot_init(void) {}
