#include "plugin/chain.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "plugin/adapter.h"
#include "plugin/lifecycle.h"
#include "plugin/recorder.h"

namespace ncclwatch::plugin::chain {
namespace {

// What NCCL keeps as a communicator's profiler context when a second plugin is chained.
struct Context {
  void* ours;
  void* theirs;
};

// Communicators a process can have chained; beyond that a communicator gets no context (it has
// no events, in either plugin) and the first init past the limit says so.
constexpr size_t kMaxContexts = 16384;
Context g_contexts[kMaxContexts];  // zero pages until used; never freed
std::atomic<size_t> g_contexts_used{0};

bool IsContext(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(&g_contexts[0]);
  return addr >= base && addr < base + sizeof(g_contexts) && (addr - base) % sizeof(Context) == 0;
}

const void* g_child = nullptr;
int g_child_version = 0;
char g_child_name[256];  // copied: the loader's copy is the host's environment
pid_t g_pid = 0;
// The second plugin's activation mask: one for the process, as NCCL's own (it may keep the
// pointer), never the one NCCL hands us.
int g_child_mask = 0;
// The event types (bits) the second plugin is handed: those of its version that its mask asks
// for (Wanted), refreshed after each of its inits.
std::atomic<uint64_t> g_deliver{0};
// The Recorder whose pool tells ncclwatch's handles from the second plugin's and keeps the
// second plugin's handles (ChainedCell): set at the first init that started it, never reset.
// Not ActiveRecorder(), which a forked child clears: there ncclwatch does nothing, but a handle
// of its must still never reach the second plugin as the second plugin's own.
std::atomic<Recorder*> g_handles{nullptr};

const abi::ProfilerV5* ChildV5() { return static_cast<const abi::ProfilerV5*>(g_child); }
const abi::ProfilerV6* ChildV6() { return static_cast<const abi::ProfilerV6*>(g_child); }
const abi::ProfilerV7* ChildV7() { return static_cast<const abi::ProfilerV7*>(g_child); }

// The event types of the second plugin's version.
uint64_t ChildTypes() {
  const uint64_t v5 = abi::kGroup | abi::kColl | abi::kP2p | abi::kProxyOp | abi::kProxyStep |
                      abi::kProxyCtrl | abi::kKernelCh | abi::kNetPlugin | abi::kGroupApi |
                      abi::kCollApi | abi::kP2pApi | abi::kKernelLaunch;
  const uint64_t v6 = v5 | abi::kCeColl | abi::kCeSync | abi::kCeBatch;
  return g_child_version >= 7 ? v6 | abi::kKernelPhase : g_child_version == 6 ? v6 : v5;
}

// Whether NCCL would emit `type` to a plugin alone with `mask`: its own bit, or a descendant's
// (docs/nccl-profiler-abi.md §6.2; KernelCh also for KernelPhase).
bool Wanted(uint64_t type, int mask) {
  const uint64_t m = static_cast<uint32_t>(mask);
  const uint64_t task_children =
      abi::kProxyOp | abi::kProxyStep | abi::kKernelCh | abi::kNetPlugin | abi::kKernelPhase;
  switch (type) {
    case abi::kGroup:
      return (m & (abi::kGroup | abi::kColl | abi::kP2p | task_children)) != 0;
    case abi::kColl:
      return (m & (abi::kColl | task_children)) != 0;
    case abi::kP2p:
      return (m & (abi::kP2p | task_children)) != 0;
    case abi::kProxyOp:
      return (m & (abi::kProxyOp | abi::kProxyStep | abi::kNetPlugin)) != 0;
    case abi::kProxyStep:
      return (m & (abi::kProxyStep | abi::kNetPlugin)) != 0;
    case abi::kKernelCh:
      return (m & (abi::kKernelCh | abi::kKernelPhase)) != 0;
    case abi::kCollApi:
      return (m & (abi::kCollApi | abi::kColl | task_children | abi::kCeColl | abi::kCeSync |
                   abi::kCeBatch)) != 0;
    case abi::kP2pApi:
      return (m & (abi::kP2pApi | abi::kP2p | task_children)) != 0;
    case abi::kGroupApi:
      return (m & ~static_cast<uint64_t>(abi::kProxyCtrl)) != 0;
    case abi::kCeColl:
      return (m & (abi::kCeColl | abi::kCeSync | abi::kCeBatch)) != 0;
    default:
      return (m & type) != 0;
  }
}

// The second plugin's init, in its version's argument order (the same for v5-v7).
void InitChild(Context* ctx, uint64_t comm_id, const char* comm_name, int n_nodes, int nranks,
               int rank, abi::Logger logfn) {
  ctx->theirs = nullptr;
  const abi::Result r = ChildV5()->init(&ctx->theirs, comm_id, &g_child_mask, comm_name, n_nodes,
                                        nranks, rank, logfn);
  if (r != abi::kSuccess) ctx->theirs = nullptr;  // it declined this communicator
  // What it is handed from now on, decided once rather than per event.
  uint64_t deliver = 0;
  for (int bit = 0; bit < 16; ++bit) {
    const uint64_t type = uint64_t{1} << bit;
    if ((ChildTypes() & type) != 0 && Wanted(type, g_child_mask)) deliver |= type;
  }
  g_deliver.store(deliver, std::memory_order_relaxed);
}

// Our init for NCCL's version `V`, then the second plugin's; NCCL's mask is their union.
template <typename OurInit>
abi::Result InitBoth(void** context, int* mask, uint64_t comm_id, const char* comm_name,
                     int n_nodes, int nranks, int rank, abi::Logger logfn, OurInit our_init,
                     bool serve_child = true) {
  *context = nullptr;
  const size_t i = g_contexts_used.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxContexts) {
    g_contexts_used.store(kMaxContexts, std::memory_order_relaxed);
    static std::atomic<bool> said{false};
    if (logfn != nullptr && !said.exchange(true)) {
      logfn(abi::kLogWarn, abi::kLogSubsysProfile, __FILE__, __LINE__,
            "ncclwatch: more than %zu communicators with a chained profiler plugin: the next "
            "ones are not profiled",
            kMaxContexts);
    }
    return abi::kSuccess;
  }
  Context* ctx = &g_contexts[i];
  int ours_mask = 0;
  our_init(&ctx->ours, &ours_mask);
  if (Recorder* rec = ActiveRecorder()) g_handles.store(rec, std::memory_order_release);
  ctx->theirs = nullptr;
  if (serve_child) InitChild(ctx, comm_id, comm_name, n_nodes, nranks, rank, logfn);
  // NCCL keeps one mask for the process (the last init's): the union, whichever declined this one.
  if (mask != nullptr) *mask = ours_mask | (serve_child ? g_child_mask : 0);
  *context = ctx;
  return abi::kSuccess;
}

// The size of the union member that describes an event of `type` in NCCL's descriptor `NV` (0:
// none in that version).
template <typename NV>
size_t MemberSize(uint64_t type) {
  const NV* d = nullptr;
  switch (type) {
    case abi::kColl:
      return sizeof(d->coll);
    case abi::kP2p:
      return sizeof(d->p2p);
    case abi::kProxyOp:
      return sizeof(d->proxy_op);
    case abi::kProxyStep:
      return sizeof(d->proxy_step);
    case abi::kKernelCh:
      return sizeof(d->kernel_ch);
    case abi::kNetPlugin:
      return sizeof(d->net_plugin);
    default:
      break;
  }
  if constexpr (requires { d->group_api; }) {
    switch (type) {
      case abi::kGroupApi:
        return sizeof(d->group_api);
      case abi::kCollApi:
        return sizeof(d->coll_api);
      case abi::kP2pApi:
        return sizeof(d->p2p_api);
      case abi::kKernelLaunch:
        return sizeof(d->kernel_launch);
      default:
        break;
    }
  }
  if constexpr (requires { d->ce_coll; }) {
    switch (type) {
      case abi::kCeColl:
        return sizeof(d->ce_coll);
      case abi::kCeSync:
        return sizeof(d->ce_sync);
      case abi::kCeBatch:
        return sizeof(d->ce_batch);
      default:
        break;
    }
  }
  if constexpr (requires { d->kernel_phase; }) {
    if (type == abi::kKernelPhase) return sizeof(d->kernel_phase);
  }
  return 0;
}

// NCCL's descriptor of version `NV` laid out as v7's, for a second plugin newer than NCCL (a v6
// plugin reads the v7 layout as its own): every version puts the union at the same offset, and
// v5-v7 agree on every field the older has (abi_v5.h .. abi_v7.h pin the offsets). Only the
// event's own member is copied, so that the fields a newer version added (the user tags) read 0,
// not what the union held beyond it. (A v4 NCCL serves no second plugin: InitV4.)
template <typename NV>
void ToChild(const NV& in, abi::EventDescrV7* out) {
  static_assert(offsetof(NV, coll) == offsetof(abi::EventDescrV7, coll));
  std::memset(out, 0, sizeof(*out));
  out->type = in.type;
  out->parent_obj = in.parent_obj;
  out->rank = in.rank;
  const size_t size = MemberSize<NV>(in.type);
  std::memcpy(reinterpret_cast<char*>(out) + offsetof(abi::EventDescrV7, coll),
              reinterpret_cast<const char*>(&in) + offsetof(NV, coll), size);
}

// The version NCCL speaks with us, from its descriptor type.
template <typename NV>
constexpr int VersionOf() {
  if constexpr (std::is_same_v<NV, abi::EventDescrV7>) return 7;
  if constexpr (std::is_same_v<NV, abi::EventDescrV6>) return 6;
  if constexpr (std::is_same_v<NV, abi::EventDescrV5>) return 5;
  return 4;
}

abi::Result CallChild(void* context, void** handle, void* descr) {
  switch (g_child_version) {
    case 7:
      return ChildV7()->start_event(context, handle, static_cast<abi::EventDescrV7*>(descr));
    case 6:
      return ChildV6()->start_event(context, handle, static_cast<abi::EventDescrV6*>(descr));
    default:
      return ChildV5()->start_event(context, handle, static_cast<abi::EventDescrV5*>(descr));
  }
}

// Hands the event to the second plugin with `parent` (its own handle for the parent event) as
// its parent; returns its handle (null: none, or not handed).
template <typename NV>
void* StartChild(Context* ctx, NV* descr, void* parent) {
  if (ctx->theirs == nullptr) return nullptr;
  const uint64_t type = descr->type;
  if ((g_deliver.load(std::memory_order_relaxed) & type) == 0) return nullptr;
  void* handle = nullptr;
  abi::Result r;
  if (VersionOf<NV>() >= g_child_version) {
    // Its version's fields are where NCCL's descriptor has them: handed over as it is, its
    // parent swapped for the call and put back (NCCL's descriptor, ours until we return).
    void* const ncclwatch_parent = descr->parent_obj;
    descr->parent_obj = parent;
    r = CallChild(ctx->theirs, &handle, descr);
    descr->parent_obj = ncclwatch_parent;
  } else {
    abi::EventDescrV7 d;  // a newer version than NCCL's: re-laid, its newer fields 0
    ToChild(*descr, &d);
    d.parent_obj = parent;
    r = CallChild(ctx->theirs, &handle, &d);
  }
  // Group handles are never ncclwatch's (it keeps no Group record): parent_group is theirs.
  return r == abi::kSuccess ? handle : nullptr;
}

// What ncclwatch's new handle `ours` for an event of `type` is, without decoding its address: the
// adapter's StartOp gives a slot, its kernel channel the parent slot's channel, its KernelPhase
// the parent channel's (`parent`: the parent handle decoded).
template <typename NV>
OpPool::Decoded OwnHandle(Recorder& rec, const NV& descr, void* ours,
                          const OpPool::Decoded& parent) {
  using D = OpPool::Decoded;
  switch (static_cast<uint64_t>(descr.type)) {
    case abi::kColl:
    case abi::kP2p:
      return D{D::kOp, static_cast<OpSlot*>(ours), -1};
    case abi::kKernelCh:
      if (parent.type == D::kOp) return D{D::kChannel, parent.slot, descr.kernel_ch.channel_id};
      break;
    case abi::kKernelPhase:
      if (parent.type == D::kChannel) return D{D::kPhase, parent.slot, parent.channel};
      break;
    default:
      break;
  }
  return rec.Decode(ours);
}

// Proxy events may carry another process's context (PXN): only ours are pairs.
template <typename NV>
bool Foreign(const void* context, const NV& descr) {
  const uint64_t type = descr.type;
  if (type != abi::kProxyOp && type != abi::kProxyStep && type != abi::kNetPlugin) return false;
  if (!IsContext(context)) return true;
  return type == abi::kProxyOp && descr.proxy_op.pid != g_pid;
}

template <typename NV, typename OurStart>
abi::Result StartBoth(void* context, void** handle, NV* descr, OurStart our_start) noexcept {
  *handle = nullptr;  // always written: NCCL keeps a handle it was not given (a stale parent)
  if (descr == nullptr || !IsContext(context) || Foreign(context, *descr)) return abi::kSuccess;
  auto* ctx = static_cast<Context*>(context);
  Recorder* rec = g_handles.load(std::memory_order_acquire);
  // The parent, decoded once: when it is ncclwatch's, the second plugin's handle for the same
  // event is its parent; else the parent is the second plugin's own already.
  void* const parent = descr->parent_obj;
  const OpPool::Decoded pd =
      rec != nullptr && parent != nullptr ? rec->Decode(parent) : OpPool::Decoded{};
  void* their_parent = parent;
  if (pd.type != OpPool::Decoded::kNone) {
    std::atomic<void*>* cell = rec->ChainedCell(pd);
    their_parent = cell != nullptr ? cell->load(std::memory_order_acquire) : nullptr;
  }
  void* ours = nullptr;
  if (ctx->ours != nullptr) our_start(ctx->ours, &ours, descr);
  void* theirs = StartChild(ctx, descr, their_parent);
  if (ours == nullptr) {
    *handle = theirs;
    return abi::kSuccess;
  }
  if (rec != nullptr) {
    if (std::atomic<void*>* cell = rec->ChainedCell(OwnHandle(*rec, *descr, ours, pd))) {
      cell->store(theirs, std::memory_order_release);
    }
  }
  *handle = ours;
  return abi::kSuccess;
}

abi::Result StopBoth(void* handle) noexcept {
  if (handle == nullptr) return abi::kSuccess;
  Recorder* rec = g_handles.load(std::memory_order_acquire);
  const OpPool::Decoded d = rec != nullptr ? rec->Decode(handle) : OpPool::Decoded{};
  void* theirs = handle;  // a handle not ncclwatch's is the second plugin's
  if (d.type != OpPool::Decoded::kNone) {
    std::atomic<void*>* cell = rec->ChainedCell(d);
    theirs = cell != nullptr ? cell->load(std::memory_order_acquire) : nullptr;
    // After reading the cell: the stop may free the record. None in a forked child.
    if (ActiveRecorder() != nullptr) rec->StopEvent(d);
  }
  if (theirs != nullptr) ChildV5()->stop_event(theirs);
  return abi::kSuccess;
}

abi::Result RecordBoth(void* handle, abi::EventState state, abi::StateArgs* args) noexcept {
  if (handle == nullptr) return abi::kSuccess;
  Recorder* rec = g_handles.load(std::memory_order_acquire);
  const OpPool::Decoded d = rec != nullptr ? rec->Decode(handle) : OpPool::Decoded{};
  void* theirs = handle;
  if (d.type != OpPool::Decoded::kNone) {
    std::atomic<void*>* cell = rec->ChainedCell(d);
    theirs = cell != nullptr ? cell->load(std::memory_order_acquire) : nullptr;
    if (ActiveRecorder() != nullptr) adapter::RecordDecoded(*rec, d, state, args);
  }
  if (theirs != nullptr) ChildV5()->record_event_state(theirs, state, args);
  return abi::kSuccess;
}

abi::Result FinalizeBoth(void* context) noexcept {
  if (!IsContext(context)) return abi::kSuccess;
  auto* ctx = static_cast<Context*>(context);
  if (ctx->ours != nullptr) adapter::Finalize(ctx->ours);
  if (ctx->theirs != nullptr) ChildV5()->finalize(ctx->theirs);
  return abi::kSuccess;
}

// ---- per version NCCL speaks with us -----------------------------------------------------------

// An NCCL that speaks v4 (before 2.28) emits none of the API events a v5 plugin's Coll and P2p
// events hang from, and would not load such a plugin itself: the second plugin is not served.
abi::Result InitV4(void** context, int* mask, const char* comm_name, uint64_t comm_hash,
                   int n_nodes, int nranks, int rank, abi::Logger logfn) noexcept {
  static std::atomic<bool> said{false};
  if (logfn != nullptr && !said.exchange(true)) {
    logfn(abi::kLogWarn, abi::kLogSubsysProfile, __FILE__, __LINE__,
          "ncclwatch: NCCLWATCH_CHAIN_PLUGIN: this NCCL speaks profiler ABI v4, which %s (v%d) "
          "cannot run under (no API events); running without it",
          g_child_name, g_child_version);
  }
  return InitBoth(
      context, mask, comm_hash, comm_name, n_nodes, nranks, rank, logfn,
      [&](void** ours, int* ours_mask) {
        v4::Init(ours, ours_mask, comm_name, comm_hash, n_nodes, nranks, rank, logfn);
      },
      /*serve_child=*/false);
}

template <auto OurInit>
abi::Result InitV5Up(void** context, uint64_t comm_id, int* mask, const char* comm_name,
                     int n_nodes, int nranks, int rank, abi::Logger logfn) noexcept {
  return InitBoth(context, mask, comm_id, comm_name, n_nodes, nranks, rank, logfn,
                  [&](void** ours, int* ours_mask) {
                    OurInit(ours, comm_id, ours_mask, comm_name, n_nodes, nranks, rank, logfn);
                  });
}

template <typename NV, auto OurStart>
abi::Result Start(void* context, void** handle, NV* descr) noexcept {
  return StartBoth(context, handle, descr,
                   [](void* ours, void** h, NV* d) { OurStart(ours, h, d); });
}

}  // namespace

