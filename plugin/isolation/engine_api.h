/* The C interface between the plugin's loader (libnccl-profiler-ncclwatch.so, C, libc only) and
 * what it loads into a link-map namespace of its own:
 *
 *   libncclwatch-hostlibc.so   loaded first, alone; no dependencies at all. It defines malloc and
 *                              its relatives and the pthread key functions, and forwards them to
 *                              the host's libc: the whole namespace (its libc, libstdc++, gRPC)
 *                              then shares the host's heap (whose fork() handling covers it) and
 *                              the host's registry of thread-specific keys (whose slots live in
 *                              each thread's descriptor, which both libcs share).
 *   libncclwatch-engine.so     the plugin proper (C++, gRPC, protobuf), loaded next into the same
 *                              namespace; its profiler tables are copied into the loader's.
 *
 * Only plain C types cross; no call made through here throws. See docs/isolation.md. */
#ifndef NCCLWATCH_PLUGIN_ISOLATION_ENGINE_API_H_
#define NCCLWATCH_PLUGIN_ISOLATION_ENGINE_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The host libc's allocator and thread-specific key functions, as the loader resolves them in the
 * host's namespace (so LD_PRELOADed allocators and test interposers are honoured). Every field
 * is set. */
typedef struct ncclwatch_host_libc {
  uint32_t size; /* sizeof(ncclwatch_host_libc) */
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  void *(*memalign)(size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void *);
  int (*key_create)(unsigned int *key, void (*destructor)(void *)); /* pthread_key_t */
  int (*key_delete)(unsigned int key);
  void *(*getspecific)(unsigned int key);
  int (*setspecific)(unsigned int key, const void *value);
} ncclwatch_host_libc;

#define NCCLWATCH_HOSTLIBC_INSTALL "ncclwatch_hostlibc_install"
/* Returns 0, or -1 when `host` is incomplete (nothing is then installed). */
typedef int (*ncclwatch_hostlibc_install_fn)(const ncclwatch_host_libc *host);

/* What the engine needs from the host's namespace: calls made inside the namespace reach only the
 * namespace's own libc and objects. */
typedef struct ncclwatch_host_services {
  uint32_t size;                        /* sizeof(ncclwatch_host_services) */
  int (*atexit)(void (*handler)(void)); /* the host libc's: runs from exit() */
  void *(*symbol)(const char *name);    /* dlsym(RTLD_DEFAULT, name) in the host */
  const char *isolation;                /* how the engine was loaded, for the start-up line */
} ncclwatch_host_services;

#define NCCLWATCH_ENGINE_API_VERSION 2
#define NCCLWATCH_ENGINE_GET_API "ncclwatch_engine_get_api"

typedef struct ncclwatch_engine_api {
  uint32_t version; /* NCCLWATCH_ENGINE_API_VERSION */
  uint32_t size;    /* sizeof(ncclwatch_engine_api) */
  /* The engine's ncclProfiler_v4 .. _v7 tables, 48 bytes each, in that order. */
  const void *tables[4];
  /* Namespace mode only, right after loading: give the namespace's libc a private copy of the
   * host's environment (it would otherwise share the host's `environ` array, which the host's
   * setenv frees) and mark the namespace's libc multi-threaded. */
  void (*adopt_host)(char *const *host_environ);
  /* Once, before any init. `services` must outlive the process (a static). */
  void (*set_host_services)(const ncclwatch_host_services *services);
  /* The host libc's fork() child handler forwards here (the namespace's own handlers never run). */
  void (*mark_forked_child)(void);
  /* NCCLWATCH_CHAIN_PLUGIN (docs/plugin-chaining.md): once, before any init, the second plugin's
   * ncclProfiler_v<version> table (5, 6 or 7; it must stay loaded) and its file name. Returns 0 and
   * from then on chained_tables are the ones to export, or -1 (that version cannot be chained).
   * With a null table, `name` says why none is chained: the engine says it at its start. */
  int (*set_chain)(const void *table, int version, const char *name);
  /* The tables that call both plugins, ncclProfiler_v4 .. _v7 in that order. */
  const void *chained_tables[4];
} ncclwatch_engine_api;

typedef const ncclwatch_engine_api *(*ncclwatch_engine_get_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* NCCLWATCH_PLUGIN_ISOLATION_ENGINE_API_H_ */
