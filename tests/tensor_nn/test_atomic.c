/*
** test_atomic.c — replacing files (tensor/io/atomicfile.c) through the
** writers that use it (nt_st_save, nt_npy_save): planted symlinks, links to
** the target, non-regular targets, modes, and temporaries left by killed
** processes.
*/
#include "tn.h"
#include "tensor/io/atomicfile.h"
#include "tensor/io/safetensors.h"
#include "tensor/io/npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* a one-tensor safetensors save of value v */
static int save_value(const char *path, float v) {
  static float data[1];
  data[0] = v;
  nt_io_array a = { .name = "x", .dtype = NT_IO_F32, .ndim = 1, .shape = {1}, .data = data, .nbytes = 4 };
  return nt_st_save(path, &a, 1, NULL, NULL, 0);
}
static float load_value(const char *path) {
  nt_io_set *s = nt_st_load(path);
  float v = s && s->n == 1 ? ((float *)s->arrays[0].data)[0] : -1;
  nt_io_set_free(s);
  return v;
}
static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) { fputs(text, f); fclose(f); }
}
static bool file_is(const char *path, const char *text) {
  char buf[256] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  return n == strlen(text) && memcmp(buf, text, n) == 0;
}
static int count_temps(const char *base) {
  DIR *d = opendir(tn_path(""));
  struct dirent *e;
  int n = 0;
  char pre[256];
  snprintf(pre, sizeof pre, ".%s.nabla-tmp.", base);
  while (d && (e = readdir(d))) n += strncmp(e->d_name, pre, strlen(pre)) == 0;
  if (d) closedir(d);
  return n;
}

/* the old temporary name PATH.tmp.<pid>, planted as a symlink to a victim */
static void t_planted_symlink(void) {
  const char *p = tn_path("m.safetensors"), *victim = tn_path("victim.txt");
  char planted[600];
  snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
  put_file(victim, "precious");
  CHECK(symlink(victim, planted) == 0, "symlink: %s", strerror(errno));
  float v = (float)tn_urand();
  CHECK(save_value(p, v) == 0, "save: %s", nt_io_error());
  CHECK(file_is(victim, "precious"), "the victim behind the planted link was overwritten");
  CHECK(load_value(p) == v, "saved value not read back");
  unlink(planted); unlink(victim); unlink(p);
}

/* saving through a symlink updates its target and keeps the link */
static void t_through_symlink(void) {
  const char *target = tn_path("real.safetensors"), *link = tn_path("link.safetensors");
  float v1 = (float)tn_urand(), v2 = v1 + 1;
  CHECK(save_value(target, v1) == 0, "%s", nt_io_error());
  CHECK(symlink("real.safetensors", link) == 0, "symlink: %s", strerror(errno));   /* relative, like ln -s */
  CHECK(save_value(link, v2) == 0, "%s", nt_io_error());
  struct stat st;
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
  CHECK(load_value(target) == v2, "the target was not updated");
  CHECK(count_temps("real.safetensors") == 0 && count_temps("link.safetensors") == 0, "temporary left behind");
  unlink(link); unlink(target);
}

/* a fifo (or a device such as /dev/full) is never replaced */
static void t_refuses_non_regular(void) {
  const char *fifo = tn_path("pipe.npy");
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
  static double d[2] = {1, 2};
  nt_io_array a = { .name = "", .dtype = NT_IO_F64, .ndim = 1, .shape = {2}, .data = d, .nbytes = 16 };
  CHECK(nt_npy_save(fifo, &a) < 0 && strstr(nt_io_error(), "refusing to replace") &&
        strstr(nt_io_error(), "not a regular file"), "fifo: %s", nt_io_error());
  struct stat st;
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the fifo was replaced");
  const char *link = tn_path("to-fifo.npy");
  CHECK(symlink(fifo, link) == 0, "symlink: %s", strerror(errno));
  CHECK(nt_npy_save(link, &a) < 0 && strstr(nt_io_error(), "not a regular file"), "link to fifo: %s", nt_io_error());
  CHECK(nt_atomic_write("t", tn_path(""), NULL, 0) < 0 && strstr(nt_io_error(), "not a regular file"),
        "directory: %s", nt_io_error());
  CHECK(nt_atomic_write("t", "", NULL, 0) < 0 && strstr(nt_io_error(), "not a file name"), "empty: %s", nt_io_error());
  CHECK(nt_atomic_write("t", tn_path("sub/"), NULL, 0) < 0 && strstr(nt_io_error(), "not a file name"), "dir/: %s", nt_io_error());
  CHECK(count_temps("pipe.npy") == 0, "temporary left behind");
  unlink(link); unlink(fifo);
}

/* a replaced file keeps its mode; a new one gets 0666 & ~umask */
static void t_modes(void) {
  const char *p = tn_path("mode.safetensors");
  mode_t um = umask(022);
  CHECK(save_value(p, 1) == 0, "%s", nt_io_error());
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0644, "new file mode %o", (unsigned)(st.st_mode & 0777));
  CHECK(chmod(p, 0640) == 0, "chmod");
  CHECK(save_value(p, 2) == 0, "%s", nt_io_error());
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0640, "replaced file mode %o, want 640", (unsigned)(st.st_mode & 0777));
  umask(um);
  unlink(p);
}

/* temporaries of dead processes go on the next save; live ones and look-alikes stay */
static void t_stale_temps(void) {
  const char *p = tn_path("ckpt.safetensors");
  pid_t child = fork();
  if (child == 0) _exit(0);
  CHECK(child > 0, "fork");
  waitpid(child, NULL, 0);                      /* now a pid with no process */
  char dead[600], live[600], other[600], odd[600];
  snprintf(dead, sizeof dead, "%s", tn_path(""));
  snprintf(dead + strlen(dead), sizeof dead - strlen(dead), ".ckpt.safetensors.nabla-tmp.%ld.0123456789abcdef", (long)child);
  snprintf(live, sizeof live, "%s.ckpt.safetensors.nabla-tmp.%ld.00000000deadbeef", tn_path(""), (long)getppid());
  snprintf(other, sizeof other, "%s.other.safetensors.nabla-tmp.%ld.0123456789abcdef", tn_path(""), (long)child);
  snprintf(odd, sizeof odd, "%s.ckpt.safetensors.nabla-tmp.%ld.notes", tn_path(""), (long)child);
  put_file(dead, "partial"); put_file(live, "partial"); put_file(other, "partial"); put_file(odd, "mine");
  CHECK(kill(child, 0) != 0 && errno == ESRCH, "the child's pid is in use again");
  CHECK(save_value(p, 3) == 0, "%s", nt_io_error());
  CHECK(access(dead, F_OK) != 0, "a dead process's temporary was kept");
  CHECK(access(live, F_OK) == 0, "a live process's temporary was removed");
  CHECK(access(other, F_OK) == 0, "another target's temporary was removed");
  CHECK(access(odd, F_OK) == 0, "a file that only looks like a temporary was removed");
  CHECK(load_value(p) == 3, "saved value");
  unlink(live); unlink(other); unlink(odd); unlink(p);
}

const tn_test tn_tests_atomic[] = {
  {"atomic_planted_symlink_not_followed", t_planted_symlink},
  {"atomic_save_through_symlink_updates_target", t_through_symlink},
  {"atomic_refuses_non_regular_targets", t_refuses_non_regular},
  {"atomic_file_modes", t_modes},
  {"atomic_removes_stale_temporaries", t_stale_temps},
  {NULL, NULL},
};
