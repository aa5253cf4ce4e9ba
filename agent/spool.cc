#include "agent/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace ncclwatch::agent {
namespace {

constexpr char kSuffix[] = ".batch";

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Writes `data` to `dir`/`name` atomically: temporary file, rename; with `sync`, the file and then
// the directory are synced to disk too.
// CRC-32C (Castagnoli), bytewise from a table: a spool file is read once or twice.
uint32_t Crc32c(std::string_view data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = ~0u;
  for (unsigned char b : data) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

// A spool file: "NWSPOOL1", the payload's length (8 bytes) and CRC-32C (4 bytes), little-endian,
// then the serialized NodeBatchBytes. The check catches what protobuf parsing alone cannot: a
// file cut short at a field boundary (fewer reports, still a valid batch) and flipped bits inside
// a report's bytes. A file without the header is one of an agent before it: read as it is.
constexpr std::string_view kMagic = "NWSPOOL1";
constexpr size_t kHeaderBytes = 8 + 8 + 4;

std::string Frame(const std::string& payload) {
  std::string out(kMagic);
  uint64_t n = payload.size();
  uint32_t crc = Crc32c(payload);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(crc >> (8 * i)));
  out += payload;
  return out;
}

}  // namespace

absl::StatusOr<ncclwatch::v1::NodeBatchBytes> ParseSpoolFile(std::string_view data) {
  if (data.starts_with(kMagic)) {
    if (data.size() < kHeaderBytes) return absl::DataLossError("its header is cut short");
    uint64_t n = 0;
    uint32_t crc = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(data[8 + i])} << (8 * i);
    for (int i = 0; i < 4; ++i)
      crc |= uint32_t{static_cast<unsigned char>(data[16 + i])} << (8 * i);
    data.remove_prefix(kHeaderBytes);
    if (data.size() != n) {
      return absl::DataLossError(
          absl::StrCat("it holds ", data.size(), " bytes of a batch of ", n, " (cut short?)"));
    }
    if (Crc32c(data) != crc) return absl::DataLossError("its checksum does not match its bytes");
  }
  ncclwatch::v1::NodeBatchBytes batch;
  if (!batch.ParseFromArray(data.data(), static_cast<int>(data.size())) ||
      batch.agent_id().empty()) {
    return absl::DataLossError("it is not a batch");
  }
  return batch;
}

namespace {

// The spool file at `path`, read and parsed; DataLoss when it cannot be read or is damaged.
absl::StatusOr<ncclwatch::v1::NodeBatchBytes> ReadSpoolFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream data;
  data << in.rdbuf();
  return in ? ParseSpoolFile(data.str()) : absl::DataLossError("it cannot be read");
}

}  // namespace

namespace {

absl::Status WriteAtomically(const std::string& dir, const std::string& name,
                             const std::string& data, bool sync) {
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create " + tmp);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("cannot write " + tmp);
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if ((sync && fsync(fd) != 0) || close(fd) != 0) {
    absl::Status s = Errno("cannot sync " + tmp);
    unlink(tmp.c_str());
    return s;
  }
  const std::string path = absl::StrCat(dir, "/", name);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno("cannot rename " + tmp);
    unlink(tmp.c_str());
    return s;
  }
  const int dfd = sync ? open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace

Spool::Spool(std::string dir, int64_t max_bytes, bool fsync, MetricRegistry& m, const LabelPairs& l)
    : dir_(std::move(dir)),
      max_bytes_(max_bytes),
      fsync_(fsync),
      dropped_batches_(m.GetCounter("ncclwatch_agent_spool_dropped_batches_total",
                                    "Spooled batches deleted unsent because the spool was full.",
                                    l)),
      dropped_reports_(m.GetCounter("ncclwatch_agent_spool_dropped_reports_total",
                                    "Reports in the spooled batches deleted because it was full.",
                                    l)),
      corrupt_(m.GetCounter("ncclwatch_agent_spool_corrupt_files_total",
                            "Spool files that could not be read (moved aside, not replayed).", l)),
      write_errors_(m.GetCounter("ncclwatch_agent_spool_write_errors_total",
                                 "Batches that could not be written to the spool.", l)),
      bytes_gauge_(m.GetGauge("ncclwatch_agent_spool_bytes", "Bytes of batches in the spool.", l)),
      batches_gauge_(m.GetGauge("ncclwatch_agent_spool_batches", "Batches in the spool.", l)),
      max_bytes_gauge_(m.GetGauge("ncclwatch_agent_spool_max_bytes",
                                  "The spool's size limit (--spool-max-bytes).", l)) {
  max_bytes_gauge_->Set(static_cast<double>(max_bytes_));
}

absl::StatusOr<std::unique_ptr<Spool>> Spool::Open(const std::string& dir, int64_t max_bytes,
                                                   MetricRegistry& metrics, bool fsync,
                                                   const LabelPairs& labels) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create spool ", dir, ": ", ec.message()));
  std::unique_ptr<Spool> spool(new Spool(dir, max_bytes, fsync, metrics, labels));
  ncclwatch::MutexLock lock(&spool->mu_);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind('.', 0) == 0) {  // a temporary file of a write that never finished
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    if (name.size() > sizeof(kSuffix) - 1 &&
        name.compare(name.size() - (sizeof(kSuffix) - 1), sizeof(kSuffix) - 1, kSuffix) == 0) {
      names.push_back(name);
    }
  }
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot list spool ", dir, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<ncclwatch::v1::NodeBatchBytes> batch = ReadSpoolFile(path);
    if (!batch.ok()) {
      spool->corrupt_->Increment();
      LogWarning("spool: %s is unreadable (%s); moved aside as %s.corrupt, not replayed", path,
                 batch.status().message(), path);
      std::filesystem::rename(path, path + ".corrupt", ec);
      continue;
    }
    const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
    const int64_t size = ec ? 0 : static_cast<int64_t>(bytes);
    spool->files_[name] = {size, batch->reports_size()};
    spool->bytes_ += size;
    spool->recovered_.push_back({name, batch->reports_size()});
  }
  spool->UpdateGauges();
  return spool;
}

