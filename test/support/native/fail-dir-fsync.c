/*
 * LD_PRELOAD shim for the tests: fsync() and fdatasync() of a folder fail
 * with EIO; every other call goes to libc. It stands for a disk that fails
 * the folder sync that makes a rename durable, which no real file system
 * here can be made to do on demand.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

/* EIO for a folder, else what libc's `name` does with `fd`. */
static int sync_unless_folder(const char *name, int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EIO;
    return -1;
  }
  int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
  return real(fd);
}

int fsync(int fd) { return sync_unless_folder("fsync", fd); }

int fdatasync(int fd) { return sync_unless_folder("fdatasync", fd); }
