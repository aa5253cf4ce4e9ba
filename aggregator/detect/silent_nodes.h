// Nodes that stopped reporting as a whole: every process (GPU) seen on the node is silent, while
// processes of the same job on other nodes carry on. One rank going quiet is RANK_SILENT (its
// process died or is stuck outside NCCL); a whole node going quiet is the node itself (down,
// rebooting, cut off from the aggregator) or its ncclwatch agent, which on-call checks first.
//
// Fed by the analyzer: which node and process each communicator rank is (as ranks first report),
// and the hang detector's silent flags, per communicator rank. A process is silent while any of
// its communicator ranks is (a communicator wholly on the dead node has no peer left to be silent
// against); a node needs `min_processes` seen processes to be judged, since with one the rank
// finding says it all. Only changes do work: nothing is walked per report or per tick.
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_SILENT_NODES_H_
#define NCCLWATCH_AGGREGATOR_DETECT_SILENT_NODES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct SilentNodeOptions {
  int min_processes = 2;  // a node with fewer seen processes is never judged
};

struct SilentNodeView {
  std::string job_id;
  std::string node;
  int processes = 0;     // seen on the node, all silent
  int64_t since_ns = 0;  // when its last process went silent
};

struct SilentNodeChange {
  bool start = true;
  SilentNodeView node;
};

class SilentNodeDetector {
 public:
  explicit SilentNodeDetector(SilentNodeOptions options = {}) : options_(options) {}

  // Rank `rank` of `comm` is process `process` on `node` (a later call for the same rank moves
  // it), as of `now_ns`. `process` is any name unique within the job (host, pid, GPU); a rank on
  // node "" is not counted. Returns the silent node it brings back, if any (a process seen anew
  // there reports).
  std::vector<SilentNodeChange> Member(const CommKey& comm, int rank, const std::string& node,
                                       const std::string& process, int64_t now_ns);
  // The hang detector's silent flag of a communicator rank changed at `now_ns`. Returns the nodes
  // that went silent (every process of theirs now silent, the job's others not) or came back.
  std::vector<SilentNodeChange> SetSilent(const CommKey& comm, int rank, bool silent,
                                          int64_t now_ns);
  // Forgets the communicator's ranks (expired, its job ended, re-created under the same hash)
  // without reporting an end: a process none of whose ranks is left is no longer seen.
  void Forget(const CommKey& comm);

  // The nodes silent now, by job and node.
  std::vector<SilentNodeView> Silent() const;
  bool IsSilent(const std::string& job_id, const std::string& node) const;

 private:
  struct Process {
    std::string name;
    std::string node;
    int ranks = 0;         // communicator ranks it has
    int silent_ranks = 0;  // of which silent
  };
  struct Node {
    int processes = 0;
    int silent = 0;  // processes with a silent rank
    bool flagged = false;
    int64_t since_ns = 0;
  };
  struct Job {
    std::map<std::string, Process> processes;  // by name; node-based: Rank points into it
    std::map<std::string, Node> nodes;
    int silent_processes = 0;
  };
  struct Rank {
    Process* process = nullptr;
    bool silent = false;
  };

  // Adds `ranks` communicator ranks, `silent` of them silent (each 1 or -1 or 0), to process
  // `name` of `job`, keeping its node's and the job's counts; forgets the process once it has no
  // rank left. Returns the process, or nullptr once forgotten.
  Process* Add(Job& job, const std::string& name, const std::string& node, int ranks, int silent);
  // Forgets the job once it has neither a process nor a flagged node.
  void DropIfEmpty(const std::string& job_id);
  // Judges `node` of `job` after its counts changed: the change, if any, goes to `changes`
  // (nullptr: dropped without a word, as Forget does).
  void Judge(const std::string& job_id, Job& job, const std::string& node, int64_t now_ns,
             std::vector<SilentNodeChange>* changes);

  SilentNodeOptions options_;
  absl::node_hash_map<std::string, Job> jobs_;
  absl::node_hash_map<CommKey, absl::flat_hash_map<int, Rank>> ranks_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_SILENT_NODES_H_
