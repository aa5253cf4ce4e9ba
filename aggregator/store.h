// The aggregator's durable store, on RocksDB. Key layout (docs/storage-format.md):
//   'B' agent_id '\0' be64(batch_seq)  -> NodeBatch   acknowledged batches, the raw truth
//   'E' be64(time_unix_ns) be64(n)      -> Event       detection events, in time order
// Writes go through RocksDB's write-ahead log before Push is acknowledged, so an acknowledged
// batch survives a crash of the aggregator process.
#ifndef NCCLWATCH_AGGREGATOR_STORE_H_
#define NCCLWATCH_AGGREGATOR_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ncclwatch/v1/ingest.pb.h"
#include "ncclwatch/v1/query.pb.h"

namespace rocksdb {
class DB;
class Env;
}  // namespace rocksdb

namespace ncclwatch::aggregator {

class Store {
 public:
  // Opens (creating if needed) the database in `dir`. `env` may be an in-memory Env for tests.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir,
                                                     rocksdb::Env* env = nullptr);
  ~Store();

  // Stores the batch unless its (agent_id, batch_seq) is already stored. Returns true if it was
  // new. Thread-safe.
  absl::StatusOr<bool> PutBatchIfNew(const ncclwatch::v1::NodeBatch& batch);
  absl::Status PutEvent(const ncclwatch::v1::Event& event);
  // Events with time >= since_unix_ns, oldest first, at most `limit`.
  absl::StatusOr<std::vector<ncclwatch::v1::Event>> ListEvents(int64_t since_unix_ns,
                                                               size_t limit) const;
  // Number of batches in the store (scans keys; for tests and start-up logging).
  absl::StatusOr<uint64_t> CountBatches() const;

 private:
  explicit Store(rocksdb::DB* db);
  struct DbDeleter {
    void operator()(rocksdb::DB* db) const;
  };
  std::unique_ptr<rocksdb::DB, DbDeleter> db_;
  absl::Mutex put_mu_;  // makes the duplicate check and the write one step
  std::atomic<uint64_t> event_counter_{0};
};

// Big-endian encoding so that byte order equals numeric order.
std::string EncodeBe64(uint64_t v);
uint64_t DecodeBe64(const char* p);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_STORE_H_
