#include "aggregator/rootcause/own_time.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace ncclwatch::aggregator {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

}  // namespace

void OwnTimeAnalyzer::Ring::Push(double v, int window) {
  if (static_cast<int>(values.size()) < window) {
    values.push_back(v);
  } else {
    values[next] = v;
    next = (next + 1) % values.size();
  }
  median = Median(values);
}

void OwnTimeAnalyzer::SetMember(const CommKey& comm, int nranks, int rank,
                                const ProcessKey& process, const std::string& node) {
  if (nranks <= 0 || rank < 0 || rank >= nranks) return;
  CommState& cs = comms_[comm];
  if (static_cast<int>(cs.processes.size()) != nranks) {
    if (!cs.classes.empty()) Forget(comm);  // re-created with another size: start over
    CommState& fresh = comms_[comm];
    fresh.processes.assign(nranks, ProcessKey{});
    fresh.nodes.assign(nranks, "");
    fresh.known.assign(nranks, false);
    fresh.unknown = nranks;
  }
  CommState& c = comms_[comm];
  if (!c.known[rank]) {
    c.known[rank] = true;
    --c.unknown;
  }
  c.processes[rank] = process;
  c.nodes[rank] = node;
  processes_[process].node = node;
}

bool OwnTimeAnalyzer::DesignReference(const CommKey& comm, const CommState& cs, const ClassKey& k,
                                      const ClassState& st, int r, double tolerance_ns,
                                      double* reference_ns, bool* counterparts) const {
  const std::string& node = cs.nodes[r];
  // Counterparts: rank r of the family's other communicators, on another node. While one of them
  // has too few collectives yet, r is not judged: the design reference would be a guess.
  const FamilyKey fk{comm.job_id, k.op, k.bytes, static_cast<int>(cs.processes.size()), st.n_nodes};
  bool any = false;
  double lowest = std::numeric_limits<double>::max();
  if (auto fam = families_.find(fk); fam != families_.end()) {
    for (const CommKey& other : fam->second) {
      if (other == comm) continue;
      auto oc = comms_.find(other);
      if (oc == comms_.end() || oc->second.nodes.size() != cs.nodes.size()) continue;
      if (oc->second.nodes[r] == node) continue;
      auto ok = oc->second.classes.find(k);
      if (ok == oc->second.classes.end()) continue;
      const Ring& ring = ok->second.excess[r];
      if (static_cast<int>(ring.values.size()) < options_.min_groups) return false;
      lowest = std::min(lowest, ring.median);
      any = true;
    }
  }
  *counterparts = any;
  if (any) {
    *reference_ns = lowest;
    return true;
  }
  // No counterparts: the members of this communicator on other nodes. The highest one not
  // clearly above r is what a replica of r shows; if none is, r is not above anybody there.
  const double mine = st.excess[r].median;
  bool other_node = false;
  double reference = std::numeric_limits<double>::lowest();
  for (size_t q = 0; q < cs.nodes.size(); ++q) {
    if (static_cast<int>(q) == r || cs.nodes[q] == node) continue;
    const Ring& ring = st.excess[q];
    if (static_cast<int>(ring.values.size()) < options_.min_groups) return false;
    other_node = true;
    if (ring.median <= mine + tolerance_ns) reference = std::max(reference, ring.median);
  }
  if (!other_node) {
    *reference_ns = 0;  // the whole communicator is on one node: compare within it
  } else if (reference == std::numeric_limits<double>::lowest()) {
    *reference_ns = mine;
  } else {
    *reference_ns = std::min(mine, reference);
  }
  return true;
}

bool OwnTimeAnalyzer::Judge(const CommKey& comm, const CommState& cs, const ClassKey& k,
                            const ClassState& st, int r, Evidence* out) const {
  if (static_cast<int>(st.excess[r].values.size()) < options_.min_groups) return false;
  out->own_time_ns = st.base.median;
  out->threshold_ns = std::max(options_.min_excess_ns, options_.relative * st.base.median);
  double reference = 0;
  if (!DesignReference(comm, cs, k, st, r, out->threshold_ns / 2, &reference, &out->replicas)) {
    return false;
  }
  out->fault_ns = st.excess[r].median - reference;
  out->nranks = static_cast<int>(cs.processes.size());
  out->multi_node = st.n_nodes > 1;
  return true;
}

bool OwnTimeAnalyzer::Counts(const ProcessState& ps, const Evidence& e) const {
  if (e.replicas) return true;
  for (const auto& [where, other] : ps.evidence) {
    if (other.multi_node && other.nranks < e.nranks &&
        other.fault_ns < options_.clear_ratio * other.threshold_ns) {
      return false;
    }
  }
  return true;
}

