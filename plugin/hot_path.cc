#include "plugin/hot_path.h"

#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace ncclwatch::plugin {

size_t RoundUpPow2(size_t n, size_t minimum) {
  size_t p = minimum;
  while (p < n) p <<= 1;
  return p;
}

OpPool::OpPool(size_t capacity)
    : capacity_(RoundUpPow2(capacity, 64)),
      bytes_(capacity_ * sizeof(OpSlot)),
      slots_(nullptr),
      free_head_(Pack(0, kNil)) {
  // Zero pages, reserved: a slot is constructed (and its pages touched) when first handed out.
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  slots_ = static_cast<OpSlot*>(p);
}

OpPool::~OpPool() {
  // OpSlot's members are atomics and arrays of them: nothing to destroy.
  munmap(slots_, bytes_);
}

OpSlot* OpPool::Claim(uint32_t initial_refs) {
  OpSlot* slot = nullptr;
  uint64_t head = free_head_.load(std::memory_order_acquire);
  while (IndexPart(head) != kNil) {
    OpSlot* candidate = &slots_[IndexPart(head)];
    // `candidate` may be claimed (and its link rewritten) under our feet: then the head's tag has
    // moved on and the exchange fails.
    const uint32_t next = candidate->next_free.load(std::memory_order_relaxed);
    if (free_head_.compare_exchange_weak(head, Pack(TagPart(head) + 1, next),
                                         std::memory_order_acquire, std::memory_order_acquire)) {
      slot = candidate;
      break;
    }
  }
  if (slot == nullptr) {
    // Nothing freed to reuse: a never-used slot, unless all of them were handed out already.
    if (high_water_.load(std::memory_order_relaxed) >= capacity_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    const uint64_t i = high_water_.fetch_add(1, std::memory_order_acq_rel);
    if (i >= capacity_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    slot = &slots_[i];  // zero pages: a valid free slot (hot_path.h)
  }
  slot->refs.store(initial_refs, std::memory_order_relaxed);
  return slot;
}

size_t OpPool::InUse() const {
  size_t n = 0;
  for (size_t i = 0; i < used(); ++i) n += slots_[i].refs.load(std::memory_order_relaxed) != 0;
  return n;
}

CompletionRing::CompletionRing(size_t capacity)
    : mask_(RoundUpPow2(capacity, 2) - 1), cells_(new Cell[mask_ + 1]) {
  for (size_t i = 0; i <= mask_; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
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
