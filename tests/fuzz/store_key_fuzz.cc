// Fuzz target: the store's key decoder and series identities (aggregator/store_keys.h), which read
// whatever a database on disk holds. A key that decodes re-encodes to the same bytes; an identity
// that parses re-forms the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "aggregator/store/store_keys.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ncclwatch::aggregator;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<StoreKey> key = DecodeStoreKey(bytes);
  if (key.ok()) {
    FUZZ_CHECK(EncodeStoreKey(*key) == bytes);
  } else {
    FUZZ_CHECK(absl::IsInvalidArgument(key.status()) && !key.status().message().empty());
  }
  if (!bytes.empty()) {
    std::string name;
    ncclwatch::LabelPairs labels;
    if (ParseSeriesIdentity(bytes.substr(1), &name, &labels)) {
      FUZZ_CHECK(SeriesIdentity(name, labels) == bytes.substr(1));
    }
  }
  return 0;
}