bool OwnTimeAnalyzer::Verdict(const ProcessState& ps) const {
  for (const auto& [where, e] : ps.evidence) {
    const double needed = ps.slow ? options_.clear_ratio * e.threshold_ns : e.threshold_ns;
    if (e.fault_ns >= needed && Counts(ps, e)) return true;
  }
  return false;
}

SlowProcess OwnTimeAnalyzer::ViewOf(const ProcessKey& p, const ProcessState& ps) const {
  SlowProcess v;
  v.process = p;
  v.node = ps.node;
  v.slow = ps.slow;
  double best = std::numeric_limits<double>::lowest();
  for (const auto& [where, ev] : ps.evidence) {
    if (!Counts(ps, ev) || ev.fault_ns - ev.threshold_ns <= best) continue;
    best = ev.fault_ns - ev.threshold_ns;
    v.comm = std::get<0>(where);
    v.op = std::get<1>(where).op;
    v.bytes = std::get<1>(where).bytes;
    v.rank = std::get<2>(where);
    v.excess_ns = ev.fault_ns;
    v.own_time_ns = ev.own_time_ns;
  }
  return v;
}

std::vector<SlowProcess> OwnTimeAnalyzer::Observe(const OwnTimeGroup& group) {
  std::vector<SlowProcess> changes;
  auto it = comms_.find(group.comm);
  if (it == comms_.end()) return changes;  // members not known yet
  CommState& cs = it->second;
  const int n = static_cast<int>(group.own_time_ns.size());
  if (n < 2 || n != static_cast<int>(cs.processes.size()) || cs.unknown > 0) return changes;
  std::vector<double> known;
  for (int64_t t : group.own_time_ns) {
    if (t >= 0) known.push_back(static_cast<double>(t));
  }
  if (known.size() < 2) return changes;
  const ClassKey k{group.op, group.bytes};
  auto cls = cs.classes.find(k);
  if (cls == cs.classes.end()) {
    if (cs.classes.size() >= options_.max_classes_per_comm) return changes;
    cls = cs.classes.emplace(k, ClassState{}).first;
    cls->second.excess.resize(n);
    cls->second.n_nodes = group.n_nodes;
    families_[FamilyKey{group.comm.job_id, k.op, k.bytes, n, group.n_nodes}].insert(group.comm);
  }
  ClassState& st = cls->second;
  // The earliest finisher of its own work: a reference that a slow member cannot move, whereas a
  // quantile shifts when one member of a small communicator slows down.
  const double base = *std::min_element(known.begin(), known.end());
  st.base.Push(base, options_.window);
  for (int r = 0; r < n; ++r) {
    if (group.own_time_ns[r] >= 0) {
      st.excess[r].Push(static_cast<double>(group.own_time_ns[r]) - base, options_.window);
    }
  }
  for (int r = 0; r < n; ++r) {
    Evidence ev;
    if (!Judge(group.comm, cs, k, st, r, &ev)) continue;
    ProcessState& ps = processes_[cs.processes[r]];
    ps.evidence[{group.comm, k, r}] = ev;
    const bool slow = Verdict(ps);
    if (slow != ps.slow) {
      ps.slow = slow;
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

bool OwnTimeAnalyzer::IsSlow(const ProcessKey& p) const {
  auto it = processes_.find(p);
  return it != processes_.end() && it->second.slow;
}

std::vector<SlowProcess> OwnTimeAnalyzer::Forget(const CommKey& comm) {
  std::vector<SlowProcess> changes;
  auto it = comms_.find(comm);
  if (it == comms_.end()) return changes;
  for (const auto& [k, st] : it->second.classes) {
    const FamilyKey fk{comm.job_id, k.op, k.bytes, static_cast<int>(it->second.processes.size()),
                       st.n_nodes};
    auto fam = families_.find(fk);
    if (fam != families_.end()) {
      fam->second.erase(comm);
      if (fam->second.empty()) families_.erase(fam);
    }
  }
  for (const ProcessKey& p : it->second.processes) {
    auto ps = processes_.find(p);
    if (ps == processes_.end()) continue;
    std::erase_if(ps->second.evidence,
                  [&](const auto& entry) { return std::get<0>(entry.first) == comm; });
    if (ps->second.slow && !Verdict(ps->second)) {
      SlowProcess v = ViewOf(p, ps->second);
      v.slow = false;
      ps->second.slow = false;
      changes.push_back(std::move(v));
    }
    if (ps->second.evidence.empty()) processes_.erase(ps);
  }
  comms_.erase(it);
  return changes;
}

}  // namespace ncclwatch::aggregator
