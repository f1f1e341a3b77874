/*
** atomicfile.h — the one way Nabla replaces a file (safetensors, npy, and any
** other writer: plots, the kernel's history, checkpoints go through save).
**
** nt_atomic_write(what, path, iov, n) writes iov[0..n) so that a reader of
** path sees the old contents or the new, never a mix, and a crash or kill
** leaves the old file intact:
**  - a symlink at path is followed (to 40 levels), so saving through it
**    updates its target, as editors do; the final target must be a regular
**    file or absent (a device, fifo or directory is refused, never replaced);
**  - the data goes to a fresh temporary in the target's directory, named
**    ".<name>.nabla-tmp.<pid>.<random>" and created O_CREAT|O_EXCL|O_NOFOLLOW
**    with mode 0600 (a planted file or symlink there makes the open fail
**    instead of redirecting the write); it is fsync'd, given the old file's
**    mode (or 0666 & ~umask for a new one), renamed over the target, and the
**    directory is fsync'd so the rename is durable;
**  - temporaries of the same target left by processes that are gone (a kill
**    during a large save) are removed first: a pid counts as gone only when
**    kill(pid, 0) says ESRCH.
** Returns 0, or -1 with nt_io_error() saying "<what>: ..." and what failed.
*/
#ifndef NT_IO_ATOMICFILE_H
#define NT_IO_ATOMICFILE_H

#include <sys/uio.h>

int nt_atomic_write(const char *what, const char *path, const struct iovec *iov, int n);

#endif
