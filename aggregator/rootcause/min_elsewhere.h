// The smallest value held on another node than a given one, for a set of members whose values
// move all the time: the design reference of the own-time analysis (own_time.h), asked for every
// judged rank of every collective, over a family slot's members (one per communicator: 2,048 at
// a tensor-parallel index of a 16,384-GPU job), each of which moves at nearly every collective
// of its own.
//
// The values sit in one array, and the two members that answer every question are remembered:
// the smallest, and the smallest on another node than that one's. They are found again by one
// pass over the array only when one of those two grows or a member leaves; an update that makes
// some other member smaller moves them at once. A member answers at most once per pass of
// updates over the members, so a pass costs O(1) per update, where a sorted index paid a tree's
// erase and insert for each.
//
// Members are referred to by their index; each names an int of its owner's that holds it, kept
// right when Remove moves another member into the freed place. Not thread-safe.
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_MIN_ELSEWHERE_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_MIN_ELSEWHERE_H_

#include <cstdint>
#include <vector>

namespace ncclwatch::aggregator {

class MinElsewhere {
 public:
  // A member on `node` (a hash of its name), without a value yet; its index is written to
  // *index, which must stay valid while it is a member.
  void Add(uint64_t node, int* index);
  // Member `i` now has value `value` (true) or none (false).
  void Set(int i, bool has_value, double value);
  // Takes member `i` out; the last member moves to its place (its index is updated).
  void Remove(int i);
  // The smallest value of a member on a node other than `node`; false if none has a value.
  bool SmallestElsewhere(uint64_t node, double* value) const;

  bool HasValue(int i) const { return members_[i].has_value; }
  size_t size() const { return members_.size(); }
  bool empty() const { return members_.empty(); }

 private:
  struct Member {
    double value = 0;  // while has_value
    bool has_value = false;
    uint64_t node = 0;
    int* index = nullptr;
  };
  void Rescan() const;

  std::vector<Member> members_;
  mutable int best_ = -1;    // the smallest value (-1: none)
  mutable int second_ = -1;  // the smallest on another node than best_'s (-1: none)
  mutable bool stale_ = false;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_MIN_ELSEWHERE_H_
