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
                       std::vector<Event>* events) {
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
  if (ended_.size() > options_.max_ended) {
    auto oldest = std::min_element(ended_.begin(), ended_.end(), [](const auto& a, const auto& b) {
      return a.second.ended_unix_ns() < b.second.ended_unix_ns();
    });
    closed_by_end_.erase(oldest->first);
    ended_.erase(oldest);
  }
}

void JobLifecycle::Resume(const std::string& job_id) {
  ended_.erase(job_id);
  closed_by_end_.erase(job_id);
}

void JobLifecycle::Expire(int64_t now_ns) {
  for (auto it = ended_.begin(); it != ended_.end();) {
    if (now_ns - static_cast<int64_t>(it->second.ended_unix_ns()) <= options_.ended_ttl_ns) {
      ++it;
      continue;
    }
    closed_by_end_.erase(it->first);
    it = ended_.erase(it);
  }
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
