// The keys of the aggregator's RocksDB store (layout: docs/storage-format.md), decoded and encoded
// in one place. Decoding takes untrusted bytes (a database written by another version, a damaged
// file): it never reads past the key and says what is wrong with a key it cannot take.
#ifndef NCCLWATCH_AGGREGATOR_STORE_STORE_KEYS_H_
#define NCCLWATCH_AGGREGATOR_STORE_STORE_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/prom_text.h"

namespace ncclwatch::aggregator {

struct StoreKey {
  enum class Kind : char {
    kBatchLog = 'L',          // time = received_ns, counter = n
    kBatchIndex = 'B',        // text = agent_id, counter = batch_seq
    kEvent = 'E',             // time = event time (unix ns), counter = n
    kSeriesByIdentity = 'N',  // text = series identity
    kSeriesById = 'S',        // id = series id
    kSeriesDay = 'D',         // id = series id (value: be64 day of its newest point)
    kPoint = 'P',             // id = series id, time = ms
    kMeta = 'M',              // text = bookkeeping name
  };
  Kind kind = Kind::kMeta;
  uint64_t time = 0;
  uint64_t counter = 0;
  uint64_t id = 0;
  std::string text;
};

// Big-endian encoding so that byte order equals numeric order.
std::string EncodeBe64(uint64_t v);
void PutBe64(char* out, uint64_t v);  // writes exactly 8 bytes
uint64_t DecodeBe64(const char* p);   // reads exactly 8 bytes

std::string EncodeStoreKey(const StoreKey& key);
// InvalidArgument (naming the tag and the length) for a key of no known layout.
absl::StatusOr<StoreKey> DecodeStoreKey(std::string_view key);

// The identity of a series in the index: name, then label names and values, '\0'-separated.
std::string SeriesIdentity(const std::string& name, const LabelPairs& labels);
// The same, appended to `out` (reusing its buffer on a hot path).
void AppendSeriesIdentity(const std::string& name, const LabelPairs& labels, std::string* out);
// Splits an identity back into name and labels; false if it is malformed (an even number of
// '\0'-separated parts: a label without a value).
bool ParseSeriesIdentity(std::string_view identity, std::string* name, LabelPairs* labels);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_STORE_STORE_KEYS_H_
