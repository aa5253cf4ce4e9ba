// The version-independent event model: the ABI adapters in exports.cc translate each NCCL
// profiler version's descriptors into the calls below. Everything reachable from a callback
// (StartOp, StartKernelChannel, RecordKernelChannelStop, StopEvent) is lock-free and
// allocation-free; InitComm and FinalizeComm run at communicator creation and destruction only.
#ifndef NCCLWATCH_PLUGIN_RECORDER_H_
#define NCCLWATCH_PLUGIN_RECORDER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/sync.h"
#include "plugin/hot_path.h"

namespace ncclwatch::plugin {

struct CommIdentity {
  uint64_t comm_hash = 0;
  std::string comm_name;
  int rank = 0;
  int nranks = 0;
  int n_nodes = 0;
  int cuda_device = -1;
  std::string gpu_uuid = "";  // unknown unless the environment names it (gpu_uuid.h)
};

// Per-communicator context handed to NCCL as the profiler context.
class CommState {
 public:
  CommState(CommIdentity identity, size_t ring_capacity)
      : identity_(std::move(identity)),
        ring_(ring_capacity),
        p2p_next_(std::make_unique<std::atomic<uint32_t>[]>(
            2 * static_cast<size_t>(std::max(identity_.nranks, 1)))) {}

  const CommIdentity& identity() const { return identity_; }
  CompletionRing& ring() { return ring_; }
  void CountUntimed() { untimed_.fetch_add(1, std::memory_order_relaxed); }
  void CountBogus() { bogus_.fetch_add(1, std::memory_order_relaxed); }
  // True for about one completion in 16: those read the host clock for GPU-clock calibration.
  // A load and a store, not a read-modify-write: under concurrent completions it may skip or
  // repeat a tick, which only changes which completions are used.
  bool TakeClockSample() {
    uint32_t tick = clock_tick_.load(std::memory_order_relaxed);
    clock_tick_.store(tick + 1, std::memory_order_relaxed);
    return (tick & 15) == 0;
  }
  uint64_t untimed() const { return untimed_.load(std::memory_order_relaxed); }
  // Completions whose GPU timestamps cannot be true (Recorder::Complete): counted, not measured.
  uint64_t bogus() const { return bogus_.load(std::memory_order_relaxed); }
  // The latest enqueue time (CoarseMonotonicNs) of an operation of this communicator whose kernel
  // completed. NCCL runs a communicator's operations in order, so one enqueued well before it
  // that has not completed will not: its completion events were lost (Flusher). A racy maximum:
  // concurrent completions may keep a slightly older one, which only delays that verdict.
  void NoteCompleted(int64_t enqueue_mono_ns) {
    if (enqueue_mono_ns > last_completed_enqueue_.load(std::memory_order_relaxed)) {
      last_completed_enqueue_.store(enqueue_mono_ns, std::memory_order_relaxed);
    }
  }
  int64_t last_completed_enqueue_ns() const {
    return last_completed_enqueue_.load(std::memory_order_relaxed);
  }
  // Numbers this communicator's point-to-point operations per peer and direction, from 0 in
  // issue order: NCCL matches the n-th Send from a to b with the n-th Recv at b from a, so both
  // ends give that exchange the same number (the aggregator joins them on it). Two counters per
  // rank of the communicator (8 bytes a rank, 128 KiB for a 16k-rank world), allocated with it;
  // a peer outside [0, nranks) gets 0.
  uint64_t NextP2pSeq(int peer, bool send) {
    if (peer < 0 || peer >= identity_.nranks) return 0;
    return p2p_next_[2 * static_cast<size_t>(peer) + (send ? 1 : 0)].fetch_add(
        1, std::memory_order_relaxed);
  }

 private:
  const CommIdentity identity_;
  CompletionRing ring_;
  std::atomic<uint64_t> untimed_{0};
  std::atomic<uint64_t> bogus_{0};
  std::atomic<uint32_t> clock_tick_{0};
  std::atomic<int64_t> last_completed_enqueue_{0};
  std::unique_ptr<std::atomic<uint32_t>[]> p2p_next_;
};

// A Coll or P2p event, whatever the ABI version.
struct OpDescr {
  bool p2p = false;
  const char* func = nullptr;
  uint64_t seq = 0;  // collectives only (the Recorder numbers p2p operations itself)
  const char* datatype = nullptr;
  uint64_t count = 0;
  const char* algo = nullptr;
  const char* proto = nullptr;
  int peer = -1;  // p2p only
  uint8_t n_channels = 0;
  // Copy-engine collective (v6): NCCL never times it and it has no KernelCh children, so its
  // count and bytes are reported at stop, without execution time.
  bool copy_engine = false;
  uint64_t user_tag = 0;  // v7 userTag (NCCL's reserved top-bit values included), 0: untagged
};

// An operation in flight, as listed by the flusher.
struct InFlightView {
  CommState* comm;
  const char* func;
  uint64_t seq;
  bool p2p;
  int32_t peer;
  int64_t enqueue_mono_ns;
  uint32_t channels;
  uint32_t channels_started;
  uint32_t channels_done;
};

class Recorder {
 public:
  // `chained`: a second profiler plugin runs behind this one (chain.h), and every handle given
  // out keeps the second plugin's handle for the same event (ChainedCell).
  Recorder(size_t op_pool_size, size_t ring_size, bool chained = false);
  // Deletes the communicators still registered. (The plugin's Recorder lives until process exit.)
  ~Recorder();

