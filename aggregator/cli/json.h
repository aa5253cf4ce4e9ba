// JSON as `ncclwatch --json` and `ncclwatch trace` write it. Pure functions; thread-safe.
#ifndef NCCLWATCH_AGGREGATOR_CLI_JSON_H_
#define NCCLWATCH_AGGREGATOR_CLI_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "google/protobuf/message.h"

namespace ncclwatch::cli {

// `message` as protobuf's canonical JSON on one line, with the .proto field names (job_id, not
// jobId), every field included (zeros, empty strings and false too: rank 0 is an answer), made
// readable by ReadableJson, without a trailing newline. Should the conversion fail (it does not
// for the Query API's messages), whatever protobuf produced is returned, possibly "".
std::string ProtoJson(const google::protobuf::Message& message);

// Protobuf JSON of the Query API made to match the tables and labels: every "...comm_hash" value
// in hex ("0x" + 16 digits, as in /federate's labels) instead of decimal, and after every nonzero
// "<x>_unix_ns" or "<x>_unix_ms" a "<x>_utc" key with the same instant in RFC 3339 UTC with
// nanoseconds. Other text is copied as it is.
std::string ReadableJson(const std::string& json);

// `unix_ns` as RFC 3339 in UTC with nanoseconds, e.g. "2026-11-24T23:36:19.000000123Z".
std::string Rfc3339Utc(int64_t unix_ns);

// `s` as a JSON string literal, quotes included (common/json_string.h: bytes that are not UTF-8
// become U+FFFD).
std::string JsonString(std::string_view s);

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_JSON_H_
