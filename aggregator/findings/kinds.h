// Every kind of finding, registered once: the job and the subject each kind's event is about.
// Identity (what makes two events the same finding) and job filters read this table, never a
// switch of their own; a new kind adds its row in kinds.cc.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_KINDS_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_KINDS_H_

#include <string>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

struct FindingKind {
  ncclwatch::v1::Event::Kind kind;
  // The job id in the kind's detail message: where an event stored before `Event.job_id` existed
  // (or sent by such an aggregator) says which job it is about.
  const std::string& (*detail_job_id)(const ncclwatch::v1::Event&);
  // What the finding is about within its job, without its figures (a communicator and rank, a
  // node, an operation; "" for one finding per job).
  std::string (*subject)(const ncclwatch::v1::Event&);
};

// The kind's row, or nullptr for a kind this build does not know (a newer aggregator's).
const FindingKind* FindingKindOf(ncclwatch::v1::Event::Kind kind);

// The job a detection event is about, whatever its kind ("" if it names none).
const std::string& EventJobId(const ncclwatch::v1::Event& event);

// What an event is about, without its figures (kind, phase, job, subject): the same finding
// derived twice (e.g. by replay after a restart) has the same identity.
std::string EventIdentity(const ncclwatch::v1::Event& event);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_KINDS_H_
