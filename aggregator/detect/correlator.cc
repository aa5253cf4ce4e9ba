#include "aggregator/detect/correlator.h"

#include <algorithm>

namespace ncclwatch::aggregator {

CompletedGroup* Correlator::Add(const CommKey& comm, int nranks, const std::string& op,
                                uint64_t seq, int rank, uint64_t duration_ns, uint64_t gpu_start_ns,
                                int64_t now_ns, int64_t own_time_ns, int64_t sync_wait_ns,
                                CachedSlot* slot) {
  if (nranks <= 0 || rank < 0 || rank >= nranks) return nullptr;
  return Join(comm, &op, GroupKey{seq}, nranks,
              Arrival{rank, duration_ns, gpu_start_ns, own_time_ns, sync_wait_ns}, now_ns, slot);
}

CompletedGroup* Correlator::AddP2p(const CommKey& comm, int nranks, bool send, int rank, int peer,
                                   uint64_t seq, uint64_t duration_ns, uint64_t gpu_start_ns,
                                   int64_t now_ns, int64_t own_time_ns, int64_t sync_wait_ns,
                                   CachedSlot* slot) {
  if (nranks <= 0 || rank < 0 || rank >= nranks || peer < 0 || peer >= nranks || peer == rank) {
    return nullptr;
  }
  const int sender = send ? rank : peer;
  const int receiver = send ? peer : rank;
  CompletedGroup* done = Join(
      comm, nullptr, GroupKey{seq, sender, receiver}, 2,
      Arrival{send ? 0 : 1, duration_ns, gpu_start_ns, own_time_ns, sync_wait_ns}, now_ns, slot);
  if (done != nullptr) {
    done->members.assign({sender, receiver});
    done->nranks = nranks;
  }
  return done;
}

CompletedGroup* Correlator::Join(const CommKey& comm, const std::string* op, GroupKey key,
                                 int parties, const Arrival& arrival, int64_t now_ns,
                                 CachedSlot* slot) {
  // The slot holds the communicator's collectives in `comm`, its exchanges in `rank`.
  const bool exchange = key.sender >= 0;
  if (slot != nullptr && slot->generation != generation_) {
    *slot = CachedSlot{nullptr, nullptr, generation_};
  }
  void** cached = slot == nullptr ? nullptr : exchange ? &slot->rank : &slot->comm;
  CommGroups* groups = cached != nullptr ? static_cast<CommGroups*>(*cached) : nullptr;
  if (groups == nullptr) {
    groups = exchange ? &exchanges_[comm] : &comms_[comm];
    if (cached != nullptr) *cached = groups;
  }
  CommGroups& cg = *groups;
  if (!exchange) {
    // A communicator runs a handful of collective kinds: a scan of a few short strings.
    auto known = std::find(cg.ops.begin(), cg.ops.end(), *op);
    if (known == cg.ops.end()) {
      if (cg.ops.size() >= kMaxOpsPerComm) {
        ++refused_;
        return nullptr;
      }
      known = cg.ops.insert(cg.ops.end(), *op);
    }
    key.op = static_cast<uint32_t>(known - cg.ops.begin());
  }
  auto [it, inserted] = cg.groups.try_emplace(key);
  Group& g = it->second;
  if (inserted) {
    g.nranks = parties;
    g.first_seen_ns = now_ns;
    // Room for every party at once (the size claimed is bounded: a group of more grows as they
    // really arrive).
    g.arrivals.reserve(std::min(parties, 64));
    cg.order.emplace_back(now_ns, key);
    cg.last_opened_ns = now_ns;
  }
  if (g.nranks != parties) return nullptr;
  if (parties <= kScanParties) {
    for (const Arrival& a : g.arrivals) {
      if (a.rank == arrival.rank) return nullptr;  // a duplicate record
    }
  } else if (!g.seen.insert(arrival.rank).second) {
    return nullptr;
  }
  g.arrivals.push_back(arrival);
  if (static_cast<int>(g.arrivals.size()) < parties) {
    // Over the cap, or an age order mostly of groups that completed since (they leave it lazily):
    // trimmed now. Otherwise the once-a-second Expire does it, not a lookup of the oldest group
    // per new one.
    if (inserted && (cg.groups.size() > options_.max_open_groups ||
                     cg.order.size() > 2 * cg.groups.size() + kOrderSlack)) {
      Trim(cg, INT64_MIN, options_.max_open_groups);
    }
    return nullptr;
  }
  CompletedGroup& done = done_;
  done.comm = comm;
  done.op = exchange ? kP2pClass : cg.ops[key.op];
  done.seq = key.seq;
  done.nranks = parties;
  done.members.clear();
  done.duration_ns.resize(parties);
  done.gpu_start_ns.resize(parties);
  done.own_time_ns.resize(parties);
  done.sync_wait_ns.resize(parties);
  for (const Arrival& a : g.arrivals) {
    done.duration_ns[a.rank] = a.duration_ns;
    done.gpu_start_ns[a.rank] = a.gpu_start_ns;
    done.own_time_ns[a.rank] = a.own_time_ns;
    done.sync_wait_ns[a.rank] = a.sync_wait_ns;
  }
  cg.groups.erase(it);  // its entry in `order` is skipped lazily
  ++completed_;
  return &done;
}

void Correlator::Trim(CommGroups& cg, int64_t older_than_ns, size_t max_groups) {
  while (!cg.order.empty()) {
    auto& [first_seen, key] = cg.order.front();
    auto it = cg.groups.find(key);
    bool stale = it == cg.groups.end() || it->second.first_seen_ns != first_seen;
    if (!stale && first_seen >= older_than_ns && cg.groups.size() <= max_groups) break;
    if (!stale) {
      cg.groups.erase(it);
      ++expired_;
    }
    cg.order.pop_front();
  }
}

size_t Correlator::Expire(int64_t now_ns) {
  uint64_t before = expired_;
  for (auto* groups : {&comms_, &exchanges_}) {
    for (auto it = groups->begin(); it != groups->end();) {
      Trim(it->second, now_ns - options_.grace_ns, options_.max_open_groups);
      if (it->second.groups.empty() && it->second.last_opened_ns < now_ns - options_.grace_ns) {
        groups->erase(it++);
        ++generation_;
      } else {
        ++it;
      }
    }
  }
  return expired_ - before;
}

void Correlator::Forget(const CommKey& comm) {
  comms_.erase(comm);
  exchanges_.erase(comm);
  ++generation_;
}

size_t Correlator::open_groups() const {
  size_t n = 0;
  for (const auto* groups : {&comms_, &exchanges_}) {
    for (const auto& [key, cg] : *groups) n += cg.groups.size();
  }
  return n;
}

}  // namespace ncclwatch::aggregator
