// libnccl-profiler-simtrace.so: a test profiler plugin that checks the host's side of the ABI.
//
// It records every callback and checks the invariants that a real NCCL host keeps
// (docs/nccl-profiler-abi.md §3, §6, §7, §9): parents are handles this plugin returned, of the
// right type; KernelCh only under a Coll/P2p; every start gets exactly one stop, none after it;
// GroupApi gets state 23 then 24; KernelCh gets KernelChStop with a non-null argument before its
// stop; seqNumbers per (communicator, func) count 0, 1, 2, ... without gaps; only event types that
// the activation mask enables are emitted.
//
// When the last communicator is finalized (or at unload/exit if that never happens) it appends one
// line to the file named by $SIMJOB_TRACE_OUT (stderr if unset):
//   rank=R pid=P abi=N mask=0x.. comms=C GroupApi=.. CollApi=.. P2pApi=.. KernelLaunch=.. Group=..
//   Coll=.. P2p=.. KernelCh=.. null=.. unstopped=.. kch_mean_us=.. violations=N first="..."
// Knobs: $SIMJOB_TRACE_MASK overrides the activation mask it asks for; $SIMJOB_TRACE_NULL_TYPES is
// a mask of event types for which it returns a NULL handle (to exercise the host's NULL handling).
//
// One global mutex serializes every callback: simple, and this is a test plugin. Events are never
// freed before the report, so a stale handle is always recognizable.
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "plugin/abi.h"

namespace ncclwatch::simtrace {
namespace {

namespace abi = ::ncclwatch::abi;

struct Comm {
  int rank = 0;
  bool finalized = false;
  std::map<std::string, uint64_t> next_seq;  // per func
};

struct Event {
  uint64_t type = 0;
  Comm* comm = nullptr;
  bool stopped = false;
  int last_state = 0;    // GroupApi: 0, 23, 24; KernelCh: 0 or 22
  uint64_t p_timer = 0;  // KernelCh start
};

// Event types in report order, with their names.
constexpr std::pair<uint64_t, const char*> kTypes[] = {
    {abi::kGroupApi, "GroupApi"}, {abi::kCollApi, "CollApi"},
    {abi::kP2pApi, "P2pApi"},     {abi::kKernelLaunch, "KernelLaunch"},
    {abi::kGroup, "Group"},       {abi::kColl, "Coll"},
    {abi::kP2p, "P2p"},           {abi::kKernelCh, "KernelCh"},
};

class Tracer {
 public:
  // A single instance per loaded library; it writes its report at unload if nobody finalized.
  ~Tracer() { WriteReport(); }

  abi::Result Init(int version, void** context, int* mask, int nranks, int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    version_ = version;
    // Everything simjob can emit; v4 knows no API-level events.
    constexpr int kV4Events = abi::kGroup | abi::kColl | abi::kP2p | abi::kKernelCh;
    constexpr int kApiEvents = abi::kGroupApi | abi::kCollApi | abi::kP2pApi | abi::kKernelLaunch;
    const int wanted = version >= 5 ? kV4Events | kApiEvents : kV4Events;
    mask_ = EnvInt("SIMJOB_TRACE_MASK", wanted);
    null_types_ = EnvInt("SIMJOB_TRACE_NULL_TYPES", 0);
    *mask = mask_;
    auto comm = std::make_unique<Comm>();
    comm->rank = rank;
    if (nranks > world_size_) {  // report the rank in the largest communicator
      world_size_ = nranks;
      rank_ = rank;
    }
    ++live_comms_;
    *context = comm.get();
    comms_.emplace(comm.get(), std::move(comm));
    return abi::kSuccess;
  }

  // The version-independent part of every descriptor, filled by the per-version adapters.
  struct Descr {
    uint64_t type;
    void* parent;
    int rank;
    void* parent_group = nullptr;  // v5+ Coll/P2p
    const char* func = nullptr;    // Coll/P2p
    uint64_t seq = 0;              // Coll
    int n_channels = 0;            // Coll/P2p
    uint64_t p_timer = 0;          // KernelCh
  };

