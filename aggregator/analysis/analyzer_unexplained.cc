// The Analyzer's pages for lateness no root cause explains (rootcause/unexplained.h): which late
// GPUs page by themselves, alone or as a node, and when those pages end. Split from analyzer.cc.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/detect/median.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

// Floor of the family's MAD in its z-score (identical latenesses do not divide by zero).
constexpr double kMinFamilyMadNs = 10'000;

// What one rank shows at one collective across its family (the job's communicators of its size
// and node span): the design reference (lower quartile), the median and MAD of the latenesses,
// how many members have one and how many are a threshold beyond the reference.
struct FamilyDesign {
  double reference_ns = 0;
  double median_ns = 0;
  double mad_ns = 0;
  int members = 0;
  int late = 0;
};

FamilyDesign DesignOf(const StragglerDetector& stragglers, const std::set<CommKey>& family,
                      const std::string& op, int rank, double threshold_ns) {
  std::vector<double> lateness;
  for (const CommKey& member : family) {
    if (auto in = stragglers.LatenessIn(member, op, rank)) lateness.push_back(*in);
  }
  FamilyDesign f;
  f.members = static_cast<int>(lateness.size());
  if (lateness.empty()) return f;
  auto q = lateness.begin() + (lateness.size() - 1) / 4;
  std::nth_element(lateness.begin(), q, lateness.end());
  f.reference_ns = *q;
  for (double l : lateness) f.late += l - f.reference_ns >= threshold_ns ? 1 : 0;
  f.median_ns = Median(lateness);
  for (double& l : lateness) l = std::abs(l - f.median_ns);
  f.mad_ns = Median(lateness);
  return f;
}

// One late communicator rank of a GPU, beyond its family.
struct LateRank {
  CommKey comm;
  int rank = 0;
  RankScore score;
  int64_t since_ns = 0;  // beyond its family since
};

}  // namespace

std::vector<RankScore> Analyzer::PageableLatenessLocked(const CommKey& comm) const {
  return detectors_.stragglers.Flagged(
      comm, [&](const std::string& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return op == kP2pClass || own_time_.Imbalanced(comm, op);
      });
}

bool Analyzer::WaitedInExchangeLocked(const ProcessKey& p) const {
  const double threshold = detectors_.stragglers.options().threshold_ns;
  auto exchanges_only = [](const std::string& op) { return op != kP2pClass; };
  for (const auto& [comm, comm_rank] : processes_.RanksOf(p)) {
    const int rank = comm_rank;  // a lambda below captures it (not a structured binding)
    // Only where it has exchanges: a world communicator of thousands of late ranks is not read.
    if (!detectors_.stragglers.LatenessIn(comm, kP2pClass, rank)) continue;
    const std::vector<RankScore> flagged = detectors_.stragglers.Flagged(comm, exchanges_only);
    if (std::any_of(flagged.begin(), flagged.end(),
                    [&](const RankScore& s) { return s.rank == rank && s.flagged; })) {
      continue;  // late there itself
    }
    // A peer spending longer on its own work before their exchanges: its lateness there mixes
    // with the exchanges it is punctual at (an expert's combine after its compute, the dispatch
    // after the TP all-reduce) and may never be flagged, but its own time is on the way to a
    // verdict.
    if (own_time_.ExchangePeerBuilding(comm, rank)) return true;
    const std::set<CommKey>& family = families_.FamilyOf(comm);
    for (const RankScore& s : flagged) {
      if (!s.flagged) continue;
      // A pipeline's exchanges are late by design (its bubbles), alike in every replica.
      if (family.size() >= 2 &&
          s.lateness_ns - DesignOf(detectors_.stragglers, family, kP2pClass, s.rank, threshold)
                              .reference_ns <
              threshold) {
        continue;
      }
      return true;
    }
  }
  return false;
}

bool Analyzer::JobHasRootCauseLocked(const std::string& job_id) const {
  if (verdicts_.AnyGpu(job_id) || verdicts_.AnyNodeSlow(job_id)) return true;
  auto hang = hang_origins_.origins().lower_bound(CommKey{job_id, 0});
  return hang != hang_origins_.origins().end() && hang->first.job_id == job_id;
}

void Analyzer::EndUnexplainedLocked(const std::string& job_id, const std::string& reason,
                                    int64_t now_ns, std::vector<Event>* events) {
  auto it = unexplained_.find(job_id);
  if (it == unexplained_.end()) return;
  for (const UnexplainedPage& page : it->second) {
    events->push_back(OriginNotFoundEnd(page.start, now_ns, reason));
  }
  unexplained_.erase(it);
}

