/* libnccl-profiler-ncclwatch.so, the library NCCL loads: a loader that needs nothing but libc.
 *
 * Its constructor (run by NCCL's dlopen, before NCCL looks up the tables) loads the plugin proper
 * into a link-map namespace of its own (dlmopen), so that nothing the plugin brings (gRPC,
 * protobuf, abseil, OpenSSL, zlib, their libstdc++) can bind to, or be bound by, the host's own
 * copies of those libraries:
 *
 *   1. libncclwatch-hostlibc.so, alone in a new namespace, given the host libc's allocator and
 *      thread-specific keys (host_libc.c says why);
 *   2. libncclwatch-engine.so into that namespace; it gets a private copy of the environment and
 *      the host services it cannot reach from there (atexit, symbol lookup);
 *   3. the engine's ncclProfiler_v4 .. _v7 tables are copied into the ones exported here, so
 *      NCCL calls the engine's functions directly: the isolation costs nothing per event;
 *   4. the host libc's fork() child handler is forwarded to the engine.
 *
 * NCCLWATCH_ISOLATION=none loads the engine with a plain dlopen instead (RTLD_LOCAL, the host's
 * namespace), as do sanitizer builds: a sanitizer runtime cannot serve a second libc. When the
 * engine cannot be loaded, the tables keep the functions below: every communicator gets no
 * context, and the first init says why through NCCL's logger. See docs/isolation.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/isolation/engine_api.h"

#define EXPORT __attribute__((visibility("default")))

/* ncclDebugLogger_t, and the NCCL values this file uses (plugin/abi.h has them all). */
typedef void (*nccl_logger)(int level, unsigned long flags, const char *file, int line,
                            const char *fmt, ...);
enum { kLogWarn = 2 };
static const unsigned long kLogSubsysProfile = 0x4000;

/* ncclProfiler_v4 .. _v7 share this shape; only init's parameters differ by version. */
typedef struct profiler_table {
  const char *name;
  void (*init)(void); /* the version's init, cast */
  int (*start_event)(void *context, void **handle, void *descr);
  int (*stop_event)(void *handle);
  int (*record_event_state)(void *handle, int state, void *args);
  int (*finalize)(void *context);
} profiler_table;
_Static_assert(sizeof(profiler_table) == 48, "NCCL's profiler tables are 48 bytes");

/* Why the engine is not loaded (empty when it is): said once, at the first init. */
static char g_reason[768];
static int g_reason_said;

static void say_disabled(nccl_logger log) {
  if (__atomic_exchange_n(&g_reason_said, 1, __ATOMIC_RELAXED)) return;
  if (log != NULL) {
    log(kLogWarn, kLogSubsysProfile, __FILE__, __LINE__, "ncclwatch: disabled: %s", g_reason);
  } else {
    fprintf(stderr, "ncclwatch: disabled: %s\n", g_reason);
  }
}

static int init_v4_disabled(void **context, int *mask, const char *comm_name, uint64_t comm_hash,
                            int n_nodes, int nranks, int rank, nccl_logger log) {
  *context = NULL;
  if (mask != NULL) *mask = 0;
  say_disabled(log);
  return 0;
}
static int init_v5_disabled(void **context, uint64_t comm_id, int *mask, const char *comm_name,
                            int n_nodes, int nranks, int rank, nccl_logger log) {
  *context = NULL;
  if (mask != NULL) *mask = 0;
  say_disabled(log);
  return 0;
}
static int start_disabled(void *context, void **handle, void *descr) {
  *handle = NULL;
  return 0;
}
static int stop_disabled(void *handle) { return 0; }
static int record_disabled(void *handle, int state, void *args) { return 0; }
static int finalize_disabled(void *context) { return 0; }

#define DISABLED_TABLE(init)                                                             \
  {                                                                                      \
    "ncclwatch", (void (*)(void))(init), start_disabled, stop_disabled, record_disabled, \
        finalize_disabled                                                                \
  }
EXPORT profiler_table ncclProfiler_v4 = DISABLED_TABLE(init_v4_disabled);
EXPORT profiler_table ncclProfiler_v5 = DISABLED_TABLE(init_v5_disabled);
EXPORT profiler_table ncclProfiler_v6 = DISABLED_TABLE(init_v5_disabled);
EXPORT profiler_table ncclProfiler_v7 = DISABLED_TABLE(init_v5_disabled);

static const ncclwatch_engine_api *g_api;

