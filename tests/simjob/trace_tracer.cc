// The checks of the trace plugin; the invariants and the report line are listed in trace_tracer.h.
#include "tests/simjob/trace_tracer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace ncclwatch::simtrace {
namespace {

// Event types in report order, with their names.
constexpr std::pair<uint64_t, const char*> kTypes[] = {
    {abi::kGroupApi, "GroupApi"},
    {abi::kCollApi, "CollApi"},
    {abi::kP2pApi, "P2pApi"},
    {abi::kKernelLaunch, "KernelLaunch"},
    {abi::kGroup, "Group"},
    {abi::kColl, "Coll"},
    {abi::kP2p, "P2p"},
    {abi::kKernelCh, "KernelCh"},
    {abi::kKernelPhase, "KernelPhase"},
};

constexpr const char* kPhaseNames[] = {"initial_sync", "compute", "final_sync"};

}  // namespace

abi::Result Tracer::Init(int version, void** context, int* mask, int nranks, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = version;
  // Everything simjob can emit; v4 knows no API-level events, only v7 KernelPhase.
  constexpr int kV4Events = abi::kGroup | abi::kColl | abi::kP2p | abi::kKernelCh;
  constexpr int kApiEvents = abi::kGroupApi | abi::kCollApi | abi::kP2pApi | abi::kKernelLaunch;
  int wanted = version >= 5 ? kV4Events | kApiEvents : kV4Events;
  if (version >= 7) wanted |= static_cast<int>(abi::kKernelPhase);
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

void Tracer::Start(void* context, void** handle, const Descr& d) {
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
  if (task) user_tags_.insert(d.user_tag);
  if (task && version_ >= 7 && d.parent != nullptr) {
    // NCCL copies the call's tag into each of its events.
    auto it = events_.find(d.parent);
    if (it != events_.end() && it->second->user_tag != d.user_tag) {
      Violation("Coll/P2p userTag differs from its API event's");
    }
  }
  Event* phase_parent = d.type == abi::kKernelPhase ? CheckPhaseStart(d) : nullptr;
  ++counts_[d.type];
  if (null_types_ & d.type) {
    ++nulls_;
    return;
  }
  auto event = std::make_unique<Event>();
  event->type = d.type;
  event->comm = comm;
  event->p_timer = d.p_timer;
  event->channel = d.channel;
  event->user_tag = d.user_tag;
  if (d.type == abi::kKernelPhase) {
    event->parent = phase_parent;
    event->phase_id = d.phase_id;
    if (phase_parent != nullptr) ++phase_parent->open_phases;
  }
  *handle = event.get();
  events_.emplace(event.get(), std::move(event));
}

Tracer::Event* Tracer::CheckPhaseStart(const Descr& d) {
  if (version_ < 7) Violation("KernelPhase event on a v" + std::to_string(version_) + " table");
  if (d.phase_id < 0 || d.phase_id > 2) {
    Violation("KernelPhase phaseId " + std::to_string(d.phase_id));
    return nullptr;
  }
  if (d.phase_name == nullptr || std::strcmp(d.phase_name, kPhaseNames[d.phase_id]) != 0) {
    Violation("KernelPhase phaseName does not match phaseId " + std::to_string(d.phase_id));
  }
  auto it = events_.find(d.parent);
  if (it == events_.end() || it->second->type != abi::kKernelCh) return nullptr;  // CheckParent
  Event* ch = it->second.get();
  if (ch->stopped || ch->last_state != 0) {
    Violation("KernelPhase started after its KernelCh's KernelChStop or stop");
  }
  if (d.channel != ch->channel) Violation("KernelPhase channelId differs from its KernelCh's");
  if (d.phase_id <= ch->last_phase_id) Violation("KernelPhase phases out of order");
  if (d.p_timer < ch->p_timer || d.p_timer < ch->last_phase_end) {
    Violation("KernelPhase starts before its KernelCh or the previous phase");
  }
  ch->last_phase_id = d.phase_id;
  return ch;
}

void Tracer::Stop(void* handle) {
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
  if (e->type == abi::kKernelPhase) {
    if (e->last_state != abi::kKernelPhaseStop) Violation("KernelPhase stopped without state 31");
    if (e->parent != nullptr) {
      --e->parent->open_phases;
      e->parent->last_phase_end = e->end_timer;
    }
  }
  e->stopped = true;
}

void Tracer::Record(void* handle, abi::EventState state, const abi::StateArgs* args) {
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
    if (e->open_phases != 0) Violation("KernelChStop before its KernelPhase children stopped");
    if (args->kernel_ch.p_timer < e->last_phase_end) Violation("KernelPhase ends after KernelCh");
    e->end_timer = args->kernel_ch.p_timer;
    kch_ns_ += args->kernel_ch.p_timer - e->p_timer;
    ++kch_done_;
  } else if (e->type == abi::kKernelPhase) {
    return RecordPhaseStop(e, state, args);
  } else {
    Violation("recordEventState on non-updatable type " + std::to_string(e->type));
  }
  e->last_state = state;
}