UnexplainedView Analyzer::UnexplainedViewLocked() const {
  UnexplainedView view;
  for (const auto& [job, pages] : unexplained_) {
    for (const UnexplainedPage& page : pages) {
      for (const auto& member : page.members) {
        view.ranks.insert(member);
        if (page.start.kind() == Event::NODE_STRAGGLER) {
          view.nodes.emplace(member.first, page.start.node_straggler().node());
        }
      }
    }
  }
  return view;
}

void Analyzer::UnexplainedLatenessLocked(int64_t now_ns, std::vector<Event>* events) {
  // By job: JobHasRootCauseLocked, asked once per tick; the last job asked is remembered apart
  // (late_comms_ is in job order, and a large job has thousands of them).
  std::map<std::string, bool> rooted;
  const std::pair<const std::string, bool>* last = nullptr;
  auto has_root = [&](const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (last != nullptr && last->first == job) return last->second;
    auto [it, added] = rooted.try_emplace(job, false);
    if (added) it->second = JobHasRootCauseLocked(job);
    last = &*it;
    return it->second;
  };

  // The pages that are over: a rank of theirs cleared (or its communicator went), or a root cause
  // of the job was found. What stays open is paged once: its GPUs and nodes are not paged again.
  std::set<ProcessKey> paged;
  std::set<std::pair<std::string, std::string>> paged_nodes;  // (job, node)
  for (auto it = unexplained_.begin(); it != unexplained_.end();) {
    const bool root = has_root(it->first);
    std::vector<UnexplainedPage>& pages = it->second;
    for (auto page = pages.begin(); page != pages.end();) {
      // Cleared in the classes it was paged from: a flag elsewhere (its exchanges) keeps no
      // page open.
      const bool cleared =
          std::any_of(page->members.begin(), page->members.end(),
                      [&](const auto& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                        if (registry_.Find(m.first) == nullptr) return true;
                        for (const RankScore& s : PageableLatenessLocked(m.first)) {
                          if (s.rank == m.second && s.flagged) return false;
                        }
                        return true;
                      });
      if (root || cleared) {
        events->push_back(OriginNotFoundEnd(page->start, now_ns, root ? kEndRootCauseFound : ""));
        page = pages.erase(page);
        continue;
      }
      for (const auto& [comm, rank] : page->members) {
        if (const ProcessKey* p = processes_.Of(comm, rank)) paged.insert(*p);
      }
      if (page->start.kind() == Event::NODE_STRAGGLER) {
        paged_nodes.emplace(it->first, page->start.node_straggler().node());
      }
      ++page;
    }
    it = pages.empty() ? unexplained_.erase(it) : std::next(it);
  }

  // The late ranks beyond their family, by job and GPU. What the same rank shows at the same
  // collective across its family is the design: the lower quartile of its latenesses there (design
  // is the same in every replica; a fault is in few). Once per (family, collective, rank) per tick,
  // and only for communicators that had a collective since their last walk, or whose family did.
  const double threshold = detectors_.stragglers.options().threshold_ns;
  std::map<std::tuple<const std::set<CommKey>*, std::string, int>, FamilyDesign> design;
  // A communicator's ranks late beyond their family, ahead of what pages now (paged already, by
  // which GPU): what the pass keeps of it between ticks (LateWalk).
  auto beyond_family = [&](const CommKey& key, const CommEntry& entry,
                           const std::set<CommKey>& family) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<RankScore> beyond;
    // A flag says a rank is a threshold later than its punctual peers; in a large job whose
    // compute jitter is a few percent of a long step, some rank of some communicator always is,
    // by chance (and in a whole band of them while warm-up settles). So lateness pages alone only
    // from a rank far outside its peers (robust z-score), or, where half the ranks or more are
    // late (which moves the median itself), from a node every rank of which the communicator has
    // there (two or more) is late: a slow node of a two-node communicator. Communicators of 2 or
    // 3 ranks cannot tell.
    //
    // Lateness in point-to-point exchanges does not page here: a pipeline's schedule makes it
    // mostly design (the warm-up and drain bubbles, which end of each exchange waits), in a mix
    // whose window median jumps between modes, and TP partners on one node move together, so
    // half a small family can look late by chance. A GPU slow before its exchanges is found by
    // its own time there (own_time.h). Nor does lateness in a class whose ranks take turns being
    // the busiest (data-dependent imbalance, own_time.h): the late rank changes with the routing.
    std::vector<RankScore> notable = PageableLatenessLocked(key);
    std::set<int> flagged_ranks;
    for (const RankScore& score : notable) {
      if (score.flagged) flagged_ranks.insert(score.rank);
    }
    if (flagged_ranks.empty()) return beyond;
    const int nranks_of = entry.who.nranks;
    const bool half_late = 2 * flagged_ranks.size() >= static_cast<size_t>(nranks_of);
    // Each node is judged once per communicator, not once per late rank on it.
    absl::flat_hash_map<std::string_view, bool> whole_node_late;
    auto significant = [&](const RankScore& score) {
      if (entry.who.nranks < 4 || score.peer_z >= unexplained_options_.min_peer_z) return true;
      if (!half_late) return false;
      const std::string& node = entry.NodeOf(score.rank);
      if (node.empty()) return false;
      auto [judged, added] = whole_node_late.try_emplace(node, false);
      if (added) {
        const std::vector<int>& here = entry.RanksOnNode(node);
        judged->second = here.size() >= 2 && std::all_of(here.begin(), here.end(), [&](int r) {
                           return flagged_ranks.contains(r);
                         });
      }
      return judged->second;
    };
    for (RankScore& score : notable) {
      if (!score.flagged || !significant(score)) continue;
      if (family.size() >= 2) {
        auto [d, added] = design.try_emplace({&family, score.op, score.rank}, FamilyDesign{});
        if (added) {
          d->second = DesignOf(detectors_.stragglers, family, score.op, score.rank, threshold);
        }
        const FamilyDesign& f = d->second;
        if (score.lateness_ns - f.reference_ns < threshold) continue;  // by design
        // Among many replicas, the latest is a threshold beyond the earliest by chance: it must
        // also stand out of them (unless half of them are late: a node holding several of them).
        const bool stands_out =
            f.members < 4 || 2 * f.late >= f.members ||
            (score.lateness_ns - f.median_ns) / (1.4826 * std::max(f.mad_ns, kMinFamilyMadNs)) >=
                unexplained_options_.min_peer_z;
        if (!stands_out) continue;
      }
      beyond.push_back(std::move(score));
    }
    return beyond;
  };
  // A family's stamp: the newest of its members' and of the families' membership.
  absl::flat_hash_map<const std::set<CommKey>*, uint64_t> family_stamps;
  auto family_stamp = [&](const std::set<CommKey>& family) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, added] = family_stamps.try_emplace(&family, families_stamp_);
    if (added) {
      for (const CommKey& member : family) {
        if (const CommEntry* e = registry_.Find(member))
          it->second = std::max(it->second, e->stamp);
      }
    }
    return it->second;
  };

  std::map<std::pair<CommKey, int>, int64_t> beyond_since;
  std::map<std::string, std::map<ProcessKey, std::vector<LateRank>>> late_by_job;
  for (const CommKey& key : late_comms_) {
    const CommEntry* entry = registry_.Find(key);
    if (entry == nullptr || !entry->own_times || entry->flagged_since_ns.empty() ||
        has_root(key.job_id)) {
      continue;
    }
    const std::set<CommKey>& family = families_.FamilyOf(key);
    const uint64_t family_now = family_stamp(family);
    LateWalk& walk = late_walks_[key];
    if (walk.comm_stamp != entry->stamp || walk.family_stamp != family_now) {
      walk.comm_stamp = entry->stamp;
      walk.family_stamp = family_now;
      walk.beyond = beyond_family(key, *entry, family);
    }
    for (const RankScore& score : walk.beyond) {
      auto before = beyond_since_.find({key, score.rank});
      const int64_t since = before != beyond_since_.end() ? before->second : now_ns;
      beyond_since.emplace(std::make_pair(key, score.rank), since);
      const ProcessKey* p = processes_.Of(key, score.rank);
      if (p == nullptr || paged.count(*p) > 0) continue;
      late_by_job[key.job_id][*p].push_back(LateRank{key, score.rank, score, since});
    }
  }
  beyond_since_ = std::move(beyond_since);

  // A late GPU that is punctual in a communicator where another late GPU is late waited for that
  // one there: its own lateness elsewhere is a consequence, not a symptom of its own (the
  // ranks a slow node's pipeline partners delay). Unless that would drop every late GPU of the job.
  for (auto& [job, gpus] : late_by_job) {
    std::set<std::pair<CommKey, int>> late_ranks;
    for (const auto& [p, ranks] : gpus) {
      for (const LateRank& l : ranks) late_ranks.emplace(l.comm, l.rank);
    }
    for (const auto& [comm_rank, since] : beyond_since_) {
      if (comm_rank.first.job_id == job) late_ranks.insert(comm_rank);  // paged ones too
    }
    std::vector<ProcessKey> consequences;
    for (const auto& [p, ranks] : gpus) {
      for (const auto& [comm, rank] : processes_.RanksOf(p)) {
        if (late_ranks.count({comm, rank}) > 0) continue;
        auto other = late_ranks.lower_bound({comm, INT_MIN});
        if (other != late_ranks.end() && other->first == comm) {
          consequences.push_back(p);
          break;
        }
      }
    }
    if (consequences.size() < gpus.size()) {
      for (const ProcessKey& p : consequences) gpus.erase(p);
    }
    // One that waited for a peer in an exchange (an expert's all-to-all peers wait for a slow
    // expert, then arrive late at their own collectives, where their partners do not) holds
    // longer: that peer's own time in the exchange class names it if it is the origin.
    for (auto& [p, ranks] : gpus) {
      if (!WaitedInExchangeLocked(p)) continue;
      for (LateRank& l : ranks) l.since_ns += unexplained_options_.exchange_hold_ns;
    }
  }

  const RootCauseVerdicts::GpusOnNode gpus_on_node = GpusOnNodeLocked();
  for (const auto& [job_id, gpus] : late_by_job) {
    const std::string& job = job_id;  // a lambda below captures it (not a structured binding)
    std::vector<const ProcessKey*> ids;
    std::vector<const std::vector<LateRank>*> lates;
    std::vector<LateGpu> late;
    for (const auto& [p, ranks] : gpus) {
      const LateRank& first = ranks.front();
      const std::string& node = registry_.Find(first.comm)->NodeOf(first.rank);
      if (paged_nodes.count({job, node}) > 0) continue;
      int64_t since = first.since_ns;
      for (const LateRank& l : ranks) since = std::min(since, l.since_ns);
      late.push_back(LateGpu{static_cast<int>(ids.size()), node, since});
      ids.push_back(&p);
      lates.push_back(&ranks);
    }
    const UnexplainedPages pages = DecideUnexplained(
        late, [&](const std::string& node) { return gpus_on_node(job, node); },
        NodeRule{verdicts_.options().node_min_gpus, verdicts_.options().node_fraction}, now_ns,
        unexplained_options_.after_ns);
    for (const auto& [node, gpu_ids] : pages.nodes) {
      UnexplainedPage page;
      std::set<CommKey> comms;
      std::vector<int> devices;
      for (int id : gpu_ids) {
        devices.push_back(ids[id]->cuda_device);
        for (const LateRank& l : *lates[id]) {
          page.members.emplace_back(l.comm, l.rank);
          comms.insert(l.comm);
        }
      }
      if (comms.size() == 1) {  // one communicator shows it: name it, and its ranks
        std::vector<int> ranks;
        for (const auto& m : page.members) ranks.push_back(m.second);
        std::sort(ranks.begin(), ranks.end());
        page.start = SlowNodeEvent(*comms.begin(), registry_.Find(*comms.begin())->who,
                                   SlowNodeChange{true, node, ranks}, now_ns,
                                   /*origin_not_found=*/true);
      } else {
        std::sort(devices.begin(), devices.end());
        page.start = UnexplainedNodeEvent(job, node, devices, now_ns);
      }
      events->push_back(page.start);
      unexplained_[job].push_back(std::move(page));
    }
    for (int id : pages.gpus) {
      // Named where it is latest.
      const LateRank& worst = *std::max_element(lates[id]->begin(), lates[id]->end(),
                                                [](const LateRank& a, const LateRank& b) {
                                                  return a.score.lateness_ns < b.score.lateness_ns;
                                                });
      const CommEntry* entry = registry_.Find(worst.comm);
      UnexplainedPage page;
      page.members.emplace_back(worst.comm, worst.rank);
      page.start = StragglerEvent(worst.comm, entry->who, FlagChange{worst.comm, worst.score},
                                  entry->FlaggedSince(worst.rank), now_ns,
                                  /*origin_not_found=*/true);
      events->push_back(page.start);
      unexplained_[job].push_back(std::move(page));
    }
  }
}

}  // namespace ncclwatch::aggregator