  void Start(void* context, void** handle, const Descr& d) {
    std::lock_guard<std::mutex> lock(mu_);
    *handle = nullptr;
    Comm* comm = FindComm(context);
    if (comm == nullptr || comm->finalized) Violation("startEvent with unknown/finalized context");
    if (!Enabled(d.type)) Violation("event type " + std::to_string(d.type) + " not enabled");
    CheckParent(d);
    const bool task = d.type == abi::kColl || d.type == abi::kP2p;
    if (task && comm != nullptr && d.rank != comm->rank) Violation("Coll/P2p rank != comm rank");
    if (!task && d.rank != 0) Violation("rank must be 0 for type " + std::to_string(d.type));
    if (task && (d.func == nullptr || d.n_channels <= 0)) Violation("task without func/channels");
    if (d.type == abi::kColl && comm != nullptr && d.func != nullptr) {
      uint64_t& next = comm->next_seq[d.func];
      if (d.seq != next) Violation("seqNumber gap for " + std::string(d.func));
      next = d.seq + 1;
    }
    if (d.type == abi::kKernelCh && d.p_timer == 0) Violation("KernelCh without start pTimer");
    ++counts_[d.type];
    if (null_types_ & d.type) {
      ++nulls_;
      return;
    }
    auto event = std::make_unique<Event>();
    event->type = d.type;
    event->comm = comm;
    event->p_timer = d.p_timer;
    *handle = event.get();
    events_.emplace(event.get(), std::move(event));
  }

  void Stop(void* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    Event* e = Find(handle, "stopEvent");
    if (e == nullptr) return;
    if (e->stopped) return Violation("second stopEvent");
    if (e->type == abi::kGroupApi && e->last_state != abi::kGroupEndApiStart) {
      Violation("GroupApi stopped without states 23, 24");
    }
    if (e->type == abi::kKernelCh && e->last_state != abi::kKernelChStop) {
      Violation("KernelCh stopped without KernelChStop");
    }
    e->stopped = true;
  }

  void Record(void* handle, abi::EventState state, const abi::StateArgs* args) {
    std::lock_guard<std::mutex> lock(mu_);
    Event* e = Find(handle, "recordEventState");
    if (e == nullptr) return;
    if (e->stopped) return Violation("recordEventState after stop");
    if (e->type == abi::kGroupApi) {
      // 23 right after start, 24 at group end; NCCL passes NULL args for both.
      const int expected = e->last_state == 0 ? abi::kGroupStartApiStop : abi::kGroupEndApiStart;
      if (state != expected) Violation("GroupApi state " + std::to_string(state) + " out of order");
    } else if (e->type == abi::kKernelCh) {
      if (state != abi::kKernelChStop || e->last_state != 0) Violation("bad KernelCh state");
      if (args == nullptr) return Violation("KernelChStop with NULL args");
      if (args->kernel_ch.p_timer < e->p_timer) Violation("KernelCh stop pTimer < start");
      kch_ns_ += args->kernel_ch.p_timer - e->p_timer;
      ++kch_done_;
    } else {
      Violation("recordEventState on non-updatable type " + std::to_string(e->type));
    }
    e->last_state = state;
  }

  void Finalize(void* context) {
    std::lock_guard<std::mutex> lock(mu_);
    Comm* comm = FindComm(context);
    if (comm == nullptr) return Violation("finalize of unknown context");
    if (comm->finalized) return Violation("second finalize");
    comm->finalized = true;
    if (--live_comms_ == 0) WriteReportLocked();
  }

 private:
  static int EnvInt(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? static_cast<int>(std::strtol(v, nullptr, 0)) : fallback;
  }

  Comm* FindComm(void* context) const {
    auto it = comms_.find(context);
    return it == comms_.end() ? nullptr : it->second.get();
  }

