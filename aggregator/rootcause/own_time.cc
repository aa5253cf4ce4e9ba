#include "aggregator/rootcause/own_time.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/hash/hash.h"
#include "aggregator/detect/correlator.h"
#include "aggregator/detect/median.h"

namespace ncclwatch::aggregator {
namespace {

// Collectives of a job between two refreshes of its typical growth, at least (RefreshJobGrowth
// reads every class of every communicator of the job; see Observe).
constexpr int64_t kJobGrowthRefresh = 256;

// Collectives after warm-up before a class's mean own time is settled (4 x its weight's 64: what
// warm-up left in it is 2% of it).
constexpr int64_t kSettledGroups = 256;

// How long after an exchange class first appears its ranks may be compared within their own
// communicator for want of counterparts: two of its reports' flush intervals, by when every
// node's reports of the job's first exchanges have arrived (and with them the replicas'
// classes), and never less than two default intervals (the agents' batching and the network add
// to a short one). A report claims at most the plugin's longest interval.
constexpr int64_t kMinCounterpartWaitNs = 2'000'000'000;
constexpr int64_t kMaxReportIntervalNs = 60'000'000'000;

// The smallest typical own time the change in time is scaled by (a class whose fastest rank has
// next to no own work is compared in absolute terms).
constexpr double kMinScaleNs = 10'000;

// The lower quartile of `values` (reordered); 0 when empty.
double LowerQuartile(std::vector<double>& values) {
  if (values.empty()) return 0;
  auto q = values.begin() + (values.size() - 1) / 4;
  std::nth_element(values.begin(), q, values.end());
  return *q;
}

}  // namespace

void OwnTimeAnalyzer::Ring::Push(double v, int window) {
  if (static_cast<int>(values.size()) < window) {
    values.push_back(v);
    median = SlideMedian(sorted, nullptr, v);
  } else {
    const double evicted = values[next];
    values[next] = v;
    next = (next + 1) % values.size();
    median = SlideMedian(sorted, &evicted, v);
  }
}

const std::string* OwnTimeAnalyzer::CommState::NodeOf(int rank) const {
  if (complete()) return &nodes[rank];
  auto it = pending.find(rank);
  return it == pending.end() ? nullptr : &it->second.second;
}

void OwnTimeAnalyzer::SetMember(const CommKey& comm, int nranks, int rank,
                                const ProcessKey& process, const std::string& node) {
  if (nranks <= 0 || rank < 0 || rank >= nranks) return;
  auto it = comms_.find(comm);
  if (it != comms_.end() && it->second.nranks != nranks) {
    Forget(comm);  // re-created with another size: start over
    it = comms_.end();
  }
  if (it == comms_.end()) {
    it = comms_.emplace(comm, CommState{}).first;
    it->second.nranks = nranks;
    JobGrowth& growth = job_growth_[comm.job_id];
    growth.comms.insert(comm);
    it->second.growth = &growth;
  }
  CommState& cs = it->second;
  const std::string* known_node = cs.NodeOf(rank);
  if (known_node != nullptr && *known_node != node) {
    Forget(comm);  // a rank moved: what was learnt about its node is void
    SetMember(comm, nranks, rank, process, node);
    return;
  }
  if (cs.complete()) {
    if (cs.processes[rank] != process) {
      ProcessState* held = Hold(process);  // first: the old one may be the same state
      Release(cs.processes[rank], cs.states[rank]);
      cs.processes[rank] = process;
      cs.states[rank] = held;
      for (auto& [k, st] : cs.classes) st.evidence[rank] = nullptr;  // the old process's entry
    }
    cs.nodes[rank] = node;
  } else {
    cs.pending[rank] = {process, node};
    if (static_cast<int>(cs.pending.size()) == nranks) {  // every rank known: go dense
      cs.processes.resize(nranks);
      cs.states.resize(nranks);
      cs.nodes.resize(nranks);
      cs.node_hashes.resize(nranks);
      for (auto& [r, member] : cs.pending) {
        cs.processes[r] = member.first;
        cs.states[r] = Hold(member.first);
        cs.nodes[r] = std::move(member.second);
        cs.node_hashes[r] = absl::HashOf(cs.nodes[r]);
      }
      cs.pending.clear();
    }
  }
  processes_[process].node = node;
}

OwnTimeAnalyzer::ProcessState* OwnTimeAnalyzer::Hold(const ProcessKey& p) {
  ProcessState& ps = processes_[p];
  ++ps.members;
  return &ps;
}

void OwnTimeAnalyzer::Release(const ProcessKey& p, ProcessState* ps) {
  --ps->members;
  if (ps->Unused()) processes_.erase(p);
}

void OwnTimeAnalyzer::Push(ClassState& st, int r, double excess_ns) {
  Ring& ring = st.excess[r];
  const bool was_judged = static_cast<int>(ring.values.size()) >= options_.min_groups;
  const double old_median = ring.median;
  ring.Push(excess_ns, options_.window);
  const bool judged = static_cast<int>(ring.values.size()) >= options_.min_groups;
  if (was_judged && ring.median == old_median) return;  // both orders stay as they are
  Slot& slot = *st.slots[r];
  if (was_judged) {
    if (st.indexed) st.judged.erase(st.judged.find({old_median, r}));
  } else if (judged) {
    --st.unjudged;
    --slot.unjudged;
  }
  if (judged) {
    if (st.indexed) st.judged.insert({ring.median, r});
    slot.judged.Set(st.slot_index[r], true, ring.median);
  }
}

bool OwnTimeAnalyzer::DesignReference(const CommState& cs, const ClassState& st, int r,
                                      double tolerance_ns, double* reference_ns,
                                      bool* counterparts) const {
  const uint64_t node = cs.node_hashes[r];
  const double mine = st.excess[r].median;
  // Counterparts: rank r of the family's other communicators, on another node; the smallest E.
  // While a member of the family is not judged yet, r is not either: the reference would be a
  // guess.
  // (Its own communicator's member is on its node.)
  const Slot& slot = *st.slots[r];
  *counterparts = false;
  if (double e = 0; slot.judged.SmallestElsewhere(node, &e)) {
    if (slot.unjudged > 0) return false;
    *counterparts = true;
    *reference_ns = e;
    return true;
  }
  // No counterparts: the members of this communicator on other nodes. The highest one not
  // clearly above r is what a replica of r shows; if none is, r is not above anybody there.
  if (st.n_nodes <= 1) {
    *reference_ns = 0;  // the whole communicator is on one node: compare within it
    return true;
  }
  if (st.unjudged > 0) return false;
  if (!st.indexed) {
    for (int rank = 0; rank < static_cast<int>(st.excess.size()); ++rank) {
      if (static_cast<int>(st.excess[rank].values.size()) >= options_.min_groups) {
        st.judged.insert({st.excess[rank].median, rank});
      }
    }
    st.indexed = true;
  }
  auto it = st.judged.upper_bound({mine + tolerance_ns, std::numeric_limits<int>::max()});
  while (it != st.judged.begin()) {
    --it;
    if (it->second == r || cs.node_hashes[it->second] == node) continue;
    *reference_ns = std::min(mine, it->first);
    return true;
  }
  *reference_ns = mine;
  return true;
}

bool OwnTimeAnalyzer::Judge(const CommState& cs, const ClassKey& k, const ClassState& st, int r,
                            int64_t now_ns, Evidence* out) const {
  if (static_cast<int>(st.excess[r].values.size()) < options_.min_groups) return false;
  out->own_time_ns = st.base.median;
  out->threshold_ns = std::max(options_.min_excess_ns, options_.relative * st.base.median);
  double reference = 0;
  if (!DesignReference(cs, st, r, out->threshold_ns / 2, &reference, &out->replicas)) {
    return false;
  }
  // Without counterparts an exchange's ends are compared with each other, but whether it has
  // counterparts is known only once every node has reported the class: its replicas start with
  // it, yet their reports reach the aggregator node by node over a flush interval, and before
  // they do, the ends of a pipeline exchange (whose stages do different work before it) would be
  // compared as if they were alike.
  // Until then the comparison is provisional: it tells the exchange hold (ExchangePeerBuilding)
  // that a peer may be on its way to a verdict, but makes no verdict.
  out->provisional =
      k.op == kP2pClass && !out->replicas && now_ns - st.first_ns < st.counterpart_wait_ns;
  out->fault_ns = st.excess[r].median - reference;
  // The job-wide change in time: this class's fastest rank grew beyond what the job's did.
  if (const JobGrowth* job = cs.growth; k.op != kP2pClass && job != nullptr &&
                                        std::isfinite(st.base_past) && std::isfinite(job->ratio) &&
                                        st.base_n >= kSettledGroups) {
    const double grew = st.base_mean - st.base_past * job->ratio;
    if (grew > out->fault_ns) {
      out->fault_ns = grew;
      out->replicas = true;
      out->changed = true;
    }
  }
  // A rank's own past, and the job's growth, are compared in collective classes only: an exchange
  // class mixes the step's phases (dispatch after the TP all-reduce with no own time, combine after
  // the experts), whose window medians jump between them, and a healthy expert-parallel partner
  // of a slow expert GPU "grew" that way.
  const double change = k.op == kP2pClass ? 0
                                          : st.excess[r].median -
                                                st.past[r] * std::max(st.base.median, kMinScaleNs) -
                                                st.peer_growth;
  if (change > out->fault_ns) {
    out->fault_ns = change;
    out->replicas = true;  // its own past is the reference: as strong as counterparts
    out->changed = true;
  }
  // A class that takes turns: only a rank late nearly every time has evidence there.
  if (st.turns && st.share_slow[r] < options_.imbalance_share) out->fault_ns = 0;
  out->nranks = static_cast<int>(cs.processes.size());
  out->multi_node = st.n_nodes > 1;
  return true;
}

std::tuple<bool, bool, bool, bool, int> OwnTimeAnalyzer::Standing(const Evidence& e) const {
  return {e.fault_ns >= e.threshold_ns && !e.provisional,
          e.fault_ns >= options_.clear_ratio * e.threshold_ns && !e.provisional, e.replicas,
          e.multi_node, e.nranks};
}

bool OwnTimeAnalyzer::Verdict(
    const ProcessState& ps,
    const std::pair<const std::tuple<CommKey, ClassKey, int>, Evidence>** best) const {
  // The smallest multi-node communicator whose evidence says "not slow".
  int smallest_fine = std::numeric_limits<int>::max();
  for (const auto& [where, e] : ps.evidence) {
    if (e.multi_node && !e.provisional && e.fault_ns < options_.clear_ratio * e.threshold_ns) {
      smallest_fine = std::min(smallest_fine, e.nranks);
    }
  }
  bool slow = false;
  double margin = std::numeric_limits<double>::lowest();
  for (const auto& entry : ps.evidence) {
    const Evidence& e = entry.second;
    if (e.provisional || (!e.replicas && smallest_fine < e.nranks)) continue;
    const double needed = ps.slow ? options_.clear_ratio * e.threshold_ns : e.threshold_ns;
    slow = slow || e.fault_ns >= needed;
    if (best != nullptr && e.fault_ns - e.threshold_ns > margin) {
      margin = e.fault_ns - e.threshold_ns;
      *best = &entry;
    }
  }
  return slow;
}

SlowProcess OwnTimeAnalyzer::ViewOf(const ProcessKey& p, const ProcessState& ps) const {
  SlowProcess v;
  v.process = p;
  v.node = ps.node;
  v.slow = ps.slow;
  v.since_ns = ps.since_ns;
  const std::pair<const std::tuple<CommKey, ClassKey, int>, Evidence>* best = nullptr;
  Verdict(ps, &best);
  if (best != nullptr) Cite(*best, &v);
  return v;
}

void OwnTimeAnalyzer::Cite(const std::pair<const std::tuple<CommKey, ClassKey, int>, Evidence>& e,
                           SlowProcess* v) const {
  v->comm = std::get<0>(e.first);
  v->op = std::get<1>(e.first).op;
  v->bytes = std::get<1>(e.first).bytes;
  v->rank = std::get<2>(e.first);
  v->excess_ns = e.second.fault_ns;
  v->changed = e.second.changed;
  v->own_time_ns = e.second.own_time_ns;
  auto c = comms_.find(v->comm);
  if (c != comms_.end() && v->rank < static_cast<int>(c->second.nodes.size())) {
    v->node = c->second.nodes[v->rank];
  }
}

std::vector<SlowProcess> OwnTimeAnalyzer::Observe(const OwnTimeGroup& group, CachedSlot* slot) {
  std::vector<SlowProcess> changes;
  CommState* state = nullptr;
  if (slot != nullptr && slot->generation == generation_)
    state = static_cast<CommState*>(slot->comm);
  if (state == nullptr) {
    auto found = comms_.find(group.comm);
    if (found == comms_.end()) return changes;  // members not known yet
    state = &found->second;
    if (slot != nullptr) *slot = CachedSlot{state, nullptr, generation_};
  }
  CommState& cs = *state;
  const bool exchange = !group.members.empty();
  const int n = exchange ? cs.nranks : static_cast<int>(group.own_time_ns.size());
  if (n < 2 || n != cs.nranks || !cs.complete()) return changes;
  if (exchange && (group.members.size() != group.own_time_ns.size() ||
                   std::any_of(group.members.begin(), group.members.end(),
                               [&](int r) { return r < 0 || r >= n; }))) {
    return changes;
  }
  // Index i of own_time_ns is communicator rank RankAt(i).
  auto rank_at = [&](size_t i) { return exchange ? group.members[i] : static_cast<int>(i); };
  int64_t base = std::numeric_limits<int64_t>::max();
  int known = 0;
  for (int64_t t : group.own_time_ns) {
    if (t < 0) continue;
    base = std::min(base, t);
    ++known;
  }
  if (known < 2) return changes;
  // A communicator's exchanges are one class: it is remembered, not looked up in the tree (most
  // groups of a pipelined job are exchanges, a string compared at every level).
  std::pair<const ClassKey, ClassState>* cls = exchange ? cs.exchange_class : nullptr;
  if (cls != nullptr && (cls->first.bytes != group.bytes || cls->first.op != group.op)) {
    cls = nullptr;
  }
  if (cls == nullptr) {
    ClassKey key{std::string(group.op), group.bytes};
    auto found = cs.classes.find(key);
    if (found == cs.classes.end()) {
      if (cs.classes.size() >= options_.max_classes_per_comm) return changes;
      found = cs.classes.emplace(std::move(key), ClassState{}).first;
      const ClassKey& k = found->first;
      ClassState& fresh = found->second;
      fresh.excess.resize(n);
      fresh.past.assign(n, std::numeric_limits<double>::infinity());
      fresh.n_nodes = group.n_nodes;
      fresh.first_ns = group.now_ns;
      fresh.unjudged = n;
      fresh.slots.resize(n);
      fresh.slot_index.resize(n);
      fresh.evidence.assign(n, nullptr);
      fresh.share_fast.assign(n, 0);
      fresh.share_slow.assign(n, 0);
      for (int r = 0; r < n; ++r) {
        Slot& slot = slots_[SlotOf(group.comm, k, n, group.n_nodes, r)];
        fresh.slots[r] = &slot;
        slot.judged.Add(cs.node_hashes[r], &fresh.slot_index[r]);
        ++slot.unjudged;
      }
    }
    cls = &*found;
    if (exchange) cs.exchange_class = cls;
  }
  const ClassKey& k = cls->first;
  ClassState& st = cls->second;
  if (exchange) {  // only exchanges wait for their counterparts (Judge)
    st.counterpart_wait_ns = std::max(
        st.counterpart_wait_ns,
        std::max(kMinCounterpartWaitNs,
                 2 * std::clamp<int64_t>(group.report_interval_ns, 0, kMaxReportIntervalNs)));
  }
  const int64_t per_move = GroupsPerMove(exchange, n);
  if (++st.seen <= options_.warmup_groups * per_move) return changes;
  // The earliest finisher of its own work is the reference: unlike a quantile, the minimum does
  // not move when one member of a small communicator slows down.
  st.base.Push(static_cast<double>(base), options_.window);
  // Clipped at 3x the window median: a job-wide stall (hundreds of milliseconds in the own time
  // of whichever collective follows it) must not move the mean; the two phases of a step (a
  // factor of about 2) must.
  const double clipped =
      std::min(static_cast<double>(base), 3 * std::max(st.base.median, kMinScaleNs));
  st.base_mean = st.base_n == 0
                     ? clipped
                     : st.base_mean + options_.share_alpha_slow * (clipped - st.base_mean);
  if (++st.base_n >= kSettledGroups) st.base_past = std::min(st.base_past, st.base_mean);
  // The job's growth moves with its collectives (exchange classes have none), and is refreshed
  // after as many of them as the job has communicators (kJobGrowthRefresh at least): a refresh
  // reads every class of the job, so each collective pays O(1) for it whatever the job's size
  // (every 256, a 16,384-rank job's refreshes took a fifth of the aggregator's CPU).
  if (JobGrowth* job = cs.growth;
      !exchange && job != nullptr &&
      ++job->since_refresh >=
          std::max<int64_t>(kJobGrowthRefresh, static_cast<int64_t>(job->comms.size()))) {
    RefreshJobGrowth(*job);
  }
  for (size_t i = 0; i < group.own_time_ns.size(); ++i) {
    if (group.own_time_ns[i] >= 0) {
      Push(st, rank_at(i), static_cast<double>(group.own_time_ns[i] - base));
    }
  }
  // Change in time: each judged rank's growth above its own past, and what the ranks' growth is
  // without the few that grew alone (the lower quartile: robust to up to 3/4 of them growing).
  // The past is kept relative to the class's typical smallest own time, so that a job slowing
  // down as a whole (a longer sequence, an evaluation phase) scales its design differences
  // without any of them counting as growth, and so that windows holding other phases of the step
  // (forward, backward) compare alike. Peers are this communicator's ranks: they run the same
  // collectives at the same moments.
  // Who is a threshold above the fastest this time, and whether the class takes turns.
  const double threshold = std::max(options_.min_excess_ns, options_.relative * st.base.median);
  double largest = 0;
  bool busy = false;    // some rank is
  bool turned = false;  // and one busy lately is not
  for (size_t i = 0; i < group.own_time_ns.size(); ++i) {
    if (group.own_time_ns[i] < 0) continue;
    const int r = rank_at(i);
    const double excess = static_cast<double>(group.own_time_ns[i] - base);
    largest = std::max(largest, excess);
    const bool hot = excess >= threshold;
    busy = busy || hot;
    turned = turned || (!hot && st.share_fast[r] >= options_.turns_low);
    const float h = hot ? 1.0f : 0.0f;
    st.share_fast[r] += static_cast<float>(options_.share_alpha_fast) * (h - st.share_fast[r]);
    st.share_slow[r] += static_cast<float>(options_.share_alpha_slow) * (h - st.share_slow[r]);
  }
  st.turn_rate += options_.share_alpha_fast * ((busy && turned ? 1.0 : 0.0) - st.turn_rate);
  st.turns = st.turns || st.turn_rate >= options_.turns_rate;
  st.wait_ns += options_.share_alpha_slow * (largest - st.wait_ns);

  const double scale = std::max(st.base.median, kMinScaleNs);
  for (size_t i = 0; i < group.own_time_ns.size(); ++i) {
    const int r = rank_at(i);
    const Ring& ring = st.excess[r];
    if (static_cast<int>(ring.values.size()) < options_.min_groups) continue;
    st.past[r] = std::min(st.past[r], ring.median / scale);
  }
  if (!exchange || ++st.exchanges_since_growth >= per_move) {
    st.exchanges_since_growth = 0;
    std::vector<double>& growth = growth_;  // its room kept: no allocation per exchange
    growth.clear();
    for (int r = 0; r < n; ++r) {
      const Ring& ring = st.excess[r];
      if (static_cast<int>(ring.values.size()) < options_.min_groups) continue;
      growth.push_back(ring.median - st.past[r] * scale);
    }
    st.peer_growth = LowerQuartile(growth);
  }
  for (size_t i = 0; i < group.own_time_ns.size(); ++i) {
    const int r = rank_at(i);
    Evidence ev;
    if (!Judge(cs, k, st, r, group.now_ns, &ev)) continue;
    ProcessState& ps = *cs.states[r];
    Evidence*& held = st.evidence[r];
    // The verdict reads each piece of evidence only through its standing (Standing): while this
    // one's stays, so does the verdict, and the process's other evidence need not be read again.
    const bool same = held != nullptr && Standing(*held) == Standing(ev);
    if (held == nullptr) held = &ps.evidence[{group.comm, k, r}];
    *held = ev;
    if (same) continue;
    const bool slow = Verdict(ps, nullptr);
    if (slow != ps.slow) {
      ps.slow = slow;
      ps.since_ns = group.now_ns;
      changes.push_back(ViewOf(cs.processes[r], ps));
    }
  }
  return changes;
}

std::vector<SlowProcess> OwnTimeAnalyzer::Slow(const std::string& job_id) const {
  std::vector<SlowProcess> out;
  for (const auto& [p, ps] : processes_) {
    if (ps.slow && (job_id.empty() || p.job_id == job_id)) out.push_back(ViewOf(p, ps));
  }
  return out;
}

bool OwnTimeAnalyzer::ExchangePeerBuilding(const CommKey& comm, int rank) const {
  auto c = comms_.find(comm);
  if (c == comms_.end()) return false;
  for (const auto& [k, st] : c->second.classes) {
    if (k.op != kP2pClass) continue;
    for (int r = 0; r < static_cast<int>(st.evidence.size()); ++r) {
      const Evidence* e = st.evidence[r];
      if (r != rank && e != nullptr && e->fault_ns >= options_.clear_ratio * e->threshold_ns) {
        return true;
      }
    }
  }
  return false;
}

bool OwnTimeAnalyzer::IsSlow(const ProcessKey& p) const {
  auto it = processes_.find(p);
  return it != processes_.end() && it->second.slow;
}

SlowProcess OwnTimeAnalyzer::View(const ProcessKey& p) const {
  auto it = processes_.find(p);
  if (it != processes_.end()) return ViewOf(p, it->second);
  SlowProcess none;
  none.process = p;
  return none;
}

SlowProcess OwnTimeAnalyzer::ViewKeeping(const SlowProcess& kept) const {
  SlowProcess v = View(kept.process);
  auto it = processes_.find(kept.process);
  if (it == processes_.end() || kept.rank < 0) return v;
  auto e = it->second.evidence.find({kept.comm, ClassKey{kept.op, kept.bytes}, kept.rank});
  if (e != it->second.evidence.end() && !e->second.provisional &&
      e->second.fault_ns >= e->second.threshold_ns) {
    Cite(*e, &v);
  }
  return v;
}

void OwnTimeAnalyzer::RefreshJobGrowth(JobGrowth& growth) const {
  growth.since_refresh = 0;
  std::vector<double> ratios;
  for (const CommKey& comm : growth.comms) {
    auto cs = comms_.find(comm);
    if (cs == comms_.end()) continue;
    for (const auto& [k, st] : cs->second.classes) {
      // A class whose fastest rank has next to no own work has no growth to speak of; exchange
      // classes mix the step's phases (Judge).
      if (k.op == kP2pClass || !std::isfinite(st.base_past) || st.base_past < kMinScaleNs) {
        continue;
      }
      ratios.push_back(st.base_mean / st.base_past);
    }
  }
  growth.ratio =
      ratios.size() >= 4 ? LowerQuartile(ratios) : std::numeric_limits<double>::infinity();
}

std::vector<WorkloadImbalance> OwnTimeAnalyzer::Imbalances(const CommKey& comm) const {
  std::vector<WorkloadImbalance> out;
  auto it = comms_.find(comm);
  if (it == comms_.end()) return out;
  for (const auto& [k, st] : it->second.classes) {
    if (st.turns) out.push_back(WorkloadImbalance{comm, k.op, k.bytes, st.wait_ns, st.base.median});
  }
  return out;
}

bool OwnTimeAnalyzer::Imbalanced(const CommKey& comm, const std::string& op) const {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return false;
  // The classes are ordered by operation, then size: only `op`'s are visited.
  const auto& classes = it->second.classes;
  for (auto c = classes.lower_bound(ClassKey{op, 0}); c != classes.end() && c->first.op == op;
       ++c) {
    if (c->second.turns) return true;
  }
  return false;
}

int OwnTimeAnalyzer::ProcessesOnNode(const std::string& job_id, const std::string& node) const {
  int n = 0;
  for (auto it = processes_.lower_bound(ProcessKey{job_id, "", 0, -1});
       it != processes_.end() && it->first.job_id == job_id; ++it) {
    n += it->second.node == node ? 1 : 0;
  }
  return n;
}

std::vector<SlowProcess> OwnTimeAnalyzer::Forget(const CommKey& comm) {
  std::vector<SlowProcess> changes;
  auto it = comms_.find(comm);
  if (it == comms_.end()) return changes;
  CommState& cs = it->second;
  const int nranks = static_cast<int>(cs.processes.size());
  for (const auto& [k, st] : cs.classes) {
    for (int r = 0; r < nranks; ++r) {
      auto slot = slots_.find(SlotOf(comm, k, nranks, st.n_nodes, r));
      if (slot == slots_.end()) continue;
      Slot& held = slot->second;
      if (!held.judged.HasValue(st.slot_index[r])) --held.unjudged;
      held.judged.Remove(st.slot_index[r]);
      if (held.judged.empty()) slots_.erase(slot);
    }
  }
  // Each member's evidence from this communicator goes, and with it perhaps its verdict; its
  // state too once nothing holds it.
  auto judge_without = [&](const ProcessKey& p, ProcessState& ps) {
    std::erase_if(ps.evidence, [&](const auto& entry) { return std::get<0>(entry.first) == comm; });
    if (ps.slow && !Verdict(ps, nullptr)) {
      SlowProcess v = ViewOf(p, ps);
      v.slow = false;
      ps.slow = false;
      changes.push_back(std::move(v));
    }
  };
  for (int r = 0; r < nranks; ++r) {
    judge_without(cs.processes[r], *cs.states[r]);
    Release(cs.processes[r], cs.states[r]);
  }
  for (const auto& [r, member] : cs.pending) {
    auto ps = processes_.find(member.first);
    if (ps == processes_.end()) continue;
    judge_without(ps->first, ps->second);
    if (ps->second.Unused()) processes_.erase(ps);
  }
  if (auto job = job_growth_.find(comm.job_id); job != job_growth_.end()) {
    job->second.comms.erase(comm);
    if (job->second.comms.empty()) job_growth_.erase(job);
  }
  comms_.erase(it);  // last: `comm` may be its key
  ++generation_;
  return changes;
}

}  // namespace ncclwatch::aggregator
