// A training process whose own libraries clash with the plugin's: before NCCL loads the plugin, it
// loads, RTLD_GLOBAL (as PyTorch loads its own dependencies), a library that defines the gRPC,
// protobuf, abseil, OpenSSL and zlib names the plugin uses, each one a trap that aborts. Then it
// runs two communicators through the plugin and checks the other direction: none of the plugin's
// libraries may have joined the host's namespace, where the host's own later loads would find them.
//
//   plugin_trap_host TRAPS_SO PLUGIN_SO     (environment: the NCCLWATCH_* variables)
// Exit status: 0 when the job ran; 3 when a library could not be loaded; 4 when a plugin library
// is visible to the host; killed by SIGABRT when a trap fired.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>

#include "plugin/testing/nccl_driver.h"

namespace {

// The libraries the plugin brings that a host may carry copies of.
bool IsPluginDependency(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  for (const char* prefix : {"libgrpc", "libgpr", "libprotobuf", "libabsl_", "libupb", "libssl",
                             "libcrypto", "libz.", "libre2", "libcares", "libaddress_sorting",
                             "libncclwatch-engine", "libncclwatch-hostlibc"}) {
    if (std::strncmp(base, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TRAPS_SO PLUGIN_SO\n", argv[0]);
    return 2;
  }
  void* traps = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (traps == nullptr) {
    std::fprintf(stderr, "plugin_trap_host: %s\n", dlerror());
    return 3;
  }
  ncclwatch::testing::NcclDriver nccl(argv[2]);
  if (!nccl.ok()) {
    std::fprintf(stderr, "plugin_trap_host: %s\n", nccl.error().c_str());
    return 3;
  }
  void* a = nccl.Init(0x7a2a'0001, 0, 2);
  void* b = nccl.Init(0x7a2a'0002, 1, 2);
  for (uint64_t seq = 0; seq < 500; ++seq) {
    nccl.Collective(a, seq, 2);
    nccl.Collective(b, seq, 2);
  }
  // The host's namespace: the main program's link map.
  link_map* map = nullptr;
  if (dlinfo(dlopen(nullptr, RTLD_NOW), RTLD_DI_LINKMAP, &map) != 0) return 3;
  int visible = 0;
  for (; map != nullptr; map = map->l_next) {
    if (map->l_name != nullptr && IsPluginDependency(map->l_name)) {
      std::fprintf(stderr, "plugin_trap_host: the plugin's %s is in the host's namespace\n",
                   map->l_name);
      ++visible;
    }
  }
  nccl.Finalize(a);
  nccl.Finalize(b);
  return visible == 0 ? 0 : 4;
}
