#include "aggregator/store/store_keys.h"

#include "absl/strings/str_cat.h"

namespace ncclwatch::aggregator {
namespace {

void AppendBe64(std::string* out, uint64_t v) {
  char bytes[8];
  PutBe64(bytes, v);
  out->append(bytes, 8);
}

absl::Status Malformed(char tag, size_t size, const char* want) {
  return absl::InvalidArgumentError(
      absl::StrCat("store key '", std::string(1, tag), "' of ", size, " bytes: want ", want));
}

}  // namespace

void PutBe64(char* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

std::string EncodeBe64(uint64_t v) {
  std::string out;
  AppendBe64(&out, v);
  return out;
}

uint64_t DecodeBe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string EncodeStoreKey(const StoreKey& key) {
  std::string out(1, static_cast<char>(key.kind));
  switch (key.kind) {
    case StoreKey::Kind::kBatchLog:
    case StoreKey::Kind::kEvent:
      out.reserve(17);
      AppendBe64(&out, key.time);
      AppendBe64(&out, key.counter);
      break;
    case StoreKey::Kind::kBatchIndex:
      out += key.text;
      out += '\0';
      AppendBe64(&out, key.counter);
      break;
    case StoreKey::Kind::kSeriesById:
    case StoreKey::Kind::kSeriesDay:
      AppendBe64(&out, key.id);
      break;
    case StoreKey::Kind::kPoint:
      out.reserve(17);
      AppendBe64(&out, key.id);
      AppendBe64(&out, key.time);
      break;
    case StoreKey::Kind::kSeriesByIdentity:
    case StoreKey::Kind::kMeta:
      out += key.text;
      break;
  }
  return out;
}

absl::StatusOr<StoreKey> DecodeStoreKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty store key");
  StoreKey out;
  const char tag = key[0];
  const std::string_view rest = key.substr(1);
  switch (tag) {
    case 'L':
    case 'E':
      if (rest.size() != 16) return Malformed(tag, key.size(), "17 (tag, be64 time, be64 n)");
      out.kind = static_cast<StoreKey::Kind>(tag);
      out.time = DecodeBe64(rest.data());
      out.counter = DecodeBe64(rest.data() + 8);
      return out;
    case 'B':
      // The agent id is everything up to the '\0' that precedes the last 8 bytes.
      if (rest.size() < 9 || rest[rest.size() - 9] != '\0') {
        return Malformed(tag, key.size(), "tag, agent id, '\\0', be64 batch_seq");
      }
      out.kind = StoreKey::Kind::kBatchIndex;
      out.text = std::string(rest.substr(0, rest.size() - 9));
      out.counter = DecodeBe64(rest.data() + rest.size() - 8);
      return out;
    case 'S':
    case 'D':
      if (rest.size() != 8) return Malformed(tag, key.size(), "9 (tag, be64 series id)");
      out.kind = static_cast<StoreKey::Kind>(tag);
      out.id = DecodeBe64(rest.data());
      return out;
    case 'P':
      if (rest.size() != 16) return Malformed(tag, key.size(), "17 (tag, be64 series id, be64 ms)");
      out.kind = StoreKey::Kind::kPoint;
      out.id = DecodeBe64(rest.data());
      out.time = DecodeBe64(rest.data() + 8);
      return out;
    case 'N':
    case 'M':
      if (rest.empty()) return Malformed(tag, key.size(), "a name after the tag");
      out.kind = static_cast<StoreKey::Kind>(tag);
      out.text = std::string(rest);
      return out;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("store key with unknown tag byte 0x",
                       absl::Hex(static_cast<unsigned char>(tag), absl::kZeroPad2)));
  }
}

void AppendSeriesIdentity(const std::string& name, const LabelPairs& labels, std::string* out) {
  *out += name;
  for (const auto& [k, v] : labels) {
    *out += '\0';
    *out += k;
    *out += '\0';
    *out += v;
  }
}

std::string SeriesIdentity(const std::string& name, const LabelPairs& labels) {
  std::string out;
  AppendSeriesIdentity(name, labels, &out);
  return out;
}

bool ParseSeriesIdentity(std::string_view identity, std::string* name, LabelPairs* labels) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= identity.size(); ++i) {
    if (i == identity.size() || identity[i] == '\0') {
      parts.push_back(identity.substr(start, i - start));
      start = i + 1;
    }
  }
  if (parts.size() % 2 != 1) return false;
  name->assign(parts[0]);
  labels->clear();
  for (size_t i = 1; i + 1 < parts.size(); i += 2) {
    labels->emplace_back(std::string(parts[i]), std::string(parts[i + 1]));
  }
  return true;
}

}  // namespace ncclwatch::aggregator
