#include "plugin/hot_path.h"

namespace ncclwatch::plugin {

size_t RoundUpPow2(size_t n, size_t minimum) {
  size_t p = minimum;
  while (p < n) p <<= 1;
  return p;
}

OpPool::OpPool(size_t capacity)
    : mask_(RoundUpPow2(capacity, 64) - 1), slots_(new OpSlot[mask_ + 1]) {}

OpSlot* OpPool::Claim(uint32_t initial_refs) {
  // A handful of probes from a shared cursor: under normal load the first slot tried is free
  // (slots are released in roughly the order they were claimed).
  constexpr int kProbes = 8;
  for (int probe = 0; probe < kProbes; ++probe) {
    size_t i = cursor_.fetch_add(1, std::memory_order_relaxed) & mask_;
    uint32_t expected = 0;
    if (slots_[i].refs.compare_exchange_strong(expected, initial_refs, std::memory_order_acquire,
                                               std::memory_order_relaxed)) {
      return &slots_[i];
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

bool OpPool::Release(OpSlot* slot, uint32_t n) {
  return slot->refs.fetch_sub(n, std::memory_order_acq_rel) == n;
}

size_t OpPool::InUse() const {
  size_t n = 0;
  for (size_t i = 0; i <= mask_; ++i) n += slots_[i].refs.load(std::memory_order_relaxed) != 0;
  return n;
}

CompletionRing::CompletionRing(size_t capacity)
    : mask_(RoundUpPow2(capacity, 2) - 1), cells_(new Cell[mask_ + 1]) {
  for (size_t i = 0; i <= mask_; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
}

bool CompletionRing::Push(const Completion& c) {
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

bool CompletionRing::Pop(Completion* out) {
  Cell& cell = cells_[dequeue_pos_ & mask_];
  uint64_t seq = cell.sequence.load(std::memory_order_acquire);
  if (seq != dequeue_pos_ + 1) return false;
  *out = cell.value;
  cell.sequence.store(dequeue_pos_ + mask_ + 1, std::memory_order_release);
  ++dequeue_pos_;
  return true;
}

}  // namespace ncclwatch::plugin
