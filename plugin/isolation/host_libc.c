/* libncclwatch-hostlibc.so: the host libc's process-wide registries, for the plugin's link-map
 * namespace. A namespace gets a libc of its own, and with it a second heap and a second registry
 * of pthread keys. Both must be the host's:
 *
 *   - the heap: fork() in the host takes and resets the host heap's locks, never the namespace
 *     libc's, so a child forked while a plugin thread allocated would inherit a held lock;
 *   - pthread keys: a key indexes a slot in the thread's descriptor, which both libcs share; two
 *     registries hand out the same numbers, and the plugin's libraries would overwrite the host's
 *     thread-specific values (and the other way round).
 *
 * The loader puts this library first into the namespace and installs the host's functions before
 * anything else is loaded there; the engine lists it as its first dependency, so every object of
 * the namespace (its libc included: glibc calls malloc through interposable symbols) finds these
 * definitions before the namespace libc's.
 *
 * Built with -nostdlib: it needs nothing, not even libc, so it can be loaded and set up before the
 * namespace has a libc. Nothing in the namespace runs before the install; an early call would find
 * a null pointer and fail as an allocation failure would. */
#include "plugin/isolation/engine_api.h"

#define EXPORT __attribute__((visibility("default")))

static ncclwatch_host_libc host;

EXPORT int ncclwatch_hostlibc_install(const ncclwatch_host_libc *h) {
  if (h == 0 || h->size < sizeof(*h) || !h->malloc || !h->free || !h->calloc || !h->realloc ||
      !h->reallocarray || !h->memalign || !h->posix_memalign || !h->aligned_alloc || !h->valloc ||
      !h->pvalloc || !h->malloc_usable_size || !h->key_create || !h->key_delete ||
      !h->getspecific || !h->setspecific) {
    return -1;
  }
  host = *h;
  return 0;
}

enum { kENOMEM = 12, kEAGAIN = 11, kEINVAL = 22 };

EXPORT void *malloc(size_t n) { return host.malloc ? host.malloc(n) : 0; }
EXPORT void free(void *p) {
  if (host.free) host.free(p);
}
EXPORT void *calloc(size_t n, size_t m) { return host.calloc ? host.calloc(n, m) : 0; }
EXPORT void *realloc(void *p, size_t n) { return host.realloc ? host.realloc(p, n) : 0; }
EXPORT void *reallocarray(void *p, size_t n, size_t m) {
  return host.reallocarray ? host.reallocarray(p, n, m) : 0;
}
EXPORT void *memalign(size_t a, size_t n) { return host.memalign ? host.memalign(a, n) : 0; }
EXPORT int posix_memalign(void **out, size_t a, size_t n) {
  return host.posix_memalign ? host.posix_memalign(out, a, n) : kENOMEM;
}
EXPORT void *aligned_alloc(size_t a, size_t n) {
  return host.aligned_alloc ? host.aligned_alloc(a, n) : 0;
}
EXPORT void *valloc(size_t n) { return host.valloc ? host.valloc(n) : 0; }
EXPORT void *pvalloc(size_t n) { return host.pvalloc ? host.pvalloc(n) : 0; }
EXPORT size_t malloc_usable_size(void *p) {
  return host.malloc_usable_size ? host.malloc_usable_size(p) : 0;
}

EXPORT int pthread_key_create(unsigned int *key, void (*destructor)(void *)) {
  return host.key_create ? host.key_create(key, destructor) : kEAGAIN;
}
EXPORT int pthread_key_delete(unsigned int key) {
  return host.key_delete ? host.key_delete(key) : kEINVAL;
}
EXPORT void *pthread_getspecific(unsigned int key) {
  return host.getspecific ? host.getspecific(key) : 0;
}
EXPORT int pthread_setspecific(unsigned int key, const void *value) {
  return host.setspecific ? host.setspecific(key, value) : kEINVAL;
}
