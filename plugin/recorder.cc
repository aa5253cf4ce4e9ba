#include "plugin/recorder.h"

#include <time.h>

#include <algorithm>

#include "common/op_math.h"

namespace ncclwatch::plugin {
namespace {

void AtomicMin(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

void AtomicMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

// Both handle types begin with their HandleKind: read the tag before treating the handle as either.
HandleKind KindOf(const void* handle) { return *static_cast<const HandleKind*>(handle); }

int64_t ReadClock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

int64_t MonotonicNs() { return ReadClock(CLOCK_MONOTONIC); }
int64_t RealtimeNs() { return ReadClock(CLOCK_REALTIME); }

Recorder::Recorder(size_t op_pool_size, size_t ring_size)
    : pool_(op_pool_size), ring_size_(ring_size) {}

Recorder::~Recorder() {
  absl::MutexLock lock(&mu_);
  for (CommState* comm : comms_) delete comm;
}

CommState* Recorder::InitComm(CommIdentity identity) {
  auto* comm = new CommState(std::move(identity), ring_size_);
  absl::MutexLock lock(&mu_);
  comms_.push_back(comm);
  return comm;
}

void Recorder::UnregisterComm(CommState* comm) {
  absl::MutexLock lock(&mu_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

std::vector<CommState*> Recorder::Comms() const {
  absl::MutexLock lock(&mu_);
  return comms_;
}

void* Recorder::StartOp(CommState* comm, const OpDescr& op) noexcept {
  if (comm == nullptr) return nullptr;  // NCCL may call with the NULL context of a disabled comm
  // One reference for the event itself, one for the kernel while channels are outstanding.
  OpSlot* slot = pool_.Claim(op.n_channels > 0 ? 2 : 1);
  if (slot == nullptr) return nullptr;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  uint32_t v = slot->version.load(kRelaxed);
  slot->version.store(v + 1, kRelaxed);  // odd: being filled
  std::atomic_thread_fence(std::memory_order_release);
  slot->comm.store(comm, kRelaxed);
  slot->func.store(op.func, kRelaxed);
  slot->algo.store(op.algo, kRelaxed);
  slot->proto.store(op.proto, kRelaxed);
  slot->seq.store(op.p2p ? 0 : op.seq, kRelaxed);
  slot->bytes.store(MessageBytes(op.datatype != nullptr ? op.datatype : "", op.count), kRelaxed);
  slot->peer.store(op.p2p ? op.peer : -1, kRelaxed);
  slot->n_channels.store(op.n_channels, kRelaxed);
  slot->p2p.store(op.p2p, kRelaxed);
  slot->enqueue_mono_ns.store(MonotonicNs(), kRelaxed);
  slot->channels_started.store(0, kRelaxed);
  slot->channels_done.store(0, kRelaxed);
  slot->gpu_start_min.store(UINT64_MAX, kRelaxed);
  slot->gpu_stop_max.store(0, kRelaxed);
  slot->max_channel_ns.store(0, kRelaxed);
  slot->timed_channels.store(0, kRelaxed);
  slot->version.store(v + 2, std::memory_order_release);  // even: consistent
  return slot;
}

void* Recorder::StartKernelChannel(void* parent, uint8_t channel, uint64_t gpu_start_ns) noexcept {
  if (parent == nullptr || KindOf(parent) != HandleKind::kOp || channel >= kMaxChannels) {
    orphans_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto* slot = static_cast<OpSlot*>(parent);
  // While fewer than n_channels channels have started, the kernel reference keeps the slot alive,
  // so taking another reference is safe. Extra channels beyond n_channels are not trusted.
  uint32_t started = slot->channels_started.fetch_add(1, std::memory_order_relaxed);
  if (started >= slot->n_channels.load(std::memory_order_relaxed)) {
    orphans_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  slot->refs.fetch_add(1, std::memory_order_relaxed);
  ChannelRef& ref = slot->channels[channel];
  ref.start_ns.store(gpu_start_ns, std::memory_order_relaxed);
  ref.stop_ns.store(0, std::memory_order_relaxed);
  return &ref;
}

void Recorder::RecordKernelChannelStop(void* handle, uint64_t gpu_stop_ns) noexcept {
  if (handle == nullptr || KindOf(handle) != HandleKind::kChannel) return;
  static_cast<ChannelRef*>(handle)->stop_ns.store(gpu_stop_ns, std::memory_order_relaxed);
}

void Recorder::StopEvent(void* handle) noexcept {
  if (handle == nullptr) return;
  HandleKind kind = KindOf(handle);
  if (kind == HandleKind::kOp) {
    auto* slot = static_cast<OpSlot*>(handle);
    // Coll/P2p stop means "enqueued". Without channels nothing else will time this operation.
    if (slot->n_channels.load(std::memory_order_relaxed) == 0) {
      slot->comm.load(std::memory_order_relaxed)->CountUntimed();
    }
    OpPool::Release(slot, 1);
    return;
  }
  if (kind != HandleKind::kChannel) return;
  auto* ref = static_cast<ChannelRef*>(handle);
  OpSlot* slot = ref->owner;
  uint64_t start = ref->start_ns.load(std::memory_order_relaxed);
  uint64_t stop = ref->stop_ns.load(std::memory_order_relaxed);
  if (stop != 0 && stop >= start) {
    AtomicMax(slot->max_channel_ns, stop - start);
    AtomicMin(slot->gpu_start_min, start);
    AtomicMax(slot->gpu_stop_max, stop);
    slot->timed_channels.fetch_add(1, std::memory_order_relaxed);
  }
  uint32_t done = slot->channels_done.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (done == slot->n_channels.load(std::memory_order_relaxed)) {
    Complete(slot);
    OpPool::Release(slot, 2);  // the kernel reference and this channel's
  } else {
    OpPool::Release(slot, 1);
  }
}

void Recorder::Complete(OpSlot* slot) noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  CommState* comm = slot->comm.load(kRelaxed);
  if (slot->timed_channels.load(kRelaxed) == 0) {
    comm->CountUntimed();
    return;
  }
  Completion c;
  c.func = slot->func.load(kRelaxed);
  c.algo = slot->algo.load(kRelaxed);
  c.proto = slot->proto.load(kRelaxed);
  c.seq = slot->seq.load(kRelaxed);
  c.bytes = slot->bytes.load(kRelaxed);
  c.peer = slot->peer.load(kRelaxed);
  c.p2p = slot->p2p.load(kRelaxed);
  c.timed = true;
  c.channels = slot->n_channels.load(kRelaxed);
  c.gpu_start_ns = slot->gpu_start_min.load(kRelaxed);
  c.gpu_stop_ns = slot->gpu_stop_max.load(kRelaxed);
  c.exec_ns = slot->max_channel_ns.load(kRelaxed);
  c.host_done_unix_ns = RealtimeNs();
  comm->ring().Push(c);
}

void Recorder::ListInFlight(std::vector<InFlightView>* out) const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  auto& pool = const_cast<OpPool&>(pool_);
  for (size_t i = 0; i < pool.capacity(); ++i) {
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
                      s.channels_started.load(kRelaxed),
                      s.channels_done.load(kRelaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(kRelaxed) != v1 || view.comm == nullptr) continue;
    out->push_back(view);
  }
}

bool Recorder::Referenced(const CommState* comm) const {
  auto& pool = const_cast<OpPool&>(pool_);
  for (size_t i = 0; i < pool.capacity(); ++i) {
    const OpSlot& s = pool.slot(i);
    if (s.refs.load(std::memory_order_acquire) != 0 &&
        s.comm.load(std::memory_order_relaxed) == comm) {
      return true;
    }
  }
  return false;
}

}  // namespace ncclwatch::plugin