  // The host-side gating rule (docs/nccl-profiler-abi.md §6.2), written as "which bits enable this
  // type".
  bool Enabled(uint64_t type) const {
    constexpr uint64_t kBelowTask =
        abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin;
    uint64_t enablers = type;
    if (type == abi::kColl || type == abi::kP2p) enablers |= kBelowTask;
    if (type == abi::kGroup) enablers |= abi::kColl | abi::kP2p | kBelowTask;
    if (type == abi::kCollApi) enablers |= abi::kColl | kBelowTask | abi::kCeColl;
    if (type == abi::kP2pApi) enablers |= abi::kP2p | kBelowTask;
    if (type == abi::kGroupApi) enablers = ~uint64_t{abi::kProxyCtrl};
    return (static_cast<uint32_t>(mask_) & enablers) != 0;
  }

  // Which types may be the parent of `type`; 0 means the parent must be NULL.
  uint64_t ParentTypes(uint64_t type) const {
    switch (type) {
      case abi::kCollApi:
      case abi::kP2pApi:
      case abi::kKernelLaunch:
        return abi::kGroupApi;
      case abi::kColl:
        return version_ >= 5 ? abi::kCollApi : abi::kGroup;
      case abi::kP2p:
        return version_ >= 5 ? abi::kP2pApi : abi::kGroup;
      case abi::kKernelCh:
        return abi::kColl | abi::kP2p;
      default:
        return 0;
    }
  }

  void CheckParent(const Descr& d) {
    CheckLink(d.type, d.parent, ParentTypes(d.type), "parent");
    if (version_ >= 5 && (d.type == abi::kColl || d.type == abi::kP2p)) {
      CheckLink(d.type, d.parent_group, abi::kGroup, "parentGroup");
      if (auto it = events_.find(d.parent_group); it != events_.end() && it->second->stopped) {
        Violation("Coll/P2p parentGroup already stopped");
      }
    }
  }

  // `link` must be NULL if no parent is expected or the expected parent type got NULL handles,
  // and otherwise a live handle of one of `types`.
  void CheckLink(uint64_t type, void* link, uint64_t types, const char* what) {
    const std::string where = std::string(what) + " of type " + std::to_string(type);
    if (types == 0 || (null_types_ & types) == types) {
      if (link != nullptr) Violation(where + " should be NULL");
      return;
    }
    if (link == nullptr) {
      // A KernelCh under a Coll whose handle was NULL (only one of Coll|P2p nulled) is legal.
      if ((null_types_ & types) == 0) Violation(where + " is NULL");
      return;
    }
    auto it = events_.find(link);
    if (it == events_.end()) return Violation(where + " is not a handle we returned");
    if ((it->second->type & types) == 0) Violation(where + " has the wrong type");
  }

  Event* Find(void* handle, const char* call) {
    auto it = events_.find(handle);
    if (it == events_.end()) {
      Violation(std::string(call) + " on unknown handle");
      return nullptr;
    }
    return it->second.get();
  }

  void Violation(const std::string& what) {
    if (violations_++ == 0) first_violation_ = what;
  }

  void WriteReport() {
    std::lock_guard<std::mutex> lock(mu_);
    WriteReportLocked();
  }

  void WriteReportLocked() {
    if (written_ || comms_.empty()) return;
    written_ = true;
    uint64_t unstopped = 0;
    for (const auto& [ptr, e] : events_) unstopped += e->stopped ? 0 : 1;
    const char* env_rank = std::getenv("RANK");
    std::string line = "rank=" + std::string(env_rank ? env_rank : std::to_string(rank_)) +
                       " pid=" + std::to_string(getpid()) + " abi=" + std::to_string(version_);
    char buf[64];
    std::snprintf(buf, sizeof(buf), " mask=0x%x comms=%zu", mask_, comms_.size());
    line += buf;
    for (const auto& [type, name] : kTypes) {
      line += " " + std::string(name) + "=" + std::to_string(counts_[type]);
    }
    std::snprintf(buf, sizeof(buf), " kch_mean_us=%.3f",
                  kch_done_ ? static_cast<double>(kch_ns_) / kch_done_ / 1000.0 : 0.0);
    line += " null=" + std::to_string(nulls_) + " unstopped=" + std::to_string(unstopped) + buf +
            " violations=" + std::to_string(violations_) + " first=\"" + first_violation_ + "\"\n";
    const char* path = std::getenv("SIMJOB_TRACE_OUT");
    const int fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
    if (fd < 0) return;
    // One O_APPEND write per rank, so that concurrent ranks do not interleave.
    if (write(fd, line.data(), line.size()) < 0) line.clear();
    if (fd != 2) close(fd);
  }

