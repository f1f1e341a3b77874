/*
** repl.h — the terminal front end: interactive REPL and piped-stdin mode.
*/
#ifndef REPL_H
#define REPL_H
#include "lang/nabla.h"

/* Interactive when stdin is a terminal; otherwise reads the program from stdin
** without prompts, echoing expression values.  Returns the exit status. */
int repl_main(nb_VM *vm);
/* Prints the last error of vm to stderr (red on a terminal unless NO_COLOR). */
void repl_print_error(nb_VM *vm);
/* SIGINT interrupts the code running in vm (installed by repl_main and scripts). */
void repl_install_sigint(nb_VM *vm);
void repl_install_sigint_script(nb_VM *vm);   /* scripts and -e: Ctrl-C always interrupts */
#endif
