#include "aggregator/rootcause/hang_origin.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>

namespace ncclwatch::aggregator {
namespace {

bool IsMissing(const HangView& h, int rank) {
  return std::find(h.missing.begin(), h.missing.end(), rank) != h.missing.end();
}

// The operation of `h` that `ops` (one rank's in-flight list) holds, or nullptr.
const HangDetector::InFlight* OpOf(const HangView& h,
                                   const std::vector<HangDetector::InFlight>& ops) {
  for (const HangDetector::InFlight& op : ops) {
    if (h.op == kP2pHangOp ? op.p2p : (!op.p2p && op.op == h.op && op.seq == h.seq)) return &op;
  }
  return nullptr;
}

// The same hung operation (communicator, collective and seq).
bool SameHang(const HangView& a, const HangView& b) {
  return a.comm == b.comm && a.op == b.op && a.seq == b.seq;
}

void SortByEnqueue(std::vector<HangView>* hangs) {
  std::sort(hangs->begin(), hangs->end(),
            [](const HangView& a, const HangView& b) { return a.enqueued_ns < b.enqueued_ns; });
}

}  // namespace

std::vector<HangGroup> GroupHangsByOrigin(const std::vector<HangView>& hangs,
                                          const ProcessIndex& processes,
                                          const InFlightLookup& in_flight) {
  std::map<CommKey, size_t> hang_of;  // communicator -> index in `hangs`
  for (size_t i = 0; i < hangs.size(); ++i) hang_of[hangs[i].comm] = i;

  // depends[i]: the hang that hang i is stuck behind (the oldest such), or i itself.
  std::vector<size_t> depends(hangs.size());
  std::vector<bool> settled(hangs.size(), true);
  for (size_t i = 0; i < hangs.size(); ++i) {
    const HangView& h = hangs[i];
    depends[i] = i;
    int64_t best_enqueued = 0;
    auto consider = [&](size_t j, int64_t enqueued_ns) {
      if (j == i) return;
      if (depends[i] == i || enqueued_ns < best_enqueued) {
        depends[i] = j;
        best_enqueued = enqueued_ns;
      }
    };
    for (const auto& [r, process] : processes.Members(h.comm)) {
      const ProcessKey* p = &process;
      const bool missing = IsMissing(h, r);
      int64_t before_ns = 0;
      if (!missing) {
        const std::vector<HangDetector::InFlight> mine = in_flight(h.comm, r);
        const HangDetector::InFlight* op = OpOf(h, mine);
        if (op == nullptr || op->started) continue;  // it is running: waiting, not queued
        before_ns = op->enqueued_ns;
      }
      for (const auto& [comm, rank] : processes.RanksOf(*p)) {
        if (comm == h.comm) continue;
        auto other = hang_of.find(comm);
        bool stuck_there = false;
        int64_t since = INT64_MAX;
        for (const HangDetector::InFlight& op : in_flight(comm, rank)) {
          // A rank missing from H that is stuck in any operation has not reached H in its
          // program order yet: that operation is older, whenever its peers enqueued H. A rank
          // queued in H is held by an operation enqueued before, or by one whose kernel started
          // and never ended (one stream per GPU; enqueues of one burst can carry equal times).
          if (missing || op.enqueued_ns < before_ns || op.started) {
            stuck_there = true;
            since = std::min(since, op.enqueued_ns);
          }
        }
        if (other == hang_of.end()) {
          // Held by an operation whose own hang is not declared yet (it may be, soon: it is
          // older), or that is about to end: not an origin until that is known.
          if (stuck_there) settled[i] = false;
          continue;
        }
        const HangView& h2 = hangs[other->second];
        since = std::min(since, h2.enqueued_ns);
        if (!stuck_there && missing && IsMissing(h2, rank) && h2.enqueued_ns < h.enqueued_ns) {
          stuck_there = true;  // it never reached the earlier one either
        }
        if (stuck_there) consider(other->second, since);
      }
    }
  }

  // Follow the links to the origin; a cycle (two hangs each behind the other, as can happen with
  // stale reports) ends at its oldest member.
  std::vector<size_t> origin(hangs.size());
  for (size_t i = 0; i < hangs.size(); ++i) {
    std::set<size_t> seen{i};
    size_t at = i;
    while (depends[at] != at && seen.insert(depends[at]).second) at = depends[at];
    if (depends[at] != at) {  // a cycle: its oldest member
      size_t oldest = at;
      for (size_t k = depends[at]; k != at; k = depends[k]) {
        if (hangs[k].enqueued_ns < hangs[oldest].enqueued_ns) oldest = k;
      }
      at = oldest;
    }
    origin[i] = at;
  }
  std::map<size_t, HangGroup> groups;
  for (size_t i = 0; i < hangs.size(); ++i) {
    HangGroup& g = groups[origin[i]];
    if (origin[i] == i) {
      g.origin = hangs[i];
      g.settled = settled[i];
    } else {
      g.consequences.push_back(hangs[i]);
    }
  }
  std::vector<HangGroup> out;
  for (auto& [i, g] : groups) {
    SortByEnqueue(&g.consequences);
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const HangGroup& a, const HangGroup& b) {
    return a.origin.enqueued_ns < b.origin.enqueued_ns;
  });
  return out;
}

bool HangOrigins::Reported(const HangView& h) const {
  auto it = origins_.find(h.comm);
  return it != origins_.end() && SameHang(it->second.origin, h);
}

std::vector<HangGroupChange> HangOrigins::Update(std::vector<HangGroup> groups) {
  std::vector<HangGroupChange> changes;
  std::map<CommKey, HangGroup> now;
  for (HangGroup& g : groups) {
    if (!g.settled) continue;  // not an origin until what holds its ranks is known
    // A reported origin that is still hung stays the origin: hangs missing the same stopped
    // rank are equally old, and which one looks oldest can change from report to report.
    if (!Reported(g.origin)) {
      auto old = std::find_if(g.consequences.begin(), g.consequences.end(),
                              [this](const HangView& c) { return Reported(c); });
      if (old != g.consequences.end()) {
        std::swap(g.origin, *old);
        SortByEnqueue(&g.consequences);
      }
    }
    const CommKey comm = g.origin.comm;
    now.emplace(comm, std::move(g));
  }
  std::vector<HangGroupChange> starts;
  for (const auto& [comm, g] : now) {
    if (!Reported(g.origin)) starts.push_back({true, g});
  }
  for (auto& [comm, old] : origins_) {  // ends first, then starts
    auto it = now.find(comm);
    if (it == now.end() || !SameHang(it->second.origin, old.origin)) {
      changes.push_back({false, std::move(old)});
    }
  }
  changes.insert(changes.end(), std::make_move_iterator(starts.begin()),
                 std::make_move_iterator(starts.end()));
  origins_ = std::move(now);
  return changes;
}

}  // namespace ncclwatch::aggregator