  // Communicator lifecycle (not on the hot path). The Recorder owns registered communicators;
  // UnregisterComm hands ownership to the caller, who deletes the CommState once Referenced()
  // says no slot points at it any more.
  CommState* InitComm(CommIdentity identity);
  void UnregisterComm(CommState* comm);
  std::vector<CommState*> Comms() const;

  // --- callback path ---
  // Returns the handle for NCCL (an OpSlot) or nullptr when the event is dropped.
  void* StartOp(CommState* comm, const OpDescr& op) noexcept;
  // Returns a ChannelRef handle or nullptr when `parent` is not one of our operations.
  void* StartKernelChannel(void* parent, uint8_t channel, uint64_t gpu_start_ns) noexcept;
  void RecordKernelChannelStop(void* handle, uint64_t gpu_stop_ns) noexcept {
    RecordKernelChannelStop(pool_.Decode(handle), gpu_stop_ns);
  }
  // v7 KernelPhase, a child of a KernelCh event (`parent`: its handle). Only the initial-sync
  // phase is kept: the handle is the channel's with the low bit set; other phases get nullptr.
  void* StartKernelPhase(void* parent, uint8_t phase_id, uint64_t gpu_start_ns) noexcept;
  void RecordKernelPhaseStop(void* handle, uint64_t gpu_stop_ns) noexcept {
    RecordKernelPhaseStop(pool_.Decode(handle), gpu_stop_ns);
  }
  // Any handle we gave out (Coll/P2p, KernelCh, KernelPhase); anything else is ignored.
  void StopEvent(void* handle) noexcept { StopEvent(pool_.Decode(handle)); }
  // The same three for a handle already decoded (the chaining decodes each handle once for both
  // plugins).
  OpPool::Decoded Decode(const void* handle) const noexcept { return pool_.Decode(handle); }
  void RecordKernelChannelStop(const OpPool::Decoded& d, uint64_t gpu_stop_ns) noexcept;
  void RecordKernelPhaseStop(const OpPool::Decoded& d, uint64_t gpu_stop_ns) noexcept;
  void StopEvent(const OpPool::Decoded& d) noexcept;

  // --- flusher side ---
  // Appends the operations in flight (consistent snapshots; slots being reused are skipped).
  void ListInFlight(std::vector<InFlightView>* out) const;
  bool Referenced(const CommState* comm) const;

  // The chained plugin's handle for the event whose handle is `handle` (an OpSlot, a ChannelRef,
  // a KernelPhase handle), or nullptr when `handle` is not one of ours or nothing is chained.
  // Told from the address alone; one cell per slot and handle kind, reused with the slot.
  std::atomic<void*>* ChainedCell(const void* handle) noexcept {
    return ChainedCell(pool_.Decode(handle));
  }
  std::atomic<void*>* ChainedCell(const OpPool::Decoded& d) noexcept {
    if (chained_ == nullptr || d.type == OpPool::Decoded::kNone) return nullptr;
    const size_t first = static_cast<size_t>(pool_.IndexOf(d.slot)) * kChainedPerSlot;
    switch (d.type) {
      case OpPool::Decoded::kOp:
        return &chained_[first];
      case OpPool::Decoded::kChannel:
        return &chained_[first + 1 + d.channel];
      default:
        return &chained_[first + 1 + kMaxChannels + d.channel];
    }
  }

  // Operations refused because the pool was full.
  uint64_t events_dropped() const { return pool_.dropped(); }
  // KernelCh events without a usable parent: its operation was dropped, or the channel was
  // repeated or beyond the operation's channel count.
  uint64_t channel_events_orphaned() const { return orphans_.load(std::memory_order_relaxed); }
  size_t ops_in_use() const { return pool_.InUse(); }

 private:
  static Completion Describe(const OpSlot* slot) noexcept;
  void Complete(OpSlot* slot) noexcept;

  // Per slot: the operation's cell, then its channels', then their KernelPhase handles'.
  static constexpr size_t kChainedPerSlot = 1 + 2 * kMaxChannels;

  OpPool pool_;
  const size_t ring_size_;
  // ChainedCell's cells (null when nothing is chained): reserved zero pages, as the pool.
  std::atomic<void*>* chained_ = nullptr;
  size_t chained_bytes_ = 0;
  std::atomic<uint64_t> orphans_{0};  // KernelCh events we could not attach to an operation
  // Taken when a communicator comes or goes and by the flusher, never by an operation's event.
  mutable ncclwatch::Mutex mu_;
  std::vector<CommState*> comms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_RECORDER_H_
