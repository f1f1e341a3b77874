/*
** kernel.h — `nabla kernel`: the Jupyter kernel front end.
**   nabla kernel -f CONNECTION_FILE        serve one kernel (what Jupyter runs)
**   nabla kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME] [--interrupt-mode message|signal]
**   nabla kernel uninstall [same location options]
*/
#ifndef NABLA_KERNEL_H
#define NABLA_KERNEL_H
int kernel_main(int argc, char **argv);
#endif