  std::mutex mu_;
  int version_ = 0;
  int mask_ = 0;
  int null_types_ = 0;
  int world_size_ = 0;
  int rank_ = -1;
  int live_comms_ = 0;
  bool written_ = false;
  std::map<void*, std::unique_ptr<Comm>> comms_;
  std::map<void*, std::unique_ptr<Event>> events_;
  std::map<uint64_t, uint64_t> counts_;
  uint64_t nulls_ = 0;
  uint64_t kch_ns_ = 0;
  uint64_t kch_done_ = 0;
  uint64_t violations_ = 0;
  std::string first_violation_;
};

Tracer g_tracer;

// ---- per-version adapters ----------------------------------------------------------------------

template <typename D>
Tracer::Descr Common(const D& d) {
  Tracer::Descr c{d.type, d.parent_obj, d.rank};
  if (d.type == abi::kColl) {
    c.func = d.coll.func;
    c.seq = d.coll.seq_number;
    c.n_channels = d.coll.n_channels;
  } else if (d.type == abi::kP2p) {
    c.func = d.p2p.func;
    c.n_channels = d.p2p.n_channels;
  } else if (d.type == abi::kKernelCh) {
    c.p_timer = d.kernel_ch.p_timer;
  }
  return c;
}

template <typename D>
Tracer::Descr CommonV5(const D& d) {
  Tracer::Descr c = Common(d);
  if (d.type == abi::kColl) c.parent_group = d.coll.parent_group;
  if (d.type == abi::kP2p) c.parent_group = d.p2p.parent_group;
  return c;
}

abi::Result InitV4(void** ctx, int* mask, const char*, uint64_t, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(4, ctx, mask, nranks, rank);
}
abi::Result InitV5(void** ctx, uint64_t, int* mask, const char*, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(5, ctx, mask, nranks, rank);
}
abi::Result InitV6(void** ctx, uint64_t, int* mask, const char*, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(6, ctx, mask, nranks, rank);
}
abi::Result StartV4(void* ctx, void** handle, abi::EventDescrV4* d) {
  g_tracer.Start(ctx, handle, Common(*d));
  return abi::kSuccess;
}
abi::Result StartV5(void* ctx, void** handle, abi::EventDescrV5* d) {
  g_tracer.Start(ctx, handle, CommonV5(*d));
  return abi::kSuccess;
}
abi::Result StartV6(void* ctx, void** handle, abi::EventDescrV6* d) {
  g_tracer.Start(ctx, handle, CommonV5(*d));
  return abi::kSuccess;
}
abi::Result Stop(void* handle) {
  g_tracer.Stop(handle);
  return abi::kSuccess;
}
abi::Result Record(void* handle, abi::EventState state, abi::StateArgs* args) {
  g_tracer.Record(handle, state, args);
  return abi::kSuccess;
}
abi::Result Finalize(void* ctx) {
  g_tracer.Finalize(ctx);
  return abi::kSuccess;
}

}  // namespace
}  // namespace ncclwatch::simtrace

// The only symbols this library exports (it is built with -fvisibility=hidden).
namespace simtrace = ncclwatch::simtrace;
extern "C" {
__attribute__((visibility("default")))
ncclwatch::abi::ProfilerV4 ncclProfiler_v4 = {"simtrace",     simtrace::InitV4, simtrace::StartV4,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
__attribute__((visibility("default")))
ncclwatch::abi::ProfilerV5 ncclProfiler_v5 = {"simtrace",     simtrace::InitV5, simtrace::StartV5,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
__attribute__((visibility("default")))
ncclwatch::abi::ProfilerV6 ncclProfiler_v6 = {"simtrace",     simtrace::InitV6, simtrace::StartV6,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
}