bool SetChild(const void* table, int version, const char* name) {
  if (table == nullptr || version < 5 || version > 7) return false;
  g_child = table;
  g_child_version = version;
  std::snprintf(g_child_name, sizeof(g_child_name), "%s", name != nullptr ? name : "");
  g_pid = getpid();
  return true;
}

int ChildVersion() { return g_child_version; }
const char* ChildName() { return g_child_name; }

namespace {
char g_problem[768];
}  // namespace

void SetProblem(const char* why) {
  std::snprintf(g_problem, sizeof(g_problem), "%s", why != nullptr ? why : "");
}
const char* Problem() { return g_problem; }

const abi::ProfilerV4 kTableV4 = {"ncclwatch", InitV4,     Start<abi::EventDescrV4, v4::StartEvent>,
                                  StopBoth,    RecordBoth, FinalizeBoth};
const abi::ProfilerV5 kTableV5 = {
    "ncclwatch", InitV5Up<v5::Init>, Start<abi::EventDescrV5, v5::StartEvent>,
    StopBoth,    RecordBoth,         FinalizeBoth};
const abi::ProfilerV6 kTableV6 = {
    "ncclwatch", InitV5Up<v6::Init>, Start<abi::EventDescrV6, v6::StartEvent>,
    StopBoth,    RecordBoth,         FinalizeBoth};
const abi::ProfilerV7 kTableV7 = {
    "ncclwatch", InitV5Up<v7::Init>, Start<abi::EventDescrV7, v7::StartEvent>,
    StopBoth,    RecordBoth,         FinalizeBoth};

}  // namespace ncclwatch::plugin::chain
