/*
 * The few glibc-only names (five on aarch64) that Debian's static libstdc++/libgcc_eh objects (built on glibc 2.36)
 * refer to, implemented on musl so those objects can form a libstdc++.so.6 for a musl host. All
 * hidden: they serve the objects inside this library and are never exported as if we were glibc.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* glibc 2.32+: non-zero while the process has one thread, letting libstdc++ skip atomics for
 * reference counts. Zero here means "always assume threads", which is always correct. */
HIDDEN char __libc_single_threaded = 0;

/* libgcc's gthreads treat threads as present only when this (weak) glibc name resolves; without
 * it the unwinder would run its one-time setup and object registry without locks. */
HIDDEN int __pthread_key_create(pthread_key_t *key, void (*destructor)(void *)) {
  return pthread_key_create(key, destructor);
}

/* glibc 2.36: random_device's default source. getentropy is the same kernel randomness. */
HIDDEN uint32_t arc4random(void) {
  uint32_t v;
  if (getentropy(&v, sizeof v) != 0) abort();
  return v;
}

/* glibc 2.35's _dl_find_object, which GCC 12's unwinder uses instead of walking the loaded objects
 * itself when it was built against such a glibc (and then has no fallback). The layout is glibc's
 * for targets without dlfo_eh_dbase/dlfo_eh_count (x86_64, aarch64). We find the object whose
 * loaded segments contain the address and report its PT_GNU_EH_FRAME (.eh_frame_hdr) segment. */
struct lsm_dl_find_object {
  unsigned long long dlfo_flags;
  void *dlfo_map_start;
  void *dlfo_map_end;
  void *dlfo_link_map;
  void *dlfo_eh_frame;
  unsigned long long reserved[7];
};

struct lookup {
  uintptr_t pc;
  struct lsm_dl_find_object *out;
};

static int visit(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct lookup *l = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  void *eh = 0;
  int contains = 0;
  for (size_t i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + p->p_vaddr;
    if (p->p_type == PT_LOAD) {
      uintptr_t end = start + p->p_memsz;
      if (start < lo) lo = start;
      if (end > hi) hi = end;
      if (l->pc >= start && l->pc < end) contains = 1;
    } else if (p->p_type == PT_GNU_EH_FRAME) {
      eh = (void *)start;
    }
  }
  if (!contains) return 0;
  l->out->dlfo_flags = 0;
  l->out->dlfo_map_start = (void *)lo;
  l->out->dlfo_map_end = (void *)hi;
  l->out->dlfo_link_map = 0;
  l->out->dlfo_eh_frame = eh;
  return 1;
}

#ifdef __aarch64__
/* libgcc's aarch64 start-up code asks glibc's internal name whether the CPU has LSE atomics. */
HIDDEN unsigned long __getauxval(unsigned long type) { return getauxval(type); }
#endif

HIDDEN int _dl_find_object(void *pc, struct lsm_dl_find_object *out) {
  struct lookup l = {(uintptr_t)pc, out};
  return dl_iterate_phdr(visit, &l) ? 0 : -1;
}
