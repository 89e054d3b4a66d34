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

static int is_folder(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
}

int fsync(int fd) {
  static int (*real)(int);
  if (is_folder(fd)) {
    errno = EIO;
    return -1;
  }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (is_folder(fd)) {
    errno = EIO;
    return -1;
  }
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  return real(fd);
}
