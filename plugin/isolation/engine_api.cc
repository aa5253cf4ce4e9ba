// libncclwatch-engine.so's one export: the interface its loader (loader.c) uses, see engine_api.h.
#include "plugin/isolation/engine_api.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "plugin/chain.h"
#include "plugin/lifecycle.h"

// The tables of exports.cc. The engine's version script hides them; the loader gets them from the
// interface below.
extern "C" {
extern ncclwatch::abi::ProfilerV4 ncclProfiler_v4;
extern ncclwatch::abi::ProfilerV5 ncclProfiler_v5;
extern ncclwatch::abi::ProfilerV6 ncclProfiler_v6;
extern ncclwatch::abi::ProfilerV7 ncclProfiler_v7;
}

namespace ncclwatch::plugin {
namespace {

void* NoOp(void* arg) { return arg; }

// Runs in the engine's namespace right after it was loaded. `environ` here is the namespace libc's:
// it starts out pointing at the host's array, which the host's next setenv may free.
void AdoptHost(char* const* host_environ) {
  size_t n = 0;
  while (host_environ != nullptr && host_environ[n] != nullptr) ++n;
  auto** copy = static_cast<char**>(std::calloc(n + 1, sizeof(char*)));
  if (copy != nullptr) {
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (char* entry = strdup(host_environ[i])) copy[kept++] = entry;
    }
    environ = copy;  // never freed: getenv's results must stay valid
  }
  // The namespace's libc skips locking while it believes the process has one thread, and only its
  // own pthread_create tells it otherwise; NCCL's threads call in from the start.
  pthread_t t;
  if (pthread_create(&t, nullptr, NoOp, nullptr) == 0) pthread_join(t, nullptr);
  EnableHostThreadSetup();
}

int SetChain(const void* table, int version, const char* name) {
  if (table == nullptr) {
    chain::SetProblem(name);
    return 0;
  }
  return chain::SetChild(table, version, name) ? 0 : -1;
}

const ncclwatch_engine_api kApi = {
    NCCLWATCH_ENGINE_API_VERSION,
    sizeof(ncclwatch_engine_api),
    {&ncclProfiler_v4, &ncclProfiler_v5, &ncclProfiler_v6, &ncclProfiler_v7},
    AdoptHost,
    SetHostServices,
    MarkForkedChild,
    SetChain,
    {&chain::kTableV4, &chain::kTableV5, &chain::kTableV6, &chain::kTableV7},
};

}  // namespace
}  // namespace ncclwatch::plugin

extern "C" __attribute__((visibility("default"))) const ncclwatch_engine_api*
ncclwatch_engine_get_api() {
  return &ncclwatch::plugin::kApi;
}
