// The detection suite's scenarios (detection_suite_test.cc runs them): simulated jobs, each with
// the findings it must produce and nothing else.
#ifndef NCCLWATCH_TESTS_E2E_DETECTION_SCENARIOS_H_
#define NCCLWATCH_TESTS_E2E_DETECTION_SCENARIOS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::testing {

struct Job {
  std::string id;
  std::vector<std::string> args;  // simjob flags beyond plugin, agents, job id and flush interval
  int64_t min_steps = 0;          // collectives/p2p steps every rank must have run
};

// A finding the scenario must produce: kind, job and subject as Subject() renders them, and when
// the fault first takes effect, in seconds after the job's t0 (for a gradual fault, the moment it
// first may be found: reported earlier is a failure). `goal_s`: the latency goal the table reports
// against (a gradual fault has a longer one).
struct Expected {
  ncclwatch::v1::Event::Kind kind;
  std::string job;
  std::string subject;
  double effect_s;
  double goal_s = 3.0;
};

struct Scenario {
  std::string name;
  int nodes;  // the pipeline's agents (sim-node-0 ...); a job may span more nodes than have one
  std::vector<Job> jobs;
  std::vector<Expected> expected;
};

// gtest prints a failing parameter with this instead of its bytes.
inline void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

// Every scenario: the original ones (world and 3D layouts) and the Megatron-style ones.
std::vector<Scenario> Scenarios();

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_E2E_DETECTION_SCENARIOS_H_
