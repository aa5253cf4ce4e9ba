#include "aggregator/findings/kinds.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

const std::array<FindingKind, 8> kKinds{{
    {Event::STRAGGLER, [](const Event& e) -> const std::string& { return e.straggler().job_id(); },
     [](const Event& e) {
       return absl::StrCat(e.straggler().comm_hash(), "/", e.straggler().rank());
     }},
    {Event::HANG, [](const Event& e) -> const std::string& { return e.hang().job_id(); },
     [](const Event& e) {
       return absl::StrCat(e.hang().comm_hash(), "/", e.hang().op(), "/", e.hang().seq());
     }},
    {Event::RANK_SILENT, [](const Event& e) -> const std::string& { return e.silent().job_id(); },
     [](const Event& e) {
       return absl::StrCat(e.silent().comm_hash(), "/", e.silent().rank().rank());
     }},
    {Event::COMM_DEGRADED,
     [](const Event& e) -> const std::string& { return e.degraded().job_id(); },
     [](const Event& e) { return absl::StrCat(e.degraded().comm_hash()); }},
    {Event::NODE_NETWORK_SUSPECT,
     [](const Event& e) -> const std::string& { return e.suspect().job_id(); },
     [](const Event& e) { return e.suspect().node(); }},
    {Event::NODE_STRAGGLER,
     [](const Event& e) -> const std::string& { return e.node_straggler().job_id(); },
     [](const Event& e) {
       return absl::StrCat(e.node_straggler().comm_hash(), "/", e.node_straggler().node());
     }},
    // One per job.
    {Event::RANKS_UNREPORTED,
     [](const Event& e) -> const std::string& { return e.coverage().job_id(); },
     [](const Event&) { return std::string(); }},
    {Event::NODE_SILENT,
     [](const Event& e) -> const std::string& { return e.node_silent().job_id(); },
     [](const Event& e) { return e.node_silent().node(); }},
}};

}  // namespace

const FindingKind* FindingKindOf(Event::Kind kind) {
  for (const FindingKind& k : kKinds) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

const std::string& EventJobId(const Event& e) {
  if (!e.job_id().empty()) return e.job_id();
  const FindingKind* kind = FindingKindOf(e.kind());
  return kind != nullptr ? kind->detail_job_id(e) : e.job_id();
}

std::string EventIdentity(const Event& e) {
  const FindingKind* kind = FindingKindOf(e.kind());
  return absl::StrCat(static_cast<int>(e.kind()), "/", static_cast<int>(e.phase()), "/",
                      EventJobId(e), "/", kind != nullptr ? kind->subject(e) : std::string());
}

}  // namespace ncclwatch::aggregator
