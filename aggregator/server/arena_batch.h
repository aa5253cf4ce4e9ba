// One pushed batch, parsed onto a protobuf arena of its own: a batch's hundreds of strings and
// repeated fields come from a few blocks and go with them, rather than each from the heap and
// back. The Ingest service parses every push into one (services.cc) and it lives until its
// analysis lets go of it (Ingest::PushAsync); tests/bench/analysis_bench parses the same way, so
// that the analysis it times reads reports laid out as the aggregator's are.
//
// Not thread-safe to parse into; read-only use from any thread once parsed.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_ARENA_BATCH_H_
#define NCCLWATCH_AGGREGATOR_SERVER_ARENA_BATCH_H_

#include "google/protobuf/arena.h"
#include "ncclwatch/v1/ingest.pb.h"

namespace ncclwatch::aggregator {

class ArenaBatch {
 public:
  ArenaBatch()
      : arena_(Options()),
        batch_(google::protobuf::Arena::CreateMessage<ncclwatch::v1::NodeBatch>(&arena_)) {}
  ArenaBatch(const ArenaBatch&) = delete;
  ArenaBatch& operator=(const ArenaBatch&) = delete;
  ncclwatch::v1::NodeBatch& batch() { return *batch_; }

 private:
  static google::protobuf::ArenaOptions Options() {
    google::protobuf::ArenaOptions o;
    o.start_block_size = 32 << 10;  // a node's batch of 8 ranks parses into ~30-100 KiB
    o.max_block_size = 1 << 20;
    return o;
  }
  google::protobuf::Arena arena_;
  ncclwatch::v1::NodeBatch* batch_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_ARENA_BATCH_H_
