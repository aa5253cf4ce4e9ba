#include "tests/crashfs/journaling_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "rocksdb/file_system.h"

namespace ncclwatch::testing {
namespace {

using rocksdb::FileOptions;
using rocksdb::FSDirectory;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// One line per durable fact, appended with O_APPEND (one write per line, so lines from RocksDB's
// threads never interleave). Kills of the process do not lose what write() returned.
class Journal {
 public:
  explicit Journal(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~Journal() {
    if (fd_ >= 0) close(fd_);
  }
  void Note(const std::string& line) {
    const std::string text = line + "\n";
    ssize_t n = write(fd_, text.data(), text.size());
    (void)n;
  }

 private:
  int fd_;
};

class JournalingFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  JournalingFile(std::unique_ptr<FSWritableFile> file, std::string path, uint64_t size,
                 std::shared_ptr<Journal> journal)
      : FSWritableFileOwnerWrapper(std::move(file)),
        path_(std::move(path)),
        size_(size),
        journal_(std::move(journal)) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Append(data, o, d);
    if (s.ok()) Grow(size_ + data.size());
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& v,
                  IODebugContext* d) override {
    IOStatus s = target()->Append(data, o, v, d);
    if (s.ok()) Grow(size_ + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            IODebugContext* d) override {
    IOStatus s = target()->PositionedAppend(data, offset, o, d);
    if (s.ok()) Grow(std::max<uint64_t>(Size(), offset + data.size()));
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            const rocksdb::DataVerificationInfo& v, IODebugContext* d) override {
    IOStatus s = target()->PositionedAppend(data, offset, o, v, d);
    if (s.ok()) Grow(std::max<uint64_t>(Size(), offset + data.size()));
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Truncate(size, o, d);
    if (s.ok()) Grow(size);
    return s;
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override {
    const uint64_t covered = Size();
    IOStatus s = target()->Sync(o, d);
    if (s.ok()) journal_->Note(absl::StrCat("S ", covered, " ", path_));
    return s;
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    const uint64_t covered = Size();
    IOStatus s = target()->Fsync(o, d);
    if (s.ok()) journal_->Note(absl::StrCat("S ", covered, " ", path_));
    return s;
  }

 private:
  uint64_t Size() {
    std::lock_guard<std::mutex> lock(mu_);
    return size_;
  }
  void Grow(uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    size_ = size;
  }

  const std::string path_;
  std::mutex mu_;
  uint64_t size_;
  std::shared_ptr<Journal> journal_;
};

class JournalingDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  JournalingDirectory(std::unique_ptr<FSDirectory> dir, std::string path,
                      std::shared_ptr<Journal> journal)
      : FSDirectoryWrapper(std::move(dir)), path_(std::move(path)), journal_(std::move(journal)) {}
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = FSDirectoryWrapper::Fsync(o, d);
    if (s.ok()) journal_->Note("D " + path_);
    return s;
  }
  IOStatus FsyncWithDirOptions(const IOOptions& o, IODebugContext* d,
                               const rocksdb::DirFsyncOptions& opts) override {
    IOStatus s = FSDirectoryWrapper::FsyncWithDirOptions(o, d, opts);
    if (s.ok()) journal_->Note("D " + path_);
    return s;
  }

 private:
  const std::string path_;
  std::shared_ptr<Journal> journal_;
};

class JournalingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  JournalingFileSystem(const std::string& journal_path)
      : FileSystemWrapper(rocksdb::FileSystem::Default()),
        journal_(std::make_shared<Journal>(journal_path)) {}
  const char* Name() const override { return "ncclwatch.JournalingFileSystem"; }

