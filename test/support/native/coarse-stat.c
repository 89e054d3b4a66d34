/*
 * LD_PRELOAD shim for the tests: a file system with coarse timestamps that
 * hands a freed inode straight back. Every statx() answer gives mtime and
 * ctime in whole seconds (as HFS+, ext4 with 128-byte inodes and some network
 * file systems keep them), and a regular file named grants.json always has
 * inode 4242 (as ext4 gives the inode of the ledger a rename replaced to the
 * next temporary ledger). Two ledgers of one size written within a second
 * then look the same to stat. libuv calls statx through syscall(), so that
 * is what is wrapped; every other call goes to libc unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LEDGER "/grants.json"
#define LEDGER_INODE 4242

/* Whether the file statx looked at is named grants.json: by its path, or by its descriptor's. */
static int is_ledger(int dirfd, const char *path) {
  char link[64];
  char target[4096];
  if (path != NULL && path[0] != '\0') {
    const char *name = strrchr(path, '/');
    return strcmp(name == NULL ? path : name + 1, LEDGER + 1) == 0;
  }
  snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n < 0) return 0;
  target[n] = '\0';
  size_t len = strlen(LEDGER);
  return (size_t)n >= len && strcmp(target + n - len, LEDGER) == 0;
}

long syscall(long number, ...) {
  static long (*real)(long, ...);
  if (real == NULL) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  long rc = real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (number == SYS_statx && rc == 0) {
    struct statx *st = (struct statx *)a[4];
    st->stx_mtime.tv_nsec = 0;
    st->stx_ctime.tv_nsec = 0;
    if (S_ISREG(st->stx_mode) && is_ledger((int)a[0], (const char *)a[1])) st->stx_ino = LEDGER_INODE;
  }
  return rc;
}