static int host_atexit(void (*handler)(void)) { return atexit(handler); }
static void *host_symbol(const char *name) { return dlsym(RTLD_DEFAULT, name); }
static ncclwatch_host_services g_services = {sizeof(ncclwatch_host_services), host_atexit,
                                             host_symbol, ""};

static void fork_child(void) {
  if (g_api != NULL) g_api->mark_forked_child();
}

static void *no_op(void *arg) { return arg; }

static void set_reason(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
  va_end(ap);
}

/* The directory this library was loaded from (the engine is installed beside it). */
static int own_dir(char *out, size_t cap) {
  Dl_info info;
  char real[PATH_MAX];
  if (!dladdr((void *)&ncclProfiler_v7, &info) || info.dli_fname == NULL ||
      realpath(info.dli_fname, real) == NULL) {
    return -1;
  }
  char *slash = strrchr(real, '/');
  if (slash == NULL || (size_t)(slash - real) + 1 > cap) return -1;
  *slash = '\0';
  memcpy(out, real, (size_t)(slash - real) + 1);
  return 0;
}

static const char *sanitizer_runtime(void) {
  static const char *const kInits[] = {"__asan_init", "__tsan_init", "__msan_init",
                                       "__hwasan_init"};
  for (size_t i = 0; i < sizeof(kInits) / sizeof(kInits[0]); ++i) {
    if (dlsym(RTLD_DEFAULT, kInits[i]) != NULL) return kInits[i];
  }
  return NULL;
}

/* dlmopen's errors that a tunable can cure get the tunable named. */
static const char *hint_for(const char *error) {
  if (strstr(error, "static TLS") != NULL || strstr(error, "namespaces") != NULL) {
    return " (the process has no room for another link-map namespace: raise glibc's reserve "
           "with GLIBC_TUNABLES=glibc.rtld.nns=8:glibc.rtld.optional_static_tls=4096, or set "
           "NCCLWATCH_ISOLATION=none to load ncclwatch without isolation)";
  }
  return "";
}

/* NCCLWATCH_CHAIN_PLUGIN (docs/plugin-chaining.md): a second profiler plugin, opened in the host's
 * namespace the way NCCL opens one (as given, else libnccl-profiler-<value>.so), whose newest
 * table from ncclProfiler_v7 down to _v5 the engine calls beside its own. Returns 1 when it is
 * chained; otherwise the engine is told why (it says so at the first init) and runs alone. */
static int chain_plugin(const ncclwatch_engine_api *api) {
  const char *value = getenv("NCCLWATCH_CHAIN_PLUGIN");
  if (value == NULL || *value == '\0') return 0;
  char why[768];
  void *lib = dlopen(value, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL && strchr(value, '/') == NULL) {
    char name[PATH_MAX];
    snprintf(name, sizeof(name), "libnccl-profiler-%s.so", value);
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == NULL) {
    snprintf(why, sizeof(why), "cannot load %s: %s", value, dlerror());
    api->set_chain(NULL, 0, why);
    return 0;
  }
  static const char *const kTables[] = {"ncclProfiler_v7", "ncclProfiler_v6", "ncclProfiler_v5"};
  for (int i = 0; i < 3; ++i) {
    void *table = dlsym(lib, kTables[i]);
    if (table == NULL) continue;
    if (table == &ncclProfiler_v7 || table == &ncclProfiler_v6 || table == &ncclProfiler_v5) {
      snprintf(why, sizeof(why), "%s is ncclwatch itself", value);
      api->set_chain(NULL, 0, why);
      return 0;
    }
    if (api->set_chain(table, 7 - i, value) != 0) {
      snprintf(why, sizeof(why), "%s: %s cannot be chained", value, kTables[i]);
      api->set_chain(NULL, 0, why);
      return 0;
    }
    return 1; /* stays loaded for the process */
  }
  snprintf(why, sizeof(why), "%s has no ncclProfiler_v7, _v6 or _v5 table%s", value,
           dlsym(lib, "ncclProfiler_v4") != NULL ? " (only v4, which cannot be chained)" : "");
  api->set_chain(NULL, 0, why);
  dlclose(lib);
  return 0;
}

