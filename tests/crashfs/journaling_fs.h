// A RocksDB FileSystem for tests that makes "the node lost power" reproducible: it passes every
// call through to the real disk and journals what became durable -- the bytes of a file covered
// by a Sync/Fsync, and the existence of a file whose directory was fsynced after it was created.
// After the process is killed, ApplyPowerCut() makes the directory look as a power loss would
// have left it: unsynced tails are cut off and files created without a directory sync vanish.
//
// Renames are taken as durable at once and deletions as final (a harsher model would also undo a
// rename not followed by a directory sync); what is tested is that whatever was acknowledged had
// reached a sync. Test-only: linked into the test build of the aggregator
// (ncclwatch-aggregator-crashable) and the store's tests, never into the shipped binaries.
#ifndef NCCLWATCH_TESTS_CRASHFS_JOURNALING_FS_H_
#define NCCLWATCH_TESTS_CRASHFS_JOURNALING_FS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rocksdb/env.h"

namespace ncclwatch::testing {

// An Env over the default file system that appends to `journal_path` (created if needed).
std::unique_ptr<rocksdb::Env> NewJournalingEnv(const std::string& journal_path);
// The same file system, to put under another (e.g. a FullDiskFileSystem).
std::shared_ptr<rocksdb::FileSystem> NewJournalingFileSystem(const std::string& journal_path);

struct PowerCut {
  int files_truncated = 0;
  int files_removed = 0;
  uint64_t bytes_dropped = 0;
};

// Applies the journal to the disk as a power loss would, then empties the journal. Call it only
// while no process writes through the journaling Env.
absl::StatusOr<PowerCut> ApplyPowerCut(const std::string& journal_path);

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_CRASHFS_JOURNALING_FS_H_
