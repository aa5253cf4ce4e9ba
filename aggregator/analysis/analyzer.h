// The aggregator's live view of every job, its write side: feeds each validated report to the
// detectors (through the communicator registry), turns what they find into findings, and gives
// every exported series' current value. What the Query API answers (flagged now, communicators,
// jobs) is its read side, Answers (answers.h), on the same state.
//
// Rooms (docs/architecture.md): who is who and the caps in CommRegistry, the per-report series in
// SeriesTable, the detection logic in aggregator/detect (plain structs), event text and query
// answers in aggregator/findings. The Analyzer only wires them together under one lock.
//
// Thread safety: all public methods may be called concurrently; one mutex serialises them (the
// work per report is small and bounded).
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "aggregator/analysis/detection_series.h"
#include "aggregator/analysis/job_lifecycle.h"
#include "aggregator/analysis/registry.h"
#include "aggregator/analysis/series_table.h"
#include "aggregator/detect/detectors.h"
#include "aggregator/findings/findings.h"
#include "aggregator/rootcause/hang_origin.h"
#include "aggregator/rootcause/own_time.h"
#include "aggregator/rootcause/process_index.h"
#include "aggregator/rootcause/unexplained.h"
#include "aggregator/rootcause/verdicts.h"
#include "common/series.h"
#include "common/sync.h"
#include "ncclwatch/v1/query.pb.h"
#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::aggregator {

class Answers;

// The detectors' options (detectors.h: `straggler`, `hang`, ...), and the analyzer's own.
struct AnalyzerOptions : DetectorOptions {
  OwnTimeOptions own_time;
  RootCauseOptions root_cause;
  UnexplainedOptions unexplained;
  int64_t series_ttl_ns = 600'000'000'000;  // forget a rank's series after 10 min of silence
  // Cardinality caps: a report of a job (or communicator) beyond them is not analysed, and a
  // series beyond them is not exported; each is counted. They bound memory whatever the input.
  size_t max_jobs = 4096;
  size_t max_comms_per_job = 16384;
  size_t max_series = 2'000'000;
  // What one source's per-report series may hold (labels and bookkeeping): a flood of invented
  // series from one agent fills its own budget, not the aggregator.
  size_t max_series_bytes_per_agent = size_t{64} << 20;
  // Whether Ingest returns the points of every rank's per-report series (Ingested::points) for
  // the store's history; the detection series are stored either way (Ingest::Tick).
  bool report_points = false;
  // A job none of whose ranks reported for this long has ended (job_lifecycle.h).
  int64_t job_end_silence_ns = 120'000'000'000;
  // Per source (the agent, as authenticated): the jobs and communicators it may introduce.
  size_t max_jobs_per_agent = 256;
  size_t max_comms_per_agent = 4096;
};

// What one report caused: the detection events (e.g. a rank flagged as a straggler) and the
// series points it set (what the store keeps).
struct Ingested {
  std::vector<ncclwatch::v1::Event> events;
  std::vector<SeriesPoint> points;
};

class Analyzer {
 public:
  explicit Analyzer(AnalyzerOptions options = {});

  // Takes one validated report received at `now_ns` (aggregator clock) from `source` (who sent it,
  // as the aggregator authenticated it; the per-agent caps count by it).
  Ingested Ingest(const ncclwatch::v1::RankReport& report, int64_t now_ns,
                  const std::string& source = "") ABSL_LOCKS_EXCLUDED(mu_);
  // Re-evaluates hangs and silent ranks, expires incomplete collective groups and forgotten
  // series and communicators. Returns the detection events it caused. Call about four times a
  // second.
  std::vector<ncclwatch::v1::Event> Tick(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_);
  // The aggregator (re)starts listening at `now_ns`, after its replay or after its store failed
  // pushes for a while (a full disk): ranks and jobs last heard before it are not silent until its
  // agents had time to reconnect and retry; those heard since are judged as always.
  void StartListening(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_);

