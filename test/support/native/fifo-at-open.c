/*
 * LD_PRELOAD shim for the tests: the first open of a file named grants.json
 * with O_NOFOLLOW finds it swapped for a FIFO just before the open, as a
 * swap between a reader's lstat and its open would; every other call goes to
 * libc. No real file system can be made to do that at a chosen moment.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int swapped = 0;

static void swap_if_ledger(const char *path, int flags) {
  const char *slash = strrchr(path, '/');
  const char *name = slash == NULL ? path : slash + 1;
  if (swapped || strcmp(name, "grants.json") != 0 || (flags & O_NOFOLLOW) == 0) return;
  swapped = 1;
  unlink(path);
  mkfifo(path, 0600);
}

static mode_t mode_of(int flags, va_list args) {
  return (flags & (O_CREAT | O_TMPFILE)) != 0 ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = mode_of(flags, args);
  va_end(args);
  swap_if_ledger(path, flags);
  int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
  return real(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = mode_of(flags, args);
  va_end(args);
  swap_if_ledger(path, flags);
  int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open64");
  return real(path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = mode_of(flags, args);
  va_end(args);
  swap_if_ledger(path, flags);
  int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
  return real(dir, path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  mode_t mode = mode_of(flags, args);
  va_end(args);
  swap_if_ledger(path, flags);
  int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat64");
  return real(dir, path, flags, mode);
}