void Tracer::RecordPhaseStop(Event* e, abi::EventState state, const abi::StateArgs* args) {
  if (state != abi::kKernelPhaseStop || e->last_state != 0) {
    return Violation("bad KernelPhase state " + std::to_string(state));
  }
  e->last_state = state;
  if (args == nullptr) return Violation("KernelPhaseStop with NULL args");
  e->end_timer = args->kernel_ch.p_timer;
  if (e->end_timer <= e->p_timer) Violation("KernelPhase stop pTimer <= start");
  if (e->phase_id == abi::kPhaseInitialSync && e->end_timer >= e->p_timer) {
    sync_ns_ += e->end_timer - e->p_timer;
  }
}

void Tracer::Finalize(void* context) {
  std::lock_guard<std::mutex> lock(mu_);
  Comm* comm = FindComm(context);
  if (comm == nullptr) return Violation("finalize of unknown context");
  if (comm->finalized) return Violation("second finalize");
  comm->finalized = true;
  if (--live_comms_ == 0) WriteReportLocked();
}

int Tracer::EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<int>(std::strtol(v, nullptr, 0)) : fallback;
}

Tracer::Comm* Tracer::FindComm(void* context) const {
  auto it = comms_.find(context);
  return it == comms_.end() ? nullptr : it->second.get();
}

// The host-side gating rule (docs/nccl-profiler-abi.md §6.2, §10), written as "which bits enable
// this type". Before v7 the KernelPhase bit does not count: NCCL 2.31's v6 shim clears it.
bool Tracer::Enabled(uint64_t type) const {
  constexpr uint64_t kBelowTask =
      abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin | abi::kKernelPhase;
  uint64_t enablers = type;
  if (type == abi::kKernelCh) enablers |= abi::kKernelPhase;
  if (type == abi::kColl || type == abi::kP2p) enablers |= kBelowTask;
  if (type == abi::kGroup) enablers |= abi::kColl | abi::kP2p | kBelowTask;
  if (type == abi::kCollApi) enablers |= abi::kColl | kBelowTask | abi::kCeColl;
  if (type == abi::kP2pApi) enablers |= abi::kP2p | kBelowTask;
  if (type == abi::kGroupApi) enablers = ~uint64_t{abi::kProxyCtrl};
  uint64_t mask = static_cast<uint32_t>(mask_);
  if (version_ < 7) mask &= ~abi::kKernelPhase;
  return (mask & enablers) != 0;
}

// Which types may be the parent of `type`; 0 means the parent must be NULL.
uint64_t Tracer::ParentTypes(uint64_t type) const {
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
    case abi::kKernelPhase:
      return abi::kKernelCh;
    default:
      return 0;
  }
}

void Tracer::CheckParent(const Descr& d) {
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
void Tracer::CheckLink(uint64_t type, void* link, uint64_t types, const char* what) {
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

Tracer::Event* Tracer::Find(void* handle, const char* call) {
  auto it = events_.find(handle);
  if (it == events_.end()) {
    Violation(std::string(call) + " on unknown handle");
    return nullptr;
  }
  return it->second.get();
}

void Tracer::Violation(const std::string& what) {
  if (violations_++ == 0) first_violation_ = what;
}

void Tracer::WriteReport() {
  std::lock_guard<std::mutex> lock(mu_);
  WriteReportLocked();
}

void Tracer::WriteReportLocked() {
  if (written_ || comms_.empty()) return;
  written_ = true;
  uint64_t unstopped = 0;
  for (const auto& [ptr, e] : events_) unstopped += e->stopped ? 0 : 1;
  const char* env_rank = std::getenv("RANK");
  std::string line = "rank=" + std::string(env_rank ? env_rank : std::to_string(rank_)) +
                     " pid=" + std::to_string(getpid()) + " abi=" + std::to_string(version_);
  char buf[96];
  std::snprintf(buf, sizeof(buf), " mask=0x%x comms=%zu", mask_, comms_.size());
  line += buf;
  for (const auto& [type, name] : kTypes) {
    line += " " + std::string(name) + "=" + std::to_string(counts_[type]);
  }
  line += " user_tags=" + std::to_string(user_tags_.size());
  auto mean_us = [](uint64_t ns, uint64_t n) {
    return n ? static_cast<double>(ns) / n / 1e3 : 0.0;
  };
  std::snprintf(buf, sizeof(buf), " kch_mean_us=%.3f sync_mean_us=%.3f",
                mean_us(kch_ns_, kch_done_), mean_us(sync_ns_, kch_done_));
  line += " null=" + std::to_string(nulls_) + " unstopped=" + std::to_string(unstopped) + buf +
          " violations=" + std::to_string(violations_) + " first=\"" + first_violation_ + "\"\n";
  const char* path = std::getenv("SIMJOB_TRACE_OUT");
  const int fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
  if (fd < 0) return;
  // One O_APPEND write per rank, so that concurrent ranks do not interleave.
  if (write(fd, line.data(), line.size()) < 0) line.clear();
  if (fd != 2) close(fd);
}

}  // namespace ncclwatch::simtrace
