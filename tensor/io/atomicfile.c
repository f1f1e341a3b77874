/*
** atomicfile.c — replacing a file safely (see atomicfile.h for the rules).
** Every step after the target is resolved works relative to a descriptor of
** its directory, so renaming that directory meanwhile cannot split the
** temporary from the rename.
*/
#include "atomicfile.h"
#include "iointernal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINKS 40
#define TMP_TAG ".nabla-tmp."
#define RANDOM_HEX 16

/* path with the symlinks of its last component followed (a malloc'd path
** that is not a symlink); *st and *exists describe it.  NULL + error. */
static char *resolve_target(const char *what, const char *path, struct stat *st, bool *exists) {
  char *cur = nio_strdup(path);
  for (int hops = 0; cur; hops++) {
    if (lstat(cur, st) != 0) {
      if (errno == ENOENT) { *exists = false; return cur; }   /* a new file (or a dangling link's target) */
      nio_error("%s: cannot write '%s': %s", what, path, strerror(errno));
      break;
    }
    if (!S_ISLNK(st->st_mode)) { *exists = true; return cur; }
    if (hops == MAX_LINKS) { nio_error("%s: cannot write '%s': too many levels of symbolic links", what, path); break; }
    char target[PATH_MAX];
    ssize_t n = readlink(cur, target, sizeof target - 1);
    if (n < 0) { nio_error("%s: cannot write '%s': reading link '%s': %s", what, path, cur, strerror(errno)); break; }
    target[n] = 0;
    const char *slash = strrchr(cur, '/');
    size_t dl = target[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1;   /* relative: from the link's dir */
    char *next = nio_malloc(dl + (size_t)n + 1);
    if (next) { memcpy(next, cur, dl); memcpy(next + dl, target, (size_t)n + 1); }
    free(cur);
    cur = next;
  }
  free(cur);
  return NULL;
}

/* The process's umask without changing it (umask(2) would race with other
** threads creating files); 022 when /proc is not there. */
static mode_t current_umask(void) {
  mode_t m = 022;
  FILE *f = fopen("/proc/self/status", "re");
  if (!f) return m;
  char line[256];
  unsigned u;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Umask: %o", &u) == 1) { m = (mode_t)u & 0777; break; }
  fclose(f);
  return m;
}

static bool is_hex_run(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return s[n] == 0;
}

/* Removes ".<base>.nabla-tmp.<pid>.<hex>" files whose process is gone. */
static void remove_stale_temps(int dfd, const char *base) {
  int fd = dup(dfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) { if (fd >= 0) close(fd); return; }
  size_t bl = strlen(base), tl = strlen(TMP_TAG);
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *nm = e->d_name;
    if (nm[0] != '.' || strncmp(nm + 1, base, bl) != 0 || strncmp(nm + 1 + bl, TMP_TAG, tl) != 0) continue;
    char *end;
    long pid = strtol(nm + 1 + bl + tl, &end, 10);
    if (end == nm + 1 + bl + tl || *end != '.' || pid <= 0 || pid > INT_MAX || !is_hex_run(end + 1, RANDOM_HEX)) continue;
    if (pid == (long)getpid()) continue;                  /* another thread of ours may be saving */
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;   /* alive, or not ours to judge */
    (void)unlinkat(dirfd(d), nm, 0);
  }
  closedir(d);
}

/* Creates the temporary (fills name[]); -1 with errno set. */
static int create_temp(int dfd, const char *base, char *name, size_t cap) {
  for (int attempt = 0; attempt < 8; attempt++) {
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);   /* unpredictability is not needed: O_EXCL is the safety */
      r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15u ^ (uint64_t)ts.tv_sec ^ (uint64_t)attempt;
    }
    if ((size_t)snprintf(name, cap, ".%s" TMP_TAG "%ld.%016llx", base, (long)getpid(), (unsigned long long)r) >= cap) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;   /* write() moves at most ~2 GiB */
    ssize_t w = write(fd, c, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    c += w; n -= (size_t)w;
  }
  return 0;
}

/* Writes and syncs the open temporary; -1 with errno and *step naming what failed. */
static int fill_temp(int fd, const struct stat *old, bool exists, const struct iovec *iov, int n, const char **step) {
  *step = "writing";
  for (int i = 0; i < n; i++)
    if (write_all(fd, iov[i].iov_base, iov[i].iov_len) != 0) return -1;
  *step = "setting the mode of";
  if (exists && geteuid() == 0 && (old->st_uid != 0 || old->st_gid != 0))
    (void)fchown(fd, old->st_uid, old->st_gid);            /* root keeps the owner, as editors do */
  if (fchmod(fd, exists ? (old->st_mode & 07777) : (0666 & ~current_umask())) != 0) return -1;
  *step = "syncing";
  return fsync(fd);
}

int nt_atomic_write(const char *what, const char *path, const struct iovec *iov, int n) {
  struct stat st;
  bool exists;
  char *target = resolve_target(what, path, &st, &exists);
  if (!target) return -1;
  if (exists && !S_ISREG(st.st_mode)) {
    nio_error("%s: refusing to replace '%s'%s%s%s: it is not a regular file", what, path,
              strcmp(target, path) ? " (a link to '" : "", strcmp(target, path) ? target : "", strcmp(target, path) ? "')" : "");
    free(target);
    return -1;
  }
  char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
    nio_error("%s: cannot write '%s': not a file name", what, path);
    free(target);
    return -1;
  }
  char *dir = slash ? nio_strndup(target, slash == target ? 1 : (size_t)(slash - target)) : nio_strdup(".");
  int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (dfd < 0) {
    if (dir) nio_error("%s: cannot write '%s': directory '%s': %s", what, path, dir, strerror(errno));
    free(dir); free(target);
    return -1;
  }
  remove_stale_temps(dfd, base);
  char tmp[NAME_MAX + 1];
  int rc = -1, fd = create_temp(dfd, base, tmp, sizeof tmp);
  if (fd < 0) {
    nio_error("%s: cannot create a temporary file for '%s' in '%s': %s", what, path, dir, strerror(errno));
  } else {
    const char *step;
    rc = fill_temp(fd, &st, exists, iov, n, &step);
    int e = errno;
    if (close(fd) != 0 && rc == 0) { e = errno; step = "closing"; rc = -1; }
    if (rc == 0 && renameat(dfd, tmp, dfd, base) != 0) { e = errno; step = "renaming"; rc = -1; }
    if (rc == 0) (void)fsync(dfd);   /* make the rename durable; best effort: some filesystems refuse */
    if (rc != 0) {
      (void)unlinkat(dfd, tmp, 0);
      nio_error("%s: error %s '%s' (via '%s/%s'): %s", what, step, path, dir, tmp, strerror(e));
    }
  }
  close(dfd);
  free(dir); free(target);
  return rc;
}
