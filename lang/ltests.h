/*
** ltests.h — white-box access to lang's core for lang's own unit tests
** (tests/unit/test_parser.c walks the syntax tree the parser builds), as
** Lua's ltests.h serves its internal tests.  It is lvm.h under a name that
** says what it is for: the core's private structures (syntax tree, protos,
** chunks, the VM) with no promise of stability.  Nothing but tests includes
** it; code outside lang/ that runs in the product uses nabla.h or nbapi.h.
*/
#ifndef LTESTS_H
#define LTESTS_H

#include "lvm.h"

#endif
