/*
 * LD_PRELOAD shim for the tests: the wall clock is set back. Once
 * LOOPCTL_CLOCK_BACK_AFTER_MS milliseconds have passed (by the monotonic
 * clock, which is left alone) since the clock was first read with that
 * variable set (a process may set it itself, through process.env),
 * CLOCK_REALTIME and gettimeofday answer LOOPCTL_CLOCK_BACK_S seconds earlier,
 * as after an NTP step or a date set by hand. Every other clock goes to libc
 * unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static long long started_ms = -1;

static long long monotonic_ms(void) {
  struct timespec ts;
  real_clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Seconds to take off the wall clock now: 0 until the step. */
static long back_s(void) {
  if (real_clock_gettime == NULL) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
  const char *after = getenv("LOOPCTL_CLOCK_BACK_AFTER_MS");
  const char *back = getenv("LOOPCTL_CLOCK_BACK_S");
  if (after == NULL || back == NULL) return 0;
  long long now = monotonic_ms();
  if (started_ms < 0) started_ms = now;
  return now - started_ms >= atoll(after) ? atol(back) : 0;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
  long back = back_s();
  int result = real_clock_gettime(clock, ts);
  if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) ts->tv_sec -= back;
  return result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  long back = back_s();
  struct timespec ts;
  int result = real_clock_gettime(CLOCK_REALTIME, &ts);
  if (result == 0 && tv != NULL) {
    tv->tv_sec = ts.tv_sec - back;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  (void)tz;
  return result;
}
