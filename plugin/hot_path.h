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
// - Per channel of a multi-channel operation the hot path does two atomic read-modify-writes:
//   fetch_or on `channel_mask` at start (which also counts the channels) and fetch_add on
//   `channels_done` at stop. The channel that stops last sees every other channel's timestamps
//   (acq_rel on channels_done) and computes the operation's timing alone. A one-channel operation
//   needs neither: NCCL reports a channel once, from one thread, so a load and a store tell a
//   repeated start, and its only channel is the last. Per operation, completing it costs the
//   ring's CAS and the free list's CAS; the reference count is a plain store when the completing
//   thread holds the last references (OpPool::Release).
// - Fields written at claim time are atomics published by `version` (a seqlock: odd while being
//   filled) so that the flusher thread can list operations in flight without a lock.
// - Handles given to NCCL are pointers to an OpSlot or to one of its ChannelRefs (a KernelPhase
//   handle: the ChannelRef's address with the low bit set); OpPool::Decode tells them apart from
//   the address alone, and ignores anything outside the pool.
// - The pool is zero pages until used, and zero is every field's initial state: slots need no
//   construction, so a scan racing with the first claim of a slot reads zeros, not a constructor.
#ifndef NCCLWATCH_PLUGIN_HOT_PATH_H_
#define NCCLWATCH_PLUGIN_HOT_PATH_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ncclwatch::plugin {

class CommState;

inline constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS; larger channel ids are dropped
// A KernelPhase handle is its channel's ChannelRef address with this bit set (they are 8-aligned).
inline constexpr uintptr_t kPhaseHandleBit = 1;

// Handle returned for a KernelCh event: one per channel of its parent operation. Every field's
// initial state is zero, so that a slot in fresh zero pages is valid without construction.
struct ChannelRef {
  std::atomic<uint32_t> generation{0};  // OpSlot::generation of the operation that set it
  std::atomic<uint64_t> start_ns{0};    // GPU start timestamp (KernelCh start)
  std::atomic<uint64_t> stop_ns{0};     // GPU stop timestamp (KernelChStop state), 0 if none
  // v7 KernelPhase, initial sync: its GPU start, and at its stop its duration.
  std::atomic<uint64_t> sync_start_ns{0};
  std::atomic<uint64_t> sync_ns{0};  // 0: no initial-sync phase seen
};

struct alignas(64) OpSlot {
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
  std::atomic<uint64_t> user_tag{0};  // v7 userTag, 0 when untagged
  std::atomic<int32_t> peer{0};       // written at every claim
  std::atomic<uint8_t> n_channels{0};
  std::atomic<bool> p2p{false};
  std::atomic<bool> record_untimed{false};  // report at stop without GPU times (CE collectives)
  std::atomic<int64_t> enqueue_mono_ns{0};  // coarse clock: ages need only millisecond precision
  // Progress, updated by the thread that reports KernelCh events.
  std::atomic<uint64_t> channel_mask{0};  // channels started (bit = channel id)
  std::atomic<uint32_t> channels_done{0};
  // Free-list link (OpPool): index of the next free slot while this one is free.
  std::atomic<uint32_t> next_free{0};
  ChannelRef channels[kMaxChannels];
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
  uint64_t user_tag = 0;          // v7 userTag, 0 when untagged
  uint64_t sync_wait_ns = 0;      // longest initial-sync phase over the channels; 0: not seen
  bool timed = true;              // false: no GPU times (copy-engine collectives)
  // Its GPU timestamps cannot be true (Recorder::Complete): counted, left out of every figure;
  // only its start is passed on (gpu_stop_ns = gpu_start_ns), so that the own time of the
  // operation after it is known to be unknown.
  bool bogus = false;
};

// Fixed array of slots with a lock-free free list. Claim and Release are O(1) whatever the number
// of operations in flight: a claim pops the list (one CAS; a 32-bit tag beside the index in the
// 64-bit head defeats ABA), or takes a never-used slot above the high-water mark, or -- the pool
// is full -- counts a drop. The array is reserved, not touched, at construction (anonymous
// mapping, zero pages): memory grows with the most operations ever in flight, not with capacity.
class OpPool {
 public:
  // `capacity` is rounded up to a power of two (at least 64).
  explicit OpPool(size_t capacity);
  ~OpPool();
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;

  // Returns a slot with refs == `initial_refs`, or nullptr (and counts a drop) when all are busy.
  OpSlot* Claim(uint32_t initial_refs);
  // Drops `n` references; returns true if that freed the slot (it is then back on the free list).
  bool Release(OpSlot* slot, uint32_t n);

