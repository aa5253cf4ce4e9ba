// ncclwatch-aggregator-crashable: the aggregator of the chaos soak and the power-cut tests, never
// installed. Its store writes through a journal of what was synced (NCCLWATCH_CRASH_JOURNAL), so
// that a test can cut the power after killing this process; while the file named by
// NCCLWATCH_FULL_DISK_FLAG exists, the store's disk is full (its log writes fail with ENOSPC).
// Flags and everything else as ncclwatch-aggregator's (aggregator/server/aggregator_flags.h).
#include <cstdlib>
#include <memory>

#include "aggregator/server/aggregator_flags.h"
#include "common/log.h"
#include "rocksdb/env.h"
#include "tests/crashfs/full_disk_fs.h"
#include "tests/crashfs/journaling_fs.h"

int main(int argc, char** argv) {
  std::unique_ptr<rocksdb::Env> journaling_env;  // outlives the server
  return ncclwatch::aggregator::AggregatorMain(
      argc, argv, [&](ncclwatch::aggregator::AggregatorServerOptions& options) {
        const char* journal = std::getenv("NCCLWATCH_CRASH_JOURNAL");
        if (journal == nullptr) return;
        std::shared_ptr<rocksdb::FileSystem> fs =
            ncclwatch::testing::NewJournalingFileSystem(journal);
        if (const char* flag = std::getenv("NCCLWATCH_FULL_DISK_FLAG")) {
          fs = std::make_shared<ncclwatch::testing::FullDiskFileSystem>(fs, flag);
          ncclwatch::LogWarning("test build: the store's disk is full while %s exists", flag);
        }
        journaling_env = rocksdb::NewCompositeEnv(fs);
        options.env = journaling_env.get();
        ncclwatch::LogWarning("test build: the store journals its syncs to %s", journal);
      });
}
