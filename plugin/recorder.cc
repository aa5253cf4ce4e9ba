#include "plugin/recorder.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <new>

namespace ncclwatch::plugin {
namespace {

// GPU spans above this are checked against the operation's life on the host (Complete).
constexpr uint64_t kCheckedSpanNs = 10'000'000;

// std::popcount without the POPCNT instruction (the baseline x86-64 target) is a call into
// libgcc through the PLT; this is a handful of inline arithmetic instructions.
inline int Popcount(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

// NCCL's p2p functions are "Send" and "Recv" (static strings): the first letter tells them apart.
inline bool IsSend(const char* func) { return func != nullptr && func[0] == 'S'; }

}  // namespace

Recorder::Recorder(size_t op_pool_size, size_t ring_size, bool chained)
    : pool_(op_pool_size), ring_size_(ring_size) {
  if (!chained) return;
  chained_bytes_ = pool_.capacity() * kChainedPerSlot * sizeof(std::atomic<void*>);
  void* p = mmap(nullptr, chained_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  chained_ = static_cast<std::atomic<void*>*>(p);  // zero: no handle (atomics need no construction)
}

Recorder::~Recorder() {
  if (chained_ != nullptr) munmap(chained_, chained_bytes_);
  ncclwatch::MutexLock lock(&mu_);
  for (CommState* comm : comms_) delete comm;
}

CommState* Recorder::InitComm(CommIdentity identity) {
  auto* comm = new CommState(std::move(identity), ring_size_);
  ncclwatch::MutexLock lock(&mu_);
  comms_.push_back(comm);
  return comm;
}

void Recorder::UnregisterComm(CommState* comm) {
  ncclwatch::MutexLock lock(&mu_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

std::vector<CommState*> Recorder::Comms() const {
  ncclwatch::MutexLock lock(&mu_);
  return comms_;
}

void* Recorder::StartOp(CommState* comm, const OpDescr& op) noexcept {
  if (comm == nullptr) return nullptr;  // NCCL may call with the NULL context of a disabled comm
  // One reference for the event itself, one for the kernel while channels are outstanding.
  const uint64_t p2p_seq = op.p2p ? comm->NextP2pSeq(op.peer, IsSend(op.func)) : 0;
  OpSlot* slot = pool_.Claim(op.n_channels > 0 ? 2 : 1);
  if (slot == nullptr) return nullptr;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  uint32_t v = slot->version.load(kRelaxed);
  slot->version.store(v + 1, kRelaxed);  // odd: being filled
  std::atomic_thread_fence(std::memory_order_release);
  slot->generation.store(v + 2, kRelaxed);
  slot->comm.store(comm, kRelaxed);
  slot->func.store(op.func, kRelaxed);
  slot->algo.store(op.algo, kRelaxed);
  slot->proto.store(op.proto, kRelaxed);
  slot->datatype.store(op.datatype, kRelaxed);
  slot->count.store(op.count, kRelaxed);
  // A p2p operation's number is its place among the exchanges with its peer in that direction.
  // Taken before the slot, so that one the pool refused still counts and the numbers of the
  // two ends stay in step.
  slot->seq.store(op.p2p ? p2p_seq : op.seq, kRelaxed);
  slot->user_tag.store(op.user_tag, kRelaxed);
  slot->peer.store(op.p2p ? op.peer : -1, kRelaxed);
  slot->n_channels.store(op.n_channels, kRelaxed);
  slot->p2p.store(op.p2p, kRelaxed);
  slot->record_untimed.store(op.copy_engine, kRelaxed);
  slot->enqueue_mono_ns.store(CoarseMonotonicNs(), kRelaxed);
  slot->channel_mask.store(0, kRelaxed);
  slot->channels_done.store(0, kRelaxed);
  slot->version.store(v + 2, std::memory_order_release);  // even: consistent
  return slot;
}

void* Recorder::StartKernelChannel(void* parent, uint8_t channel, uint64_t gpu_start_ns) noexcept {
  // The parent is only trusted if it is one of our slots: a foreign pointer (another plugin's
  // handle, another process's under PXN) is never dereferenced.
  if (!pool_.Contains(parent) || channel >= kMaxChannels) {
    orphans_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto* slot = static_cast<OpSlot*>(parent);
  // While fewer than n_channels channels have started, the kernel reference keeps the slot alive.
  // A repeated channel id, or more channels than announced, is not trusted.
  // One-channel operations (most small collectives and point-to-point operations) skip the
  // read-modify-write: NCCL reports a channel once, from one thread, so a load and a store tell
  // a first start from a repeated one.
  const uint64_t bit = uint64_t{1} << channel;
  const uint8_t n_channels = slot->n_channels.load(std::memory_order_relaxed);
  uint64_t before;
  if (n_channels == 1) {
    before = slot->channel_mask.load(std::memory_order_relaxed);
    if (before == 0) slot->channel_mask.store(bit, std::memory_order_relaxed);
  } else {
    before = slot->channel_mask.fetch_or(bit, std::memory_order_relaxed);
  }
  if ((before & bit) != 0 || Popcount(before) >= n_channels) {
    orphans_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ChannelRef& ref = slot->channels[channel];
  ref.start_ns.store(gpu_start_ns, std::memory_order_relaxed);
  ref.stop_ns.store(0, std::memory_order_relaxed);
  ref.sync_ns.store(0, std::memory_order_relaxed);
  ref.generation.store(slot->generation.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return &ref;
}

void Recorder::RecordKernelChannelStop(const OpPool::Decoded& d, uint64_t gpu_stop_ns) noexcept {
  if (d.type != OpPool::Decoded::kChannel) return;
  d.slot->channels[d.channel].stop_ns.store(gpu_stop_ns, std::memory_order_relaxed);
}

void* Recorder::StartKernelPhase(void* parent, uint8_t phase_id, uint64_t gpu_start_ns) noexcept {
  if (phase_id != 0) return nullptr;  // compute and final sync: not used
  OpPool::Decoded d = pool_.Decode(parent);
  if (d.type != OpPool::Decoded::kChannel) return nullptr;
  // The channel's own handle keeps the slot alive until the channel stops, after its phases.
  ChannelRef& ref = d.slot->channels[d.channel];
  ref.sync_start_ns.store(gpu_start_ns, std::memory_order_relaxed);
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(&ref) | kPhaseHandleBit);
}

void Recorder::RecordKernelPhaseStop(const OpPool::Decoded& d, uint64_t gpu_stop_ns) noexcept {
  if (d.type != OpPool::Decoded::kPhase) return;
  ChannelRef& ref = d.slot->channels[d.channel];
  const uint64_t start = ref.sync_start_ns.load(std::memory_order_relaxed);
  // At least 1 ns, so that a phase seen is told from none; a stop before the start is not kept.
  if (gpu_stop_ns >= start)
    ref.sync_ns.store(std::max<uint64_t>(1, gpu_stop_ns - start), std::memory_order_relaxed);
}

void Recorder::StopEvent(const OpPool::Decoded& d) noexcept {
  if (d.type == OpPool::Decoded::kOp) {
    OpSlot* slot = d.slot;
    // Coll/P2p stop means "enqueued". Without channels nothing else will time this operation.
    if (slot->n_channels.load(std::memory_order_relaxed) == 0) {
      CommState* comm = slot->comm.load(std::memory_order_relaxed);
      comm->CountUntimed();
      if (slot->record_untimed.load(std::memory_order_relaxed)) {
        Completion c = Describe(slot);
        c.timed = false;
        comm->ring().Push(c);
      }
    }
    pool_.Release(slot, 1);
    return;
  }
  if (d.type != OpPool::Decoded::kChannel) return;  // a KernelPhase stop: nothing to do
  OpSlot* slot = d.slot;
  // acq_rel: the last channel to stop sees every other channel's timestamps. With one channel
  // (StartKernelChannel accepts only one) this stop is the last without counting.
  const uint8_t n_channels = slot->n_channels.load(std::memory_order_relaxed);
  if (n_channels == 1 ||
      slot->channels_done.fetch_add(1, std::memory_order_acq_rel) + 1 == n_channels) {
    Complete(slot);
    pool_.Release(slot, 1);  // the kernel reference
  }
}

Completion Recorder::Describe(const OpSlot* slot) noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  Completion c;
  c.func = slot->func.load(kRelaxed);
  c.algo = slot->algo.load(kRelaxed);
  c.proto = slot->proto.load(kRelaxed);
  c.datatype = slot->datatype.load(kRelaxed);
  c.count = slot->count.load(kRelaxed);
  c.seq = slot->seq.load(kRelaxed);
  c.peer = slot->peer.load(kRelaxed);
  c.p2p = slot->p2p.load(kRelaxed);
  c.channels = slot->n_channels.load(kRelaxed);
  c.user_tag = slot->user_tag.load(kRelaxed);
  return c;
}

void Recorder::Complete(OpSlot* slot) noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  CommState* comm = slot->comm.load(kRelaxed);
  comm->NoteCompleted(slot->enqueue_mono_ns.load(kRelaxed));
  const uint32_t generation = slot->generation.load(kRelaxed);
  uint64_t start_min = UINT64_MAX, stop_max = 0, longest = 0, sync_max = 0;
  bool timed = false;
  for (uint64_t mask = slot->channel_mask.load(kRelaxed); mask != 0; mask &= mask - 1) {
    const ChannelRef& ref = slot->channels[std::countr_zero(mask)];
    if (ref.generation.load(kRelaxed) != generation) continue;  // refused, not this op's
    uint64_t start = ref.start_ns.load(kRelaxed), stop = ref.stop_ns.load(kRelaxed);
    if (stop == 0 || stop < start) continue;  // no KernelChStop timestamp
    timed = true;
    start_min = std::min(start_min, start);
    stop_max = std::max(stop_max, stop);
    longest = std::max(longest, stop - start);
    sync_max = std::max(sync_max, ref.sync_ns.load(kRelaxed));
  }
  if (!timed) {
    comm->CountUntimed();
    return;
  }
  // Telemetry that lies: a kernel cannot run longer than its operation lived on the host, from its
  // enqueue to now (its completion being noticed). NCCL and drivers occasionally deliver such
  // timestamps (a KernelCh stop seconds after a microsecond kernel); one of them would skew every
  // figure it enters, so it is counted and left out. Only spans over 10 ms are checked (one clock
  // read): the coarse enqueue clock ticks in milliseconds, and a tolerance of an eighth covers the
  // GPU and host clocks' rates.
  Completion c = Describe(slot);
  if (const uint64_t span = stop_max - start_min; span > kCheckedSpanNs) {
    const int64_t lived = CoarseMonotonicNs() - slot->enqueue_mono_ns.load(kRelaxed);
    if (static_cast<int64_t>(span) > lived + lived / 8 + static_cast<int64_t>(kCheckedSpanNs)) {
      comm->CountBogus();
      c.bogus = true;
      c.gpu_start_ns = c.gpu_stop_ns = start_min;
      comm->ring().Push(c);
      return;
    }
  }
  c.gpu_start_ns = start_min;
  c.gpu_stop_ns = stop_max;
  c.exec_ns = longest;
  c.sync_wait_ns = sync_max;
  c.host_done_unix_ns = comm->TakeClockSample() ? RealtimeNs() : 0;
  comm->ring().Push(c);
}

void Recorder::ListInFlight(std::vector<InFlightView>* out) const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  auto& pool = const_cast<OpPool&>(pool_);
  for (size_t i = 0, n = pool.used(); i < n; ++i) {
    const OpSlot& s = pool.slot(i);
    uint32_t v1 = s.version.load(std::memory_order_acquire);
    if ((v1 & 1) != 0 || s.refs.load(kRelaxed) == 0) continue;
    InFlightView view{s.comm.load(kRelaxed),
                      s.func.load(kRelaxed),
                      s.seq.load(kRelaxed),
                      s.p2p.load(kRelaxed),
                      s.peer.load(kRelaxed),
                      s.enqueue_mono_ns.load(kRelaxed),
                      s.n_channels.load(kRelaxed),
                      static_cast<uint32_t>(std::popcount(s.channel_mask.load(kRelaxed))),
                      s.channels_done.load(kRelaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(kRelaxed) != v1 || view.comm == nullptr) continue;
    out->push_back(view);
  }
}

bool Recorder::Referenced(const CommState* comm) const {
  auto& pool = const_cast<OpPool&>(pool_);
  for (size_t i = 0, n = pool.used(); i < n; ++i) {
    const OpSlot& s = pool.slot(i);
    if (s.refs.load(std::memory_order_acquire) != 0 &&
        s.comm.load(std::memory_order_relaxed) == comm) {
      return true;
    }
  }
  return false;
}

}  // namespace ncclwatch::plugin
