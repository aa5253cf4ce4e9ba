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
  // One atomic step picks a starting point; then a scan with plain loads, attempting the CAS only
  // on slots that look free. Slots are released roughly in claim order, so the first slot is almost
  // always free. Busy slots come in runs (a burst of one communicator's operations, or a hung
  // communicator's), so the scan may cover the whole pool -- loads only, bounded by the capacity --
  // and the cursor then jumps past the run: one claim pays to cross it, the next ones start beyond.
  // A claim fails only when every slot was busy as it passed.
  const size_t capacity = mask_ + 1;
  size_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
  for (size_t probe = 0; probe < capacity; ++probe) {
    OpSlot& slot = slots_[(start + probe) & mask_];
    if (slot.refs.load(std::memory_order_relaxed) != 0) continue;
    uint32_t expected = 0;
    if (slot.refs.compare_exchange_strong(expected, initial_refs, std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
      if (probe > 0) cursor_.fetch_add(probe, std::memory_order_relaxed);
      return &slot;
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
