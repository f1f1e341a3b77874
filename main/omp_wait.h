/*
** omp_wait.h — the executable's getenv interposer for libgomp's wait policy
** (see omp_wait.c for why it exists and why it works).
*/
#ifndef NABLA_MAIN_OMP_WAIT_H
#define NABLA_MAIN_OMP_WAIT_H
/* Called first thing in main: from then on getenv is the plain lookup
** (libgomp has read its settings; scripts see the real environment). */
void nabla_omp_wait_main_started(void);
#endif
