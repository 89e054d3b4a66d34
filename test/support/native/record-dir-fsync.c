/*
 * LD_PRELOAD shim for the tests: every fsync() and fdatasync() of a folder
 * appends the folder's path (as /proc/self/fd names it) and a newline to the
 * file named by LOOPCTL_FSYNC_LOG, then goes to libc as every other call does.
 * It tells which folders a writer made durable, which no file system shows.
 * With LOOPCTL_FSYNC_FAIL_FIRST set, the process's first folder sync fails
 * with EIO instead (and is not recorded): a disk that fails one sync.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Records `fd` when it is a folder, then does what libc's `name` does with it. */
static int failed_one = 0;

static int record_folder(const char *name, int fd) {
  struct stat st;
  const char *log = getenv("LOOPCTL_FSYNC_LOG");
  if (log != NULL && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (getenv("LOOPCTL_FSYNC_FAIL_FIRST") != NULL && !failed_one) {
      failed_one = 1;
      errno = EIO;
      return -1;
    }
    char link[64];
    char path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0) {
      path[n++] = '\n';
      int out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
      if (out >= 0) {
        (void)write(out, path, (size_t)n);
        close(out);
      }
    }
  }
  int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
  return real(fd);
}

int fsync(int fd) { return record_folder("fsync", fd); }

int fdatasync(int fd) { return record_folder("fdatasync", fd); }
