/*
** util/fdio.h — writing a process's output without losing bytes.
**
** stdio drops the rest of its buffer when write() fails with EAGAIN, which
** happens when stdout or stderr is a descriptor some other program made
** non-blocking (OpenSSH does that to every non-terminal descriptor it is
** given, and the descriptor is shared with us).  nu_write_all waits such a
** descriptor out with poll() instead; nu_fd_nonblocking says whether a
** descriptor needs it, so ordinary output keeps stdio's buffering.
*/
#ifndef NABLA_UTIL_FDIO_H
#define NABLA_UTIL_FDIO_H

#include <stddef.h>

/* all of data to fd, retrying EINTR and waiting out EAGAIN; 0, or -1 with errno */
int nu_write_all(int fd, const void *data, size_t len);
/* 1 when fd is open and O_NONBLOCK */
int nu_fd_nonblocking(int fd);

#endif
