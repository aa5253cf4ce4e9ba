// An ordered map whose lookups go through a hash index: the detectors walk their communicators
// in key order (so that what they report comes out in a stable order), but look one up on every
// report, which in an ordered tree of 16,384 ranks' communicators costs a dozen key comparisons
// (strings) and cache misses each time.
//
// Values live in the std::map (stable addresses); the index maps each key to its value. Only the
// operations the detectors use. Not thread-safe.
#ifndef NCCLWATCH_AGGREGATOR_DETECT_INDEXED_MAP_H_
#define NCCLWATCH_AGGREGATOR_DETECT_INDEXED_MAP_H_

#include <map>

#include "absl/container/flat_hash_map.h"

namespace ncclwatch::aggregator {

template <typename K, typename V>
class IndexedMap {
 public:
  IndexedMap() = default;
  // The index points into this map's own nodes: not copyable.
  IndexedMap(const IndexedMap&) = delete;
  IndexedMap& operator=(const IndexedMap&) = delete;
  using iterator = typename std::map<K, V>::iterator;
  using const_iterator = typename std::map<K, V>::const_iterator;

  V& operator[](const K& key) {
    if (auto it = index_.find(key); it != index_.end()) return *it->second;
    auto [pos, added] = map_.try_emplace(key);
    index_.emplace(key, &pos->second);
    return pos->second;
  }
  // nullptr when absent.
  V* Find(const K& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : it->second;
  }
  const V* Find(const K& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : it->second;
  }
  void erase(const K& key) {
    if (index_.erase(key) > 0) map_.erase(key);
  }
  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }

  iterator begin() { return map_.begin(); }
  iterator end() { return map_.end(); }
  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }

 private:
  std::map<K, V> map_;
  absl::flat_hash_map<K, V*> index_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_INDEXED_MAP_H_
