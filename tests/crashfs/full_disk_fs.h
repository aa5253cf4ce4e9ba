// A RocksDB FileSystem for tests whose disk fills up on command: while `full` (or while the file
// `flag_path` exists: for a test that drives another process), appends to the write-ahead log
// fail with ENOSPC (IOStatus::NoSpace) and the free space reads as (almost) none; everything else
// goes to the file system below (the real disk by default). As leveldb's and RocksDB's own
// fault-injection environments do, the fault goes through the interface the store already takes (an
// Env). Header-only; test builds only.
#ifndef NCCLWATCH_TESTS_CRASHFS_FULL_DISK_FS_H_
#define NCCLWATCH_TESTS_CRASHFS_FULL_DISK_FS_H_

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rocksdb/file_system.h"

namespace ncclwatch::testing {

class FullDiskFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit FullDiskFileSystem(
      std::shared_ptr<rocksdb::FileSystem> below = rocksdb::FileSystem::Default(),
      std::string flag_path = "")
      : FileSystemWrapper(std::move(below)), flag_path_(std::move(flag_path)) {}
  const char* Name() const override { return "FullDiskFileSystem"; }
  std::atomic<bool> full{false};
  bool Full() const {
    return full || (!flag_path_.empty() && access(flag_path_.c_str(), F_OK) == 0);
  }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, d);
    if (s.ok() && f.ends_with(".log")) *r = std::make_unique<File>(std::move(*r), this);
    return s;
  }
  rocksdb::IOStatus GetFreeSpace(const std::string& path, const rocksdb::IOOptions& o,
                                 uint64_t* free, rocksdb::IODebugContext* d) override {
    if (!Full()) return target()->GetFreeSpace(path, o, free, d);
    *free = 4096;
    return rocksdb::IOStatus::OK();
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, const FullDiskFileSystem* fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (fs_->Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return FSWritableFileOwnerWrapper::Append(data, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      if (fs_->Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return FSWritableFileOwnerWrapper::Append(data, o, v, d);
    }

   private:
    const FullDiskFileSystem* fs_;
  };

  const std::string flag_path_;
};

// A disk that fills up after `room` more file operations (creating a file, appending to one,
// syncing one): every one after fails with ENOSPC until `room` is raised again. Sweeping `room`
// puts the first failure at every write RocksDB makes, start-up included.
class CountdownFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit CountdownFileSystem(int room)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), room(room) {}
  const char* Name() const override { return "CountdownFileSystem"; }
  std::atomic<int> room;

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    if (!Take()) return NoSpace();
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, d);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this);
    return s;
  }

 private:
  bool Take() { return room.fetch_sub(1) > 0; }
  static rocksdb::IOStatus NoSpace() {
    return rocksdb::IOStatus::NoSpace("injected: no space left on device");
  }
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, CountdownFileSystem* fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      return fs_->Take() ? FSWritableFileOwnerWrapper::Append(data, o, d) : NoSpace();
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      return fs_->Take() ? FSWritableFileOwnerWrapper::Append(data, o, v, d) : NoSpace();
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return fs_->Take() ? FSWritableFileOwnerWrapper::Sync(o, d) : NoSpace();
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return fs_->Take() ? FSWritableFileOwnerWrapper::Fsync(o, d) : NoSpace();
    }

   private:
    CountdownFileSystem* fs_;
  };
};

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_CRASHFS_FULL_DISK_FS_H_
