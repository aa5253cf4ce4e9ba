// JSON as `ncclwatch --json` and `ncclwatch trace` write it. Pure functions; thread-safe.
#ifndef NCCLWATCH_AGGREGATOR_CLI_JSON_H_
#define NCCLWATCH_AGGREGATOR_CLI_JSON_H_

#include <string>
#include <string_view>

#include "google/protobuf/message.h"

namespace ncclwatch::cli {

// `message` as protobuf's canonical JSON on one line, with the .proto field names (job_id, not
// jobId), without a trailing newline. Should the conversion fail (it does not for the Query API's
// messages), whatever protobuf produced is returned, possibly "".
std::string ProtoJson(const google::protobuf::Message& message);

// `s` as a JSON string literal, quotes included: '"' and '\' are escaped with a backslash, bytes
// below 0x20 as \u00XX; every other byte (UTF-8 included) is copied as it is.
std::string JsonString(std::string_view s);

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_JSON_H_
