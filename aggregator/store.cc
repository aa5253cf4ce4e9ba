#include "aggregator/store.h"

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace ncclwatch::aggregator {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

std::string BatchKey(const std::string& agent_id, uint64_t seq) {
  std::string key = "B";
  key += agent_id;
  key += '\0';
  key += EncodeBe64(seq);
  return key;
}

}  // namespace

std::string EncodeBe64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

uint64_t DecodeBe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir, rocksdb::Env* env) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.IncreaseParallelism(2);
  if (env != nullptr) options.env = env;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open RocksDB in ", dir));
  return std::unique_ptr<Store>(new Store(db));
}

Store::Store(rocksdb::DB* db) : db_(db) {}
Store::~Store() = default;
void Store::DbDeleter::operator()(rocksdb::DB* db) const { delete db; }

absl::StatusOr<bool> Store::PutBatchIfNew(const ncclwatch::v1::NodeBatch& batch) {
  std::string key = BatchKey(batch.agent_id(), batch.batch_seq());
  absl::MutexLock lock(&put_mu_);
  std::string existing;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &existing);
  if (s.ok()) return false;
  if (!s.IsNotFound()) return FromRocks(s, "batch lookup");
  std::string value;
  if (!batch.SerializeToString(&value)) return absl::InternalError("cannot serialise batch");
  s = db_->Put(rocksdb::WriteOptions(), key, value);
  if (!s.ok()) return FromRocks(s, "batch write");
  return true;
}

absl::Status Store::PutEvent(const ncclwatch::v1::Event& event) {
  std::string key = "E";
  key += EncodeBe64(event.time_unix_ns());
  key += EncodeBe64(event_counter_.fetch_add(1));
  return FromRocks(db_->Put(rocksdb::WriteOptions(), key, event.SerializeAsString()),
                   "event write");
}

absl::StatusOr<std::vector<ncclwatch::v1::Event>> Store::ListEvents(int64_t since_unix_ns,
                                                                    size_t limit) const {
  std::vector<ncclwatch::v1::Event> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("E" + EncodeBe64(static_cast<uint64_t>(since_unix_ns)));
       it->Valid() && it->key().starts_with("E") && out.size() < limit; it->Next()) {
    ncclwatch::v1::Event e;
    if (e.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      out.push_back(std::move(e));
    }
  }
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "event scan");
  return out;
}

absl::StatusOr<uint64_t> Store::CountBatches() const {
  uint64_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("B"); it->Valid() && it->key().starts_with("B"); it->Next()) ++n;
  rocksdb::Status s = it->status();
  if (!s.ok()) return FromRocks(s, "batch scan");
  return n;
}

}  // namespace ncclwatch::aggregator