static int load(void) {
  const char *mode = getenv("NCCLWATCH_ISOLATION");
  if (mode == NULL || *mode == '\0') mode = "namespace";
  if (strcmp(mode, "namespace") != 0 && strcmp(mode, "none") != 0) {
    set_reason("NCCLWATCH_ISOLATION=%s: expected 'namespace' (the default) or 'none'", mode);
    return -1;
  }
  int isolate = strcmp(mode, "namespace") == 0;
  const char *sanitizer = sanitizer_runtime();
  if (sanitizer != NULL) isolate = 0;
  g_services.isolation = isolate ? "its own link-map namespace"
                         : sanitizer != NULL
                             ? "the host's namespace (a sanitizer runtime is loaded)"
                             : "the host's namespace (NCCLWATCH_ISOLATION=none)";

  char dir[PATH_MAX], path[PATH_MAX + 64];
  if (own_dir(dir, sizeof(dir)) != 0) {
    set_reason("cannot find the directory libnccl-profiler-ncclwatch.so was loaded from");
    return -1;
  }
  if (isolate) {
    /* The host may not have started a thread yet; its libc must know the engine's threads can
     * share its allocator (a libc only learns that from its own pthread_create). */
    pthread_t t;
    if (pthread_create(&t, NULL, no_op, NULL) == 0) pthread_join(t, NULL);
  }

  snprintf(path, sizeof(path), "%s/libncclwatch-hostlibc.so", dir);
  void *host_lib = isolate ? dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL)
                           : dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (host_lib == NULL) {
    const char *error = dlerror();
    set_reason("cannot load %s: %s%s", path, error, hint_for(error));
    return -1;
  }
  static const ncclwatch_host_libc kHostLibc = {sizeof(ncclwatch_host_libc),
                                                malloc,
                                                free,
                                                calloc,
                                                realloc,
                                                reallocarray,
                                                memalign,
                                                posix_memalign,
                                                aligned_alloc,
                                                valloc,
                                                pvalloc,
                                                malloc_usable_size,
                                                pthread_key_create,
                                                pthread_key_delete,
                                                pthread_getspecific,
                                                pthread_setspecific};
  ncclwatch_hostlibc_install_fn install =
      (ncclwatch_hostlibc_install_fn)dlsym(host_lib, NCCLWATCH_HOSTLIBC_INSTALL);
  if (install == NULL || install(&kHostLibc) != 0) {
    set_reason("%s is not ncclwatch's host-libc library (no %s)", path, NCCLWATCH_HOSTLIBC_INSTALL);
    return -1;
  }

  snprintf(path, sizeof(path), "%s/libncclwatch-engine.so", dir);
  void *engine;
  if (isolate) {
    Lmid_t ns = LM_ID_BASE;
    if (dlinfo(host_lib, RTLD_DI_LMID, &ns) != 0) {
      set_reason("dlinfo on %s/libncclwatch-hostlibc.so: %s", dir, dlerror());
      return -1;
    }
    engine = dlmopen(ns, path, RTLD_NOW | RTLD_LOCAL);
  } else {
    engine = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (engine == NULL) {
    const char *error = dlerror();
    set_reason("cannot load %s: %s%s", path, error, hint_for(error));
    return -1;
  }
  ncclwatch_engine_get_api_fn get_api =
      (ncclwatch_engine_get_api_fn)dlsym(engine, NCCLWATCH_ENGINE_GET_API);
  const ncclwatch_engine_api *api = get_api != NULL ? get_api() : NULL;
  if (api == NULL || api->version != NCCLWATCH_ENGINE_API_VERSION ||
      api->size < sizeof(ncclwatch_engine_api)) {
    set_reason(
        "%s does not match this libnccl-profiler-ncclwatch.so (engine interface %u, "
        "want %u): install both from the same build",
        path, api != NULL ? api->version : 0u, NCCLWATCH_ENGINE_API_VERSION);
    return -1;
  }
  if (isolate) {
    extern char **environ;
    api->adopt_host(environ);
  }
  api->set_host_services(&g_services);
  g_api = api;
  pthread_atfork(NULL, NULL, fork_child);
  const void *const *tables = chain_plugin(api) ? api->chained_tables : api->tables;
  memcpy(&ncclProfiler_v4, tables[0], sizeof(profiler_table));
  memcpy(&ncclProfiler_v5, tables[1], sizeof(profiler_table));
  memcpy(&ncclProfiler_v6, tables[2], sizeof(profiler_table));
  memcpy(&ncclProfiler_v7, tables[3], sizeof(profiler_table));
  return 0;
}

__attribute__((constructor)) static void load_engine(void) { (void)load(); }