std::vector<Spool::Entry> Spool::TakeRecovered() {
  ncclwatch::MutexLock lock(&mu_);
  return std::move(recovered_);
}

absl::StatusOr<std::string> Spool::Add(const ncclwatch::v1::NodeBatchBytes& batch) {
  std::string payload;
  if (!batch.SerializeToString(&payload)) return absl::InternalError("cannot serialise a batch");
  const std::string data = Frame(payload);
  const auto size = static_cast<int64_t>(data.size());
  ncclwatch::MutexLock lock(&mu_);
  if (size > max_bytes_) {
    write_errors_->Increment();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "spool: a batch of %d bytes does not fit in --spool-max-bytes=%d", size, max_bytes_));
  }
  // Make room: the oldest batches go first, each counted.
  while (!files_.empty() && bytes_ + size > max_bytes_) {
    auto oldest = files_.begin();
    std::error_code ec;
    std::filesystem::remove(absl::StrCat(dir_, "/", oldest->first), ec);
    bytes_ -= oldest->second.bytes;
    dropped_batches_->Increment();
    dropped_reports_->Increment(static_cast<uint64_t>(oldest->second.reports));
    files_.erase(oldest);
  }
  const std::string name =
      absl::StrFormat("%020d-%020d%s", absl::GetCurrentTimeNanos(), sequence_++, kSuffix);
  if (absl::Status s = WriteAtomically(dir_, name, data, fsync_); !s.ok()) {
    write_errors_->Increment();
    writable_ = false;
    UpdateGauges();
    return s;
  }
  files_[name] = {size, batch.reports_size()};
  bytes_ += size;
  writable_ = true;
  UpdateGauges();
  return name;
}

absl::StatusOr<ncclwatch::v1::NodeBatchBytes> Spool::Read(const std::string& name) {
  {
    ncclwatch::MutexLock lock(&mu_);
    if (!files_.count(name))
      return absl::NotFoundError(absl::StrCat("spool: ", name, " was dropped"));
  }
  const std::string path = absl::StrCat(dir_, "/", name);
  absl::StatusOr<ncclwatch::v1::NodeBatchBytes> batch = ReadSpoolFile(path);
  if (!batch.ok()) {
    // Set aside and counted as at start-up: its reports are lost, and said to be.
    corrupt_->Increment();
    std::error_code ec;
    std::filesystem::rename(path, path + ".corrupt", ec);
    ncclwatch::MutexLock lock(&mu_);
    auto it = files_.find(name);
    if (it != files_.end()) {
      bytes_ -= it->second.bytes;
      dropped_reports_->Increment(static_cast<uint64_t>(it->second.reports));
      files_.erase(it);
      UpdateGauges();
    }
    return absl::DataLossError(absl::StrCat("spool: ", path, " is unreadable (",
                                            batch.status().message(),
                                            "); moved aside as .corrupt, not sent"));
  }
  return batch;
}

void Spool::SetAside(const std::string& name) {
  ncclwatch::MutexLock lock(&mu_);
  auto it = files_.find(name);
  if (it == files_.end()) return;
  std::error_code ec;
  const std::string path = absl::StrCat(dir_, "/", name);
  std::filesystem::rename(path, path + ".rejected", ec);
  if (ec) LogWarning("spool: cannot set %s aside: %s", path, ec.message());
  bytes_ -= it->second.bytes;
  files_.erase(it);
  UpdateGauges();
  // Kept for a look, not for ever: the newest kMaxRejected (names sort by creation time).
  constexpr size_t kMaxRejected = 16;
  std::vector<std::string> rejected;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.ends_with(".rejected")) rejected.push_back(n);
  }
  std::sort(rejected.begin(), rejected.end());
  for (size_t i = 0; i + kMaxRejected < rejected.size(); ++i) {
    std::filesystem::remove(absl::StrCat(dir_, "/", rejected[i]), ec);
  }
}

void Spool::Remove(const std::string& name) {
  ncclwatch::MutexLock lock(&mu_);
  auto it = files_.find(name);
  if (it == files_.end()) return;
  std::error_code ec;
  std::filesystem::remove(absl::StrCat(dir_, "/", name), ec);
  if (ec) LogWarning("spool: cannot delete %s/%s: %s", dir_, name, ec.message());
  bytes_ -= it->second.bytes;
  files_.erase(it);
  // Drained after a failed write: what filled the disk was (mostly) this spool, now empty. Ready
  // again; the next write confirms it (it had stayed unready until a new batch was written).
  if (files_.empty()) writable_ = true;
  UpdateGauges();
}

bool Spool::writable() const {
  ncclwatch::MutexLock lock(&mu_);
  return writable_;
}

int64_t Spool::bytes() const {
  ncclwatch::MutexLock lock(&mu_);
  return bytes_;
}

size_t Spool::batches() const {
  ncclwatch::MutexLock lock(&mu_);
  return files_.size();
}

void Spool::UpdateGauges() {
  bytes_gauge_->Set(static_cast<double>(bytes_));
  batches_gauge_->Set(static_cast<double>(files_.size()));
}

}  // namespace ncclwatch::agent
