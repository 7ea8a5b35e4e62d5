// Spinning stand-ins for torch's threads in bench/gpu/prewake/probe.py: each returns once
// *flag is set, or after 2 ms.
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
static long long now_ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void relax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}
void spin_until(void *flag) {
  atomic_int *f = flag; long long end = now_ns() + 2000000; unsigned n = 0;
  while (!atomic_load_explicit(f, memory_order_acquire)) {
    relax();
    if (++n % 256 == 0 && now_ns() > end) break;
  }
}
void spin_yield_until(void *flag) {
  atomic_int *f = flag; long long end = now_ns() + 2000000; unsigned n = 0;
  while (!atomic_load_explicit(f, memory_order_acquire)) {
    sched_yield();
    if (++n % 16 == 0 && now_ns() > end) break;
  }
}