  size_t capacity() const { return capacity_; }
  // Slots ever handed out: the ones a scan of the pool must look at.
  size_t used() const {
    return std::min<size_t>(high_water_.load(std::memory_order_acquire), capacity_);
  }
  OpSlot& slot(size_t i) { return slots_[i]; }
  uint32_t IndexOf(const OpSlot* slot) const { return static_cast<uint32_t>(slot - slots_); }
  // Whether `p` is the address of one of this pool's slots ever handed out.
  bool Contains(const void* p) const {
    auto addr = reinterpret_cast<uintptr_t>(p);
    return addr >= base() && addr < base() + used() * sizeof(OpSlot) &&
           (addr - base()) % sizeof(OpSlot) == 0;
  }
  // What a handle NCCL hands back points at, told from its address alone (nothing is read
  // through it): an OpSlot, a ChannelRef of one, that ChannelRef with the low bit set (a
  // KernelPhase handle), or nothing of ours.
  struct Decoded {
    enum Type { kNone, kOp, kChannel, kPhase } type = kNone;
    OpSlot* slot = nullptr;
    int channel = -1;
  };
  Decoded Decode(const void* handle) const;
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Slots currently in use (for tests and metrics; O(used)).
  size_t InUse() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  // The free list's head: a tag that changes at every update beside the first free index.
  static uint64_t Pack(uint32_t tag, uint32_t index) { return (uint64_t{tag} << 32) | index; }
  static uint32_t IndexPart(uint64_t head) { return static_cast<uint32_t>(head); }
  static uint32_t TagPart(uint64_t head) { return static_cast<uint32_t>(head >> 32); }
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(slots_); }

  const size_t capacity_;
  const size_t bytes_;
  OpSlot* slots_;
  alignas(64) std::atomic<uint64_t> free_head_;  // (tag << 32) | index of the first free slot
  alignas(64) std::atomic<uint64_t> high_water_{0};
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

// Inline, like Decode below: Release and Push run at every completion.
inline bool OpPool::Release(OpSlot* slot, uint32_t n) {
  // Holding all `n` remaining references, no other thread can touch the count (references are
  // only ever added at the claim): a plain store frees the slot without a read-modify-write.
  // The release store publishes this thread's writes to whoever sees refs == 0.
  if (slot->refs.load(std::memory_order_acquire) == n) {
    slot->refs.store(0, std::memory_order_release);
  } else if (slot->refs.fetch_sub(n, std::memory_order_acq_rel) != n) {
    return false;
  }
  const uint32_t index = IndexOf(slot);
  uint64_t head = free_head_.load(std::memory_order_relaxed);
  do {
    slot->next_free.store(IndexPart(head), std::memory_order_relaxed);
  } while (!free_head_.compare_exchange_weak(head, Pack(TagPart(head) + 1, index),
                                             std::memory_order_release, std::memory_order_relaxed));
  return true;
}

inline bool CompletionRing::Push(const Completion& c) {
  uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& cell = cells_[pos & mask_];
    uint64_t seq = cell.sequence.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (diff == 0) {
      if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        cell.value = c;
        cell.sequence.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    } else {
      pos = enqueue_pos_.load(std::memory_order_relaxed);
    }
  }
}

// Inline: it is on every KernelCh and KernelPhase callback.
inline OpPool::Decoded OpPool::Decode(const void* handle) const {
  Decoded d;
  uintptr_t addr = reinterpret_cast<uintptr_t>(handle);
  const bool phase = (addr & kPhaseHandleBit) != 0;
  addr &= ~kPhaseHandleBit;
  if (addr < base() || addr >= base() + bytes_) return d;
  const uintptr_t offset = addr - base();
  OpSlot* slot = &slots_[offset / sizeof(OpSlot)];
  const uintptr_t within = offset % sizeof(OpSlot);
  if (within == 0) {
    if (!phase) d = Decoded{Decoded::kOp, slot, -1};
    return d;
  }
  constexpr uintptr_t kFirst = offsetof(OpSlot, channels);
  if (within < kFirst || (within - kFirst) % sizeof(ChannelRef) != 0) return d;
  const uintptr_t channel = (within - kFirst) / sizeof(ChannelRef);
  if (channel >= kMaxChannels) return d;
  return Decoded{phase ? Decoded::kPhase : Decoded::kChannel, slot, static_cast<int>(channel)};
}

size_t RoundUpPow2(size_t n, size_t minimum);

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_HOT_PATH_H_