  // Every exported series, current values; with `detection_only`, just the ncclwatch_* families
  // computed from the detectors (not the per-report statistics). The per-report statistics are
  // copied a part at a time, ingest going on in between.
  std::vector<SeriesPoint> Series(bool detection_only = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // Tests: called between two parts of Series' copy, without the lock.
  void SetBetweenSeriesCopiesForTest(std::function<void()> fn) {
    between_series_copies_ = std::move(fn);
  }
  // The read side: what the Query API answers from this analyzer's state (answers.h).
  Answers answers() const;

  struct Counters {
    uint64_t reports = 0;
    uint64_t groups_completed = 0;
    uint64_t groups_expired = 0;
    uint64_t records_refused = 0;  // not joined: beyond Correlator::kMaxOpsPerComm names
    uint64_t open_groups = 0;
    uint64_t capped_jobs = 0;          // reports not analysed: their job is beyond max_jobs
    uint64_t capped_comms = 0;         // ... their communicator is beyond max_comms_per_job
    uint64_t capped_series = 0;        // series updates refused: beyond max_series
    uint64_t capped_agent_jobs = 0;    // reports not analysed: beyond max_jobs_per_agent
    uint64_t capped_agent_comms = 0;   // ... beyond max_comms_per_agent
    uint64_t capped_agent_series = 0;  // new series refused: beyond max_series_bytes_per_agent
  };
  Counters counters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class Answers;  // the read side, on the same state under mu_

  // Keeps the entry's flagged-since times for the lateness detector's `changes`; where they page
  // (a communicator without own times), their STRAGGLER events and node verdicts.
  void LatenessChangesLocked(const CommKey& key, CommEntry& entry,
                             const std::vector<FlagChange>& changes, int64_t now_ns,
                             std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The events of root-cause verdict changes, consequences attached.
  void VerdictEventsLocked(const VerdictChanges& changes, int64_t now_ns,
                           std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The hang findings' changes now: one per origin.
  void HangEventsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RANK_SILENT, once per process: its first silent communicator rank starts the finding, its
  // last one back ends it.
  void SilentEventLocked(const HangChange& change, int64_t now_ns,
                         std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The coverage finding's changes now (communicators some of whose ranks never reported).
  void CoverageEventsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RootCauseVerdicts::GpusOnNode GpusOnNodeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lateness no root cause explains (rootcause/unexplained.h): ends the pages whose lateness
  // cleared, then pages the late ranks and nodes of jobs whose root-cause analysis names nobody.
  void UnexplainedLatenessLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the open origin-not-found pages of `job_id`, with `reason` when not empty.
  void EndUnexplainedLocked(const std::string& job_id, const std::string& reason, int64_t now_ns,
                            std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the root-cause analysis names a GPU or node of `job_id`, or a hang of it has an origin.
  bool JobHasRootCauseLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The flagged ranks of `comm` in the classes whose lateness may page as origin-not-found: not
  // point-to-point exchanges, not classes imbalanced by their data (analyzer_unexplained.cc).
  std::vector<RankScore> PageableLatenessLocked(const CommKey& comm) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether GPU `p`, not late itself in the exchanges of some communicator, has a peer there whose
  // own time there is on its way to a verdict, or who is flagged late beyond its family: it likely
  // waited for that peer (UnexplainedOptions::exchange_hold_ns).
  bool WaitedInExchangeLocked(const ProcessKey& p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a communicator everywhere (registry expiry, or re-created under the same hash).
  void ForgetLocked(const CommKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job_id` ended at `now_ns` because of `why`: its open findings end, it is forgotten.
  void EndJobLocked(const std::string& job_id, const std::string& why, int64_t now_ns,
                    std::vector<ncclwatch::v1::Event>* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the jobs every rank of which has been silent for job_end_silence_ns.
  void EndSilentJobsLocked(int64_t now_ns, std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What both sides need, with the lock held.
  // The late ranks of `job_id` (every job if empty) that are not slow themselves, by the
  // reported GPU they are attached to: one with a rank in the same communicator, else one
  // sharing any communicator with the late rank's process, else the job's first.
  std::map<ProcessKey, std::vector<ncclwatch::v1::StragglerInfo>> ConsequencesLocked(
      const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ncclwatch::v1::HangInfo> HangInfosLocked(const std::vector<HangView>& hangs,
                                                       int64_t now_ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A reported GPU with a rank in `comm`, or nullptr.
  const ProcessKey* ReportedInLocked(const CommKey& comm) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running jobs (`job_id` empty: all), as Answers::Jobs lists them.
  std::map<std::string, ncclwatch::v1::JobInfo> JobInfosLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The communicator's findings now, counted.
  CommHealth HealthLocked(const CommKey& key, const CommEntry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::CommInfo CommInfoLocked(const CommKey& key, const CommEntry& entry,
                                         CommHealth* health) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node-level verdicts after the rank flags of `key` changed.
  void JudgeNodesLocked(const CommKey& key, const CommEntry& entry, int64_t now_ns,
                        std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable ncclwatch::Mutex mu_;
  CommRegistry registry_ ABSL_GUARDED_BY(mu_);
  SeriesTable series_ ABSL_GUARDED_BY(mu_);
  std::function<void()> between_series_copies_;  // SetBetweenSeriesCopiesForTest
  Detectors detectors_ ABSL_GUARDED_BY(mu_);
  ProcessIndex processes_ ABSL_GUARDED_BY(mu_);  // the process behind each communicator rank
  // Ingest's view of the report at hand, kept so that its vectors' room serves every report. Its
  // string views point into that report: read within the Ingest call that filled it, never after.
  RankInterval interval_ ABSL_GUARDED_BY(mu_);
  OwnTimeAnalyzer own_time_ ABSL_GUARDED_BY(mu_);
  RootCauseVerdicts verdicts_ ABSL_GUARDED_BY(mu_);  // what of own_time_'s verdicts pages
  HangOrigins hang_origins_ ABSL_GUARDED_BY(mu_);    // what of the hangs pages
  JobLifecycle lifecycle_ ABSL_GUARDED_BY(mu_);      // open findings, ended jobs
  const UnexplainedOptions unexplained_options_;
  CommFamilies families_ ABSL_GUARDED_BY(mu_);  // like communicators of each job
  // Communicators with ranks flagged late in a collective class (not in their exchanges).
  std::set<CommKey> late_comms_ ABSL_GUARDED_BY(mu_);
  // What the origin-not-found pass found in a communicator of late_comms_ (its ranks late beyond
  // their family, not yet judged against what pages), as of the stamps it read: kept while
  // neither the communicator (CommEntry::stamp) nor its family changed. Most ticks of a large
  // healthy job, most of its thousands of communicators late by design have had no collective.
  struct LateWalk {
    uint64_t comm_stamp = 0;
    uint64_t family_stamp = 0;
    std::vector<RankScore> beyond;
  };
  absl::flat_hash_map<CommKey, LateWalk> late_walks_ ABSL_GUARDED_BY(mu_);
  uint64_t stamps_ ABSL_GUARDED_BY(mu_) = 0;  // the last CommEntry::stamp handed out
  // The last change of any family's members: it ends every kept answer (rare: a communicator new,
  // re-created or forgotten).
  uint64_t families_stamp_ ABSL_GUARDED_BY(mu_) = 0;
  // Late ranks beyond their family, as of the last Tick: since when.
  std::map<std::pair<CommKey, int>, int64_t> beyond_since_ ABSL_GUARDED_BY(mu_);
  // An open origin-not-found page (rootcause/unexplained.h): its START and the late communicator
  // ranks it stands for (it ends when one of them clears).
  struct UnexplainedPage {
    ncclwatch::v1::Event start;
    std::vector<std::pair<CommKey, int>> members;
  };
  std::map<std::string, std::vector<UnexplainedPage>> unexplained_ ABSL_GUARDED_BY(mu_);  // by job
  // What of them the detection series export.
  UnexplainedView UnexplainedViewLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const int64_t job_end_silence_ns_;
  const bool report_points_;
  int64_t listening_ns_ ABSL_GUARDED_BY(mu_) = 0;  // StartListening()
  int64_t heard_from_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Silent processes -> their communicators flagged silent (one RANK_SILENT per process).
  std::map<ProcessKey, std::set<CommKey>> silent_processes_ ABSL_GUARDED_BY(mu_);
  uint64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t clock_ns_ ABSL_GUARDED_BY(mu_) = 0;  // the latest now of Ingest or Tick
  // Tick's expiry walks: once a second, or a sixtieth of the communicators' TTL when that is less.
  const int64_t expiry_every_ns_;
  int64_t last_expiry_ns_ ABSL_GUARDED_BY(mu_) = INT64_MIN / 2;  // Tick's expiry walks
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_ANALYZER_H_
