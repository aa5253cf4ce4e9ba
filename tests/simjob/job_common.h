// What simjob's parent and rank processes share: the real-time clock both use to follow the
// virtual schedule (timeline.h), and the communicator names every rank agrees on.
//
// Contract: pure functions of their arguments (NowNs reads CLOCK_REALTIME); thread-safe.
#ifndef NCCLWATCH_TESTS_SIMJOB_JOB_COMMON_H_
#define NCCLWATCH_TESTS_SIMJOB_JOB_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// CLOCK_REALTIME in nanoseconds, the clock the Timeline's virtual times are on.
int64_t NowNs();

// Sleeps until an absolute CLOCK_REALTIME deadline; returns at once, without a system call, if it
// has passed (a proxy thread at 5,000 operations a second is usually late for its next event, and
// each such call cost tens of microseconds of kernel time on a virtual machine).
void SleepUntil(int64_t deadline_ns);

// Seconds (a flag's value) to nanoseconds, rounded to the nearest.
int64_t SecondsToNs(double s);

// printf into a std::string (at most 255 characters).
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// `s` with every occurrence of `from` replaced by `to`.
std::string ReplaceAll(std::string s, const std::string& from, const std::string& to);

// The communicator names (and so hashes) all ranks agree on: "world", "node<n>" (--node-comm) or
// "tp<n>" (3D layout), "dp<i>", "pp<i>", "split<i>".
std::string CommName(CommScope scope, int instance, bool layout_3d);

// The families a job's communicators come from, in creation order: those of the workload, then
// the split halves (created mid-run) if the job splits.
std::vector<CommScope> ScopesOf(const TimelineConfig& config);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_JOB_COMMON_H_
