#include "aggregator/analysis/job_lifecycle.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "aggregator/findings/findings.h"

namespace ncclwatch::aggregator {

using ncclwatch::v1::Event;

std::string JobLifecycle::FindingOf(const Event& event) {
  Event start = event;
  start.set_phase(Event::START);
  return EventIdentity(start);
}

void JobLifecycle::Filter(std::vector<Event>* events) {
  auto kept = events->begin();
  for (auto& event : *events) {
    const std::string finding = FindingOf(event);
    if (event.phase() == Event::START) {
      open_.insert_or_assign(finding, event);
    } else if (event.phase() == Event::END) {
      auto closed = closed_by_end_.find(EventJobId(event));
      if (closed != closed_by_end_.end() && closed->second.count(finding) > 0) {
        continue;  // ended with its job already
      }
      open_.erase(finding);
      if (event.end_reason().empty()) event.set_end_reason(kEndFaultCleared);
    }
    if (&*kept != &event) *kept = std::move(event);
    ++kept;
  }
  events->erase(kept, events->end());
}

void JobLifecycle::End(const ncclwatch::v1::JobInfo& last, const std::string& why, int64_t now_ns,
                       std::vector<Event>* events, std::vector<ncclwatch::v1::CommInfo> comms) {
  const std::string& job = last.job_id();
  std::set<std::string>& closed = closed_by_end_[job];
  for (auto it = open_.begin(); it != open_.end();) {
    if (EventJobId(it->second) != job) {
      ++it;
      continue;
    }
    Event end = std::move(it->second);
    end.set_phase(Event::END);
    end.set_time_unix_ns(now_ns);
    end.set_end_reason(kEndJobEnded);
    end.set_summary(absl::StrCat("job ", job, " ended (", why, "): ", end.summary()));
    closed.insert(it->first);
    events->push_back(std::move(end));
    it = open_.erase(it);
  }
  ncclwatch::v1::JobInfo& info = ended_[job];
  info = last;
  info.set_state("ended");
  info.set_ended_unix_ns(now_ns);
  info.set_end_reason(why);
  for (auto& c : comms) {
    c.set_health(c.health().empty() || c.health() == "ok"
                     ? "ended"
                     : absl::StrCat("ended, was ", c.health()));
  }
  std::vector<ncclwatch::v1::CommInfo>& kept = ended_comms_[job];
  ended_comms_count_ = ended_comms_count_ - kept.size() + comms.size();
  kept = std::move(comms);
  while (ended_comms_count_ > options_.max_ended_comms) {
    std::string oldest;
    uint64_t oldest_ns = UINT64_MAX;
    for (const auto& [id, job_comms] : ended_comms_) {
      const uint64_t ended_ns = ended_.at(id).ended_unix_ns();
      if (!job_comms.empty() && ended_ns < oldest_ns) {
        oldest = id;
        oldest_ns = ended_ns;
      }
    }
    ended_comms_count_ -= ended_comms_[oldest].size();
    ended_comms_.erase(oldest);  // the newest job alone beyond the bound: not kept either
  }
  if (ended_.size() > options_.max_ended) {
    auto oldest = std::min_element(ended_.begin(), ended_.end(), [](const auto& a, const auto& b) {
      return a.second.ended_unix_ns() < b.second.ended_unix_ns();
    });
    Forget(oldest->first);
  }
}

void JobLifecycle::Forget(const std::string& job_id) {
  closed_by_end_.erase(job_id);
  if (auto it = ended_comms_.find(job_id); it != ended_comms_.end()) {
    ended_comms_count_ -= it->second.size();
    ended_comms_.erase(it);
  }
  ended_.erase(job_id);
}

void JobLifecycle::Resume(const std::string& job_id) { Forget(job_id); }

void JobLifecycle::Expire(int64_t now_ns) {
  std::vector<std::string> expired;
  for (const auto& [job, info] : ended_) {
    if (now_ns - static_cast<int64_t>(info.ended_unix_ns()) > options_.ended_ttl_ns) {
      expired.push_back(job);
    }
  }
  for (const std::string& job : expired) Forget(job);
}

const std::vector<ncclwatch::v1::CommInfo>& JobLifecycle::EndedComms(
    const std::string& job_id) const {
  static const std::vector<ncclwatch::v1::CommInfo> kNone;
  auto it = ended_comms_.find(job_id);
  return it == ended_comms_.end() ? kNone : it->second;
}

std::vector<ncclwatch::v1::Event> JobLifecycle::Open(ncclwatch::v1::Event::Kind kind,
                                                     const std::string& job_id) const {
  std::vector<ncclwatch::v1::Event> out;
  for (const auto& [finding, start] : open_) {
    if (start.kind() == kind && (job_id.empty() || EventJobId(start) == job_id)) {
      out.push_back(start);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.time_unix_ns() < b.time_unix_ns();
  });
  return out;
}

}  // namespace ncclwatch::aggregator
