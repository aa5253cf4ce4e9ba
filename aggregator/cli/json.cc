#include "aggregator/cli/json.h"

#include <cctype>
#include <cstdint>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"
#include "common/strings.h"
#include "google/protobuf/util/json_util.h"

namespace ncclwatch::cli {
namespace {

// The end of the JSON string literal that opens at json[begin] ('"'): the index after its closing
// quote (json.size() if unterminated).
size_t StringEnd(const std::string& json, size_t begin) {
  size_t i = begin + 1;
  while (i < json.size() && json[i] != '"') i += json[i] == '\\' ? 2 : 1;
  return std::min(i + 1, json.size());
}

// The unsigned decimal a JSON value holds, quoted (protobuf writes 64-bit integers as strings)
// or bare; false for anything else.
bool DecimalValue(std::string_view value, uint64_t* out) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    value = value.substr(1, value.size() - 2);
  }
  if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0]))) return false;
  return absl::SimpleAtoi(Av(value), out);
}

}  // namespace

std::string Rfc3339Utc(int64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%09dZ", buf, static_cast<int>(unix_ns % 1'000'000'000));
}

std::string ReadableJson(const std::string& json) {
  std::string out;
  out.reserve(json.size() + json.size() / 8);
  size_t i = 0;
  while (i < json.size()) {
    if (json[i] != '"') {
      out += json[i++];
      continue;
    }
    const size_t key_end = StringEnd(json, i);
    out.append(json, i, key_end - i);
    const bool is_key = key_end < json.size() && json[key_end] == ':';
    if (!is_key) {
      i = key_end;
      continue;
    }
    const std::string_view key(json.data() + i + 1, key_end - i - 2);
    // The value: a string literal, or everything up to the next ',', '}' or ']'.
    const size_t value_begin = key_end + 1;
    size_t value_end = value_begin;
    if (value_begin < json.size() && json[value_begin] == '"') {
      value_end = StringEnd(json, value_begin);
    } else {
      while (value_end < json.size() && json[value_end] != ',' && json[value_end] != '}' &&
             json[value_end] != ']' && json[value_end] != '{' && json[value_end] != '[') {
        ++value_end;
      }
    }
    const std::string_view value(json.data() + value_begin, value_end - value_begin);
    uint64_t number = 0;
    out += ':';
    if (absl::EndsWith(Av(key), "comm_hash") && DecimalValue(value, &number)) {
      out += absl::StrFormat("\"0x%016x\"", number);
    } else {
      out.append(value);
      const bool ns = absl::EndsWith(Av(key), "_unix_ns");
      if ((ns || absl::EndsWith(Av(key), "_unix_ms")) && DecimalValue(value, &number) &&
          number > 0) {
        const int64_t unix_ns = static_cast<int64_t>(ns ? number : number * 1'000'000);
        out += absl::StrFormat(",\"%s_utc\":\"%s\"", Av(key.substr(0, key.size() - 8)),
                               Rfc3339Utc(unix_ns));
      }
    }
    i = value_end;
  }
  return out;
}

std::string ProtoJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Every field, zeros included: rank 0 and a count of 0 are answers, not absences.
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return ReadableJson(json);
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  AppendJsonString(&out, s);
  return out + "\"";
}

}  // namespace ncclwatch::cli
