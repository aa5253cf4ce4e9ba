// The checking core of libnccl-profiler-simtrace.so (trace_plugin.cc holds its exported
// ncclProfiler_v4/_v5/_v6/_v7 tables): a test profiler plugin that checks the host's side of the
// ABI.
//
// It records every callback and checks the invariants that a real NCCL host keeps
// (docs/nccl-profiler-abi.md §3, §6, §7, §9, §10): parents are handles this plugin returned, of
// the right type; KernelCh only under a Coll/P2p; every start gets exactly one stop, none after it;
// GroupApi gets state 23 then 24; KernelCh gets KernelChStop with a non-null argument before its
// stop; seqNumbers per (communicator, func) count 0, 1, 2, ... without gaps; only event types that
// the activation mask enables are emitted. v7: a Coll/P2p carries its API event's user tag;
// KernelPhase events reach only a v7 table, only under a live KernelCh of the same channel, in
// phase order (0 initial_sync, 1 compute, 2 final_sync, each at most once, not overlapping, inside
// the channel's time), each gets KernelPhaseStop (31) with a non-null argument before its stop,
// and all of them stop before their channel's KernelChStop.
//
// When the last communicator is finalized (or at unload/exit if that never happens) it appends one
// line to the file named by $SIMJOB_TRACE_OUT (stderr if unset):
//   rank=R pid=P abi=N mask=0x.. comms=C GroupApi=.. CollApi=.. P2pApi=.. KernelLaunch=.. Group=..
//   Coll=.. P2p=.. KernelCh=.. KernelPhase=.. user_tags=.. null=.. unstopped=.. kch_mean_us=..
//   sync_mean_us=.. violations=N first="..."
// (user_tags: distinct user tags of the Coll/P2p events, 0 included; sync_mean_us: the initial-sync
// phases' total over the completed KernelCh events, whose mean kch_mean_us is.) Knobs:
// $SIMJOB_TRACE_MASK overrides the activation mask it asks for; $SIMJOB_TRACE_NULL_TYPES is a mask
// of event types for which it returns a NULL handle (to exercise the host's NULL handling).
//
// One global mutex serializes every callback: simple, and this is a test plugin. Events are never
// freed before the report, so a stale handle is always recognizable.
#ifndef NCCLWATCH_TESTS_SIMJOB_TRACE_TRACER_H_
#define NCCLWATCH_TESTS_SIMJOB_TRACE_TRACER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::simtrace {

class Tracer {
 public:
  // The version-independent part of every descriptor, filled by the per-version adapters.
  struct Descr {
    uint64_t type;
    void* parent;
    int rank;
    void* parent_group = nullptr;      // v5+ Coll/P2p
    const char* func = nullptr;        // Coll/P2p
    uint64_t seq = 0;                  // Coll
    int n_channels = 0;                // Coll/P2p
    uint64_t p_timer = 0;              // KernelCh, KernelPhase
    int channel = 0;                   // KernelCh, KernelPhase
    int phase_id = 0;                  // KernelPhase
    const char* phase_name = nullptr;  // KernelPhase
    uint64_t user_tag = 0;             // v7 CollApi/P2pApi/Coll/P2p
  };

  // A single instance per loaded library; it writes its report at unload if nobody finalized.
  ~Tracer() { WriteReport(); }

  abi::Result Init(int version, void** context, int* mask, int nranks, int rank);
  void Start(void* context, void** handle, const Descr& d);
  void Stop(void* handle);
  void Record(void* handle, abi::EventState state, const abi::StateArgs* args);
  void Finalize(void* context);

 private:
  struct Comm {
    int rank = 0;
    bool finalized = false;
    std::map<std::string, uint64_t> next_seq;  // per func
  };

  struct Event {
    uint64_t type = 0;
    Comm* comm = nullptr;
    bool stopped = false;
    int last_state = 0;       // GroupApi: 0, 23, 24; KernelCh: 0 or 22; KernelPhase: 0 or 31
    uint64_t p_timer = 0;     // KernelCh, KernelPhase: start
    uint64_t end_timer = 0;   // KernelCh, KernelPhase: stop
    int channel = 0;          // KernelCh, KernelPhase
    uint64_t user_tag = 0;    // API and task events (v7)
    Event* parent = nullptr;  // KernelPhase: its KernelCh (null if it had a NULL handle)
    int phase_id = -1;        // KernelPhase
    // KernelCh: its phases so far.
    int open_phases = 0;
    int last_phase_id = -1;
    uint64_t last_phase_end = 0;
  };

  static int EnvInt(const char* name, int fallback);
  Comm* FindComm(void* context) const;
  bool Enabled(uint64_t type) const;
  uint64_t ParentTypes(uint64_t type) const;
  void CheckParent(const Descr& d);
  void CheckLink(uint64_t type, void* link, uint64_t types, const char* what);
  // KernelPhase start: returns its live KernelCh parent, or null.
  Event* CheckPhaseStart(const Descr& d);
  void RecordPhaseStop(Event* e, abi::EventState state, const abi::StateArgs* args);
  Event* Find(void* handle, const char* call);
  void Violation(const std::string& what);
  void WriteReport();
  void WriteReportLocked();

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
  std::set<uint64_t> user_tags_;  // of Coll/P2p events
  uint64_t nulls_ = 0;
  uint64_t kch_ns_ = 0;
  uint64_t kch_done_ = 0;
  uint64_t sync_ns_ = 0;  // initial-sync phases
  uint64_t violations_ = 0;
  std::string first_violation_;
};

}  // namespace ncclwatch::simtrace

#endif  // NCCLWATCH_TESTS_SIMJOB_TRACE_TRACER_H_
