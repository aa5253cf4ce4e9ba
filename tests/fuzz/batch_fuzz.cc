// Fuzz target: one node batch as the aggregator's Ingest.Push receives it, through the real
// Ingest (batch checks, report validation, deduplication, analysis) over RocksDB in an
// in-memory environment. Whatever the bytes, Push answers with an ack or a clean error, and a batch
// pushed twice is acknowledged as a duplicate the second time.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/ingest/ingest.h"
#include "aggregator/store/store.h"
#include "common/metrics.h"
#include "rocksdb/env.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ncclwatch::aggregator;

struct Pipeline {
  std::unique_ptr<rocksdb::Env> env{rocksdb::NewMemEnv(rocksdb::Env::Default())};
  std::unique_ptr<Store> store;
  std::unique_ptr<Analyzer> analyzer;
  ncclwatch::MetricRegistry metrics;
  std::unique_ptr<Ingest> core;

  Pipeline() {
    auto opened = Store::Open("/fuzz-store", env.get());
    FUZZ_CHECK(opened.ok());
    store = *std::move(opened);
    AnalyzerOptions options;
    options.max_jobs = 16;
    options.max_comms_per_job = 16;
    options.max_series = 20'000;
    analyzer = std::make_unique<Analyzer>(options);
    core = std::make_unique<Ingest>(*store, *analyzer, metrics);
  }
};

// Renewed now and then so that the in-memory database stays small. The last one is left to the
// end of the process: destroyed at exit, it would outlive RocksDB's own static state.
Pipeline& Shared() {
  static Pipeline* pipeline = nullptr;
  static int uses = 0;
  if (++uses % 2048 == 1) {
    delete pipeline;
    pipeline = new Pipeline();
  }
  return *pipeline;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ncclwatch::v1::NodeBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  Ingest& core = *Shared().core;
  absl::StatusOr<ncclwatch::v1::BatchAck> first = core.Push(batch);
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(first.status()));
    return 0;
  }
  FUZZ_CHECK(first->batch_seq() == batch.batch_seq());
  FUZZ_CHECK(first->rejected_reports() <= static_cast<uint32_t>(batch.reports_size()));
  absl::StatusOr<ncclwatch::v1::BatchAck> again = core.Push(batch);
  FUZZ_CHECK(again.ok() && again->duplicate());
  return 0;
}
