// What the plugin's isolation costs a training process: the time NCCL's dlopen of the loader
// takes (the engine's libraries are loaded and constructed then), the time of the first
// communicator init (the plugin starts: configuration, recorder, gRPC channel, threads), and the
// memory the process gains (resident and proportional set size), with the engine in its own
// link-map namespace and, for comparison, in the host's (NCCLWATCH_ISOLATION=none). Each sample
// is a fresh process (this program re-executed); the table shows medians.
//
//   plugin_load_bench [--runs=N] [--plugin=PATH]     (default: 9 runs, the built plugin)
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "plugin/testing/nccl_driver.h"

namespace {

// Resident and proportional set size of this process, KiB.
void Memory(long* rss_kib, long* pss_kib) {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  *rss_kib = *pss_kib = 0;
  while (std::getline(in, line)) {  // "Rss:   1234 kB"; the first line names the range
    long value = 0;
    if (std::sscanf(line.c_str(), "Rss: %ld", &value) == 1) *rss_kib = value;
    if (std::sscanf(line.c_str(), "Pss: %ld", &value) == 1) *pss_kib = value;
  }
}

int ObjectsInHostNamespace() {
  link_map* map = nullptr;
  if (dlinfo(dlopen(nullptr, RTLD_NOW), RTLD_DI_LINKMAP, &map) != 0) return -1;
  int n = 0;
  for (; map != nullptr; map = map->l_next) ++n;
  return n;
}

// One sample, in this (fresh) process: "load_ms init_ms rss_kib pss_kib objects_before after".
int Child(const char* plugin) {
  using Clock = std::chrono::steady_clock;
  long rss0, pss0, rss1, pss1;
  const int objects0 = ObjectsInHostNamespace();
  Memory(&rss0, &pss0);
  const auto t0 = Clock::now();
  ncclwatch::testing::NcclDriver nccl(plugin);
  const auto t1 = Clock::now();
  if (!nccl.ok()) {
    std::fprintf(stderr, "plugin_load_bench: %s\n", nccl.error().c_str());
    return 1;
  }
  void* ctx = nccl.Init(0x10ad, 0, 2);
  const auto t2 = Clock::now();
  for (uint64_t seq = 0; seq < 1000; ++seq) nccl.Collective(ctx, seq, 2);
  Memory(&rss1, &pss1);
  std::printf("%.2f %.2f %ld %ld %d %d\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count(), rss1 - rss0, pss1 - pss0,
              objects0, ObjectsInHostNamespace());
  std::fflush(stdout);
  _exit(0);  // the sample is taken; the plugin's exit path is not what is measured here
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 9;
  std::string plugin = NCCLWATCH_PLUGIN_SO;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--child=", 0) == 0) return Child(a.c_str() + 8);
    if (a.rfind("--runs=", 0) == 0) {
      runs = std::atoi(a.c_str() + 7);
    } else if (a.rfind("--plugin=", 0) == 0) {
      plugin = a.substr(9);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--runs=N] [--plugin=PATH]\n"
                   "  Loads the plugin in N fresh processes per isolation mode and prints the\n"
                   "  median load time, first-init time and memory gained.\n",
                   argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (runs < 1) runs = 1;
  setenv("NCCLWATCH_AGENT_ADDR", "unix:///nonexistent/ncclwatch-load-bench.sock", 1);
  std::printf("%-10s %9s %9s %10s %10s %18s\n", "isolation", "load ms", "init ms", "RSS MiB",
              "PSS MiB", "host-ns objects");
  for (const char* mode : {"namespace", "none"}) {
    setenv("NCCLWATCH_ISOLATION", mode, 1);
    std::vector<double> load, init, rss, pss;
    int before = 0, after = 0;
    for (int r = 0; r < runs; ++r) {
      std::string cmd = "'" + std::string(argv[0]) + "' --child='" + plugin + "' 2>/dev/null";
      FILE* p = popen(cmd.c_str(), "r");
      double l, i;
      long rk, pk;
      if (p == nullptr ||
          std::fscanf(p, "%lf %lf %ld %ld %d %d", &l, &i, &rk, &pk, &before, &after) != 6) {
        std::fprintf(stderr, "plugin_load_bench: sample %d (%s) failed\n", r, mode);
        if (p != nullptr) pclose(p);
        return 1;
      }
      pclose(p);
      load.push_back(l);
      init.push_back(i);
      rss.push_back(rk / 1024.0);
      pss.push_back(pk / 1024.0);
    }
    std::printf("%-10s %9.1f %9.1f %10.1f %10.1f %11d -> %d\n", mode, Median(load), Median(init),
                Median(rss), Median(pss), before, after);
  }
  return 0;
}
