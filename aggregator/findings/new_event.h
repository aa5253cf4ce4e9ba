// A detection event's header (kind, phase, time, job): shared by the findings' .cc files. Internal
// to aggregator/findings.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_NEW_EVENT_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_NEW_EVENT_H_

#include <cstdint>
#include <string>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

inline ncclwatch::v1::Event NewEvent(ncclwatch::v1::Event::Kind kind, bool start, int64_t now_ns,
                                     const std::string& job_id) {
  ncclwatch::v1::Event event;
  event.set_job_id(job_id);
  event.set_kind(kind);
  event.set_phase(start ? ncclwatch::v1::Event::START : ncclwatch::v1::Event::END);
  event.set_time_unix_ns(now_ns);
  return event;
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_NEW_EVENT_H_
