#include "common/log.h"

#include <string>

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

// The JSON line format: the fields in a fixed order, the message escaped so that any text (a
// quote, a newline, a control byte, bytes that are not UTF-8) stays one valid JSON string.
TEST(LogTest, JsonLinesEscapeTheMessageAndKeepUtf8) {
  SetLogComponent("agent");
  SetLogFormat(LogFormat::kJson);
  const std::string line =
      FormatLogLine(LogSeverity::kWarning, "say \"hi\"\\ \n\t\x01 5 \xc2\xb5s \xff end");
  SetLogFormat(LogFormat::kText);
  // {"time":"2026-11-29T12:34:56.789Z","level":...
  ASSERT_EQ(line.rfind("{\"time\":\"", 0), 0u) << line;
  EXPECT_EQ(line.substr(9 + 24, 19), "\",\"level\":\"warning\"") << line;
  EXPECT_NE(
      line.find("\"component\":\"agent\",\"message\":\"say \\\"hi\\\"\\\\ \\u000a\\u0009\\u0001 5 "
                "\xc2\xb5s \\ufffd end\"}"),
      std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(LogTest, FormatsParseByName) {
  LogFormat f;
  EXPECT_TRUE(ParseLogFormat("JSON", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("logfmt", &f));
  SetLogComponent("agent");
  const std::string text = FormatLogLine(LogSeverity::kInfo, "plain");
  EXPECT_EQ(text.substr(24), " I agent] plain") << text;  // after 2026-11-29T12:34:56.789Z
}

// Fields: a JSON line holds them as one object after the message, a text line appends name=value
// (quoted where a value would not read back as one token).
TEST(LogTest, FieldsFollowTheMessageInEitherFormat) {
  SetLogComponent("aggregator");
  const LogFields fields = {{"job_id", "train-42"}, {"node", "gpu node \"7\""}, {"kind", ""}};
  SetLogFormat(LogFormat::kJson);
  const std::string json = FormatLogLine(LogSeverity::kInfo, "found", fields);
  SetLogFormat(LogFormat::kText);
  EXPECT_NE(json.find("\"message\":\"found\",\"fields\":{\"job_id\":\"train-42\","
                      "\"node\":\"gpu node \\\"7\\\"\",\"kind\":\"\"}}"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.back(), '}');
  EXPECT_EQ(FormatLogLine(LogSeverity::kInfo, "found").find("fields"), std::string::npos);
  const std::string text = FormatLogLine(LogSeverity::kInfo, "found", fields);
  EXPECT_EQ(text.substr(24),
            " I aggregator] found job_id=train-42 node=\"gpu node \\\"7\\\"\" kind=\"\"")
      << text;
}

}  // namespace
}  // namespace ncclwatch
