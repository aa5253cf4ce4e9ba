// The plugin's callback-path data structures: a fixed pool of operation slots and a bounded
// multi-producer / single-consumer completion ring per communicator.
//
// Thread safety / invariants (read before changing anything here):
// - Callbacks arrive concurrently from the user thread, NCCL's launch threads, CUDA host-callback
//   threads and the proxy thread (docs/nccl-profiler-abi.md §8). Nothing here takes a lock,
//   allocates, logs or makes a system call; a full pool or ring drops the event and counts it.
// - An OpSlot is owned by reference counts: +1 for the Coll/P2p event itself (released at its
//   stopEvent, which means "enqueued") and +1 for the kernel as a whole while n_channels > 0
//   (released when the last of its n_channels channels stops). KernelCh children start after the
//   parent stopped (§3.5), so the kernel reference is what keeps the slot alive for them. A channel
//   beyond n_channels, or a channel id seen twice, is refused at its start, so every accepted
//   channel runs while the kernel reference is held. refs == 0 means the slot is free.
// - Per channel the hot path does two atomic read-modify-writes: fetch_or on `channel_mask` at
//   start (which also counts the channels) and fetch_add on `channels_done` at stop. The channel
//   that stops last sees every other channel's timestamps (acq_rel on channels_done) and computes
//   the operation's timing alone.
// - Fields written at claim time are atomics published by `version` (a seqlock: odd while being
//   filled) so that the flusher thread can list operations in flight without a lock.
// - Handles given to NCCL are pointers to an OpSlot or to one of its ChannelRefs; both begin with a
//   HandleKind tag so stopEvent/recordEventState can tell them apart.
#ifndef NCCLWATCH_PLUGIN_HOT_PATH_H_
#define NCCLWATCH_PLUGIN_HOT_PATH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ncclwatch::plugin {

class CommState;

inline constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS; larger channel ids are dropped

enum class HandleKind : uint32_t { kOp = 0x4f50534c, kChannel = 0x4348414e };

struct OpSlot;

// Handle returned for a KernelCh event: one per channel of its parent operation.
struct ChannelRef {
  HandleKind kind = HandleKind::kChannel;
  uint8_t index = 0;                    // channel id == position in OpSlot::channels
  std::atomic<uint32_t> generation{0};  // OpSlot::generation of the operation that set it
  std::atomic<uint64_t> start_ns{0};    // GPU start timestamp (KernelCh start)
  std::atomic<uint64_t> stop_ns{0};     // GPU stop timestamp (KernelChStop state), 0 if none
  OpSlot* owner = nullptr;
};

struct alignas(64) OpSlot {
  HandleKind kind = HandleKind::kOp;
  std::atomic<uint32_t> refs{0};
  std::atomic<uint32_t> version{0};  // seqlock for the flusher's in-flight scan
  // Identity, written once after the claim.
  std::atomic<uint32_t> generation{0};  // version at the claim: tells this op's channels apart
  std::atomic<CommState*> comm{nullptr};
  // The next four are NCCL's static strings, kept as pointers (docs/nccl-profiler-abi.md §4.1).
  std::atomic<const char*> func{nullptr};
  std::atomic<const char*> algo{nullptr};
  std::atomic<const char*> proto{nullptr};
  std::atomic<const char*> datatype{nullptr};
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> seq{0};
  std::atomic<int32_t> peer{-1};
  std::atomic<uint8_t> n_channels{0};
  std::atomic<bool> p2p{false};
  std::atomic<bool> record_untimed{false};  // report at stop without GPU times (CE collectives)
  std::atomic<int64_t> enqueue_mono_ns{0};  // coarse clock: ages need only millisecond precision
  // Progress, updated by the proxy thread.
  std::atomic<uint64_t> channel_mask{0};  // channels started (bit = channel id)
  std::atomic<uint32_t> channels_done{0};
  ChannelRef channels[kMaxChannels];

  OpSlot() {
    for (int i = 0; i < kMaxChannels; ++i) {
      channels[i].index = static_cast<uint8_t>(i);
      channels[i].owner = this;
    }
  }
};

// A completed operation, handed from the callback path to the flusher.
struct Completion {
  const char* func = nullptr;
  const char* algo = nullptr;
  const char* proto = nullptr;
  const char* datatype = nullptr;
  uint64_t count = 0;  // bytes = MessageBytes(datatype, count), computed off the hot path
  uint64_t seq = 0;
  int32_t peer = -1;
  bool p2p = false;
  uint8_t channels = 0;
  uint64_t gpu_start_ns = 0;      // earliest channel start
  uint64_t gpu_stop_ns = 0;       // latest channel stop
  uint64_t exec_ns = 0;           // longest single-channel duration (NCCL Inspector's definition)
  int64_t host_done_unix_ns = 0;  // host clock at completion, on ~1 in 16 completions; else 0
  bool timed = true;              // false: no GPU times (copy-engine collectives)
};

// Fixed array of slots. Claim() is one fetch_add plus a scan of plain loads bounded by the capacity
// (wait-free); it fails, and counts a drop, only when every slot was busy as the scan passed.
class OpPool {
 public:
  // `capacity` is rounded up to a power of two (at least 64).
  explicit OpPool(size_t capacity);

  // Returns a slot with refs == `initial_refs`, or nullptr (and counts a drop) if none is free
  // after a bounded number of probes.
  OpSlot* Claim(uint32_t initial_refs);
  // Drops `n` references; returns true if that freed the slot.
  static bool Release(OpSlot* slot, uint32_t n);

  size_t capacity() const { return mask_ + 1; }
  OpSlot& slot(size_t i) { return slots_[i]; }
  // Whether `p` is the address of one of this pool's slots (two compares and a multiply).
  bool Contains(const void* p) const {
    auto base = reinterpret_cast<uintptr_t>(slots_.get());
    auto addr = reinterpret_cast<uintptr_t>(p);
    return addr >= base && addr < base + capacity() * sizeof(OpSlot) &&
           (addr - base) % sizeof(OpSlot) == 0;
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Slots currently in use (for tests and metrics; O(capacity)).
  size_t InUse() const;

 private:
  size_t mask_;
  std::unique_ptr<OpSlot[]> slots_;
  std::atomic<uint64_t> cursor_{0};
  std::atomic<uint64_t> dropped_{0};
};

// Bounded MPSC queue of Completions (Vyukov's bounded queue, single consumer).
class CompletionRing {
 public:
  explicit CompletionRing(size_t capacity);  // rounded up to a power of two

  // Any thread. Returns false (and counts a drop) when full.
  bool Push(const Completion& c);
  // Flusher thread only. Returns false when empty.
  bool Pop(Completion* out);

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t capacity() const { return mask_ + 1; }

 private:
  struct Cell {
    std::atomic<uint64_t> sequence;
    Completion value;
  };
  size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(64) uint64_t dequeue_pos_ = 0;
  std::atomic<uint64_t> dropped_{0};
};

size_t RoundUpPow2(size_t n, size_t minimum);

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_HOT_PATH_H_
