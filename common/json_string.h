// JSON string text for writers that build JSON by hand (log lines, the CLI's traces).
#ifndef NCCLWATCH_COMMON_JSON_STRING_H_
#define NCCLWATCH_COMMON_JSON_STRING_H_

#include <string>
#include <string_view>

namespace ncclwatch {

// Appends `text` as the inside of a JSON string (no quotes around it): '"' and '\' escaped,
// control characters as \u00XX, valid UTF-8 as it is, and any other byte (text may quote what a
// client sent) as U+FFFD, so that the result is always valid JSON.
void AppendJsonString(std::string* out, std::string_view text);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_JSON_STRING_H_