  IOStatus NewWritableFile(const std::string& f, const FileOptions& o,
                           std::unique_ptr<FSWritableFile>* r, IODebugContext* d) override {
    IOStatus s = target()->NewWritableFile(f, o, r, d);
    if (s.ok()) Wrap(f, 0, "C ", r);
    return s;
  }
  IOStatus ReopenWritableFile(const std::string& f, const FileOptions& o,
                              std::unique_ptr<FSWritableFile>* r, IODebugContext* d) override {
    struct stat st {};
    const uint64_t size = stat(f.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    IOStatus s = target()->ReopenWritableFile(f, o, r, d);
    if (s.ok()) Wrap(f, size, absl::StrCat("O ", size, " ").c_str(), r);
    return s;
  }
  IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const FileOptions& o,
                             std::unique_ptr<FSWritableFile>* r, IODebugContext* d) override {
    IOStatus s = target()->ReuseWritableFile(f, old, o, r, d);
    if (s.ok()) Wrap(f, 0, "C ", r);
    return s;
  }
  IOStatus NewDirectory(const std::string& name, const IOOptions& o,
                        std::unique_ptr<FSDirectory>* r, IODebugContext* d) override {
    IOStatus s = target()->NewDirectory(name, o, r, d);
    if (s.ok()) *r = std::make_unique<JournalingDirectory>(std::move(*r), name, journal_);
    return s;
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions& o,
                      IODebugContext* d) override {
    IOStatus s = target()->RenameFile(from, to, o, d);
    if (s.ok()) journal_->Note("R " + from + "\t" + to);
    return s;
  }
  IOStatus DeleteFile(const std::string& f, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->DeleteFile(f, o, d);
    if (s.ok()) journal_->Note("X " + f);
    return s;
  }

 private:
  void Wrap(const std::string& f, uint64_t size, const char* tag,
            std::unique_ptr<FSWritableFile>* r) {
    journal_->Note(tag + f);
    *r = std::make_unique<JournalingFile>(std::move(*r), f, size, journal_);
  }
  std::shared_ptr<Journal> journal_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewJournalingEnv(const std::string& journal_path) {
  return rocksdb::NewCompositeEnv(NewJournalingFileSystem(journal_path));
}

std::shared_ptr<rocksdb::FileSystem> NewJournalingFileSystem(const std::string& journal_path) {
  return std::make_shared<JournalingFileSystem>(journal_path);
}

absl::StatusOr<PowerCut> ApplyPowerCut(const std::string& journal_path) {
  struct FileState {
    bool created = false;  // in the journal's time: gone unless its directory was synced since
    bool durable = true;   // its directory entry is on disk
    int64_t synced = -1;   // bytes covered by a sync; -1: none since created or reopened
  };
  std::map<std::string, FileState> files;
  std::ifstream in(journal_path);
  for (std::string line; std::getline(in, line);) {
    if (line.size() < 3) continue;
    const char op = line[0];
    std::string rest = line.substr(2);
    if (op == 'C') {
      files[rest] = FileState{true, false, 0};
    } else if (op == 'O') {
      std::istringstream fields(rest);
      int64_t size = 0;
      fields >> size;
      files[rest.substr(rest.find(' ') + 1)] = FileState{false, true, size};
    } else if (op == 'S') {
      const size_t sp = rest.find(' ');
      FileState& f = files[rest.substr(sp + 1)];
      f.synced = std::max<int64_t>(f.synced, std::stoll(rest.substr(0, sp)));
    } else if (op == 'D') {
      for (auto& [path, f] : files) {
        if (DirOf(path) == rest) f.durable = true;
      }
    } else if (op == 'R') {
      const size_t tab = rest.find('\t');
      const std::string from = rest.substr(0, tab), to = rest.substr(tab + 1);
      auto it = files.find(from);
      FileState moved = it == files.end() ? FileState{} : it->second;
      if (it != files.end()) files.erase(it);
      files[to] = moved;
    } else if (op == 'X') {
      files.erase(rest);
    }
  }
  in.close();
  PowerCut cut;
  for (const auto& [path, f] : files) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    const auto size = static_cast<int64_t>(st.st_size);
    if (f.created && !f.durable) {
      if (unlink(path.c_str()) != 0) return absl::InternalError("cannot remove " + path);
      ++cut.files_removed;
      cut.bytes_dropped += static_cast<uint64_t>(size);
    } else if (f.synced >= 0 && size > f.synced) {
      if (truncate(path.c_str(), f.synced) != 0) {
        return absl::InternalError("cannot truncate " + path);
      }
      ++cut.files_truncated;
      cut.bytes_dropped += static_cast<uint64_t>(size - f.synced);
    }
  }
  if (truncate(journal_path.c_str(), 0) != 0 && errno != ENOENT) {
    return absl::InternalError("cannot empty " + journal_path);
  }
  return cut;
}

}  // namespace ncclwatch::testing
