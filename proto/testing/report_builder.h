// Test reports in one expression: who a report is from, with C++20 designated initializers, so
// that a test says only what matters to it.
//
//   RankReport r = ReportFrom({.job_id = "job-7", .comm_hash = 0xfeed, .comm_name = "world",
//                              .rank = 3, .nranks = 8, .n_nodes = 2, .node = "node-a"});
//
// A field left out stays unset in the identity (a proto3 default, or absent where the field has
// presence: node, pod), exactly as a test that never set it. Header-only; tests only.
#ifndef NCCLWATCH_PROTO_TESTING_REPORT_BUILDER_H_
#define NCCLWATCH_PROTO_TESTING_REPORT_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::testing {

// Who a report is from: RankIdentity's fields, in its order.
struct ReportWho {
  std::string job_id;
  std::string host;
  uint32_t pid = 0;
  int cuda_device = 0;
  uint64_t comm_hash = 0;
  std::string comm_name;
  int rank = 0;
  int nranks = 0;
  int n_nodes = 0;
  std::optional<std::string> node;
  std::optional<std::string> pod;
  std::optional<std::string> pod_namespace;
  std::optional<std::string> container;
};

inline void SetIdentity(const ReportWho& who, ncclwatch::v1::RankIdentity* id) {
  id->set_job_id(who.job_id);
  id->set_host(who.host);
  id->set_pid(who.pid);
  id->set_cuda_device(who.cuda_device);
  id->set_comm_hash(who.comm_hash);
  id->set_comm_name(who.comm_name);
  id->set_rank(who.rank);
  id->set_nranks(who.nranks);
  id->set_n_nodes(who.n_nodes);
  if (who.node) id->set_node(*who.node);
  if (who.pod) id->set_pod(*who.pod);
  if (who.pod_namespace) id->set_pod_namespace(*who.pod_namespace);
  if (who.container) id->set_container(*who.container);
}

// A report from `who`, nothing else set.
inline ncclwatch::v1::RankReport ReportFrom(const ReportWho& who) {
  ncclwatch::v1::RankReport r;
  SetIdentity(who, r.mutable_identity());
  return r;
}

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_PROTO_TESTING_REPORT_BUILDER_H_
