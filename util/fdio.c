/* util/fdio.c — see fdio.h */
#include "util/fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

int nu_write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t k = write(fd, p, len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {   /* made non-blocking by someone else: wait, do not drop */
      struct pollfd q = { fd, POLLOUT, 0 };
      if (poll(&q, 1, 1000) < 0 && errno != EINTR) return -1;
      continue;
    }
    if (k <= 0) return -1;
    p += k; len -= (size_t)k;
  }
  return 0;
}

int nu_fd_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}
