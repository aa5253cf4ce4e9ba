// The JSON the CLI writes: string escaping, --json documents, and the Chrome trace parsed back with
// a strict reader (json_reader_test_util.h) to check its structure, not its spelling.
#include "aggregator/cli/json.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/cli/answers_test_util.h"
#include "aggregator/cli/chrome_trace.h"
#include "aggregator/cli/json_reader_test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::cli {
namespace {

TEST(JsonStringTest, QuotesAndEscapes) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("world"), "\"world\"");
  EXPECT_EQ(JsonString("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(JsonString("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(JsonString("\\\""), "\"\\\\\\\"\"");
}

TEST(JsonStringTest, ControlCharactersBecomeUnicodeEscapes) {
  EXPECT_EQ(JsonString("a\nb\tc\rd"), "\"a\\u000ab\\u0009c\\u000dd\"");
  EXPECT_EQ(JsonString(std::string("\0\x1f", 2)), "\"\\u0000\\u001f\"");
  // 0x20 and above (DEL and UTF-8 included) are copied as they are.
  EXPECT_EQ(JsonString(" ~\x7f"), "\" ~\x7f\"");
  EXPECT_EQ(JsonString("r\xc3\xa9seau"), "\"r\xc3\xa9seau\"");
  // A byte that is not UTF-8 (a truncated sequence, a lone continuation byte) would make the
  // document invalid: U+FFFD instead.
  EXPECT_EQ(JsonString("r\xc3 \x80 \xff"), "\"r\\ufffd \\ufffd \\ufffd\"");
}

TEST(JsonStringTest, ParsesBackToTheSameString) {
  const std::string tricky = "q\"b\\n\nt\tz\x01 end\xc3\xa9";
  const std::optional<Json> parsed = ParseJson(JsonString(tricky));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->type, Json::kString);
  EXPECT_EQ(parsed->string, tricky);
}

// The reader the trace tests rely on refuses what a JSON parser must refuse.
TEST(JsonStringTest, TheTestReaderIsStrict) {
  EXPECT_TRUE(ParseJson(" {\"a\":[1,-2.5e3,true,false,null,\"\\u00e9\\ud83d\\ude00\"]} \n"));
  EXPECT_EQ((*ParseJson("\"\\u00e9\\ud83d\\ude00\"")).string, "\xc3\xa9\xf0\x9f\x98\x80");
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "{\"a\":1,\"a\":2}", "\"a\nb\"", "\"\\x\"",
                          "01", "1.", "-", "[1] x", "{a:1}", "\"\\ude00\""}) {
    EXPECT_FALSE(ParseJson(bad)) << bad;
  }
}

TEST(ProtoJsonTest, OneLineWithProtoFieldNamesAndEveryFieldZerosIncluded) {
  ncclwatch::v1::ListCommsResponse comms;
  auto* c = comms.add_comms();
  c->set_job_id("job \"a\"");
  c->set_comm_hash(0xabc);
  c->add_ranks()->set_node("node-0");  // rank 0, all of its counters zero
  const std::string json = ProtoJson(comms);
  EXPECT_EQ(json.find('\n'), std::string::npos) << json;
  const std::optional<Json> root = ParseJson(json);
  ASSERT_TRUE(root.has_value()) << json;
  const Json& comm = (*root)["comms"].array.at(0);
  EXPECT_EQ(comm["job_id"].string, "job \"a\"");
  EXPECT_EQ(comm["comm_hash"].string, "0x0000000000000abc");  // as in the tables and labels
  EXPECT_EQ(comm["nranks"].type, Json::kNumber);              // zero, and still there
  const Json& rank = comm["ranks"].array.at(0);
  EXPECT_EQ(rank["rank"].type, Json::kNumber) << json;
  EXPECT_EQ(rank["rank"].number, 0);
  EXPECT_EQ(rank["node"].string, "node-0");
  EXPECT_EQ(ProtoJson(ncclwatch::v1::ListJobsResponse()), "{\"jobs\":[]}");
}

TEST(ReadableJsonTest, HashesInHexAndTimesAlsoInRfc3339Utc) {
  EXPECT_EQ(
      ReadableJson(R"({"comm_hash":"2748","parent_comm_hash":"1","x":"2748"})"),
      R"({"comm_hash":"0x0000000000000abc","parent_comm_hash":"0x0000000000000001","x":"2748"})");
  EXPECT_EQ(
      ReadableJson(R"({"time_unix_ns":"1795044979000000123","n":[1,2]})"),
      R"({"time_unix_ns":"1795044979000000123","time_utc":"2026-11-18T23:36:19.000000123Z","n":[1,2]})");
  EXPECT_EQ(ReadableJson(R"({"start_unix_ms":"1795044979001"})"),
            R"({"start_unix_ms":"1795044979001","start_utc":"2026-11-18T23:36:19.001000000Z"})");
  // Zero is "unknown", not 1970; keys inside string values are text, not keys.
  EXPECT_EQ(ReadableJson(R"({"since_unix_ns":"0","summary":"a "comm_hash":"5" b"})"),
            R"({"since_unix_ns":"0","summary":"a "comm_hash":"5" b"})");
  EXPECT_EQ(Rfc3339Utc(0), "1970-01-01T00:00:00.000000000Z");
}

// The parsed trace: metadata and complete events, by kind.
struct ParsedTrace {
  std::string display_time_unit;
  std::string process_name;
  std::map<int, std::string> thread_names;  // tid -> name
  std::map<int, int> sort_index;            // tid -> sort_index
  std::vector<Json> ops;                    // the "X" events, in order
};

ParsedTrace Parse(const std::string& json) {
  ParsedTrace out;
  const std::optional<Json> root = ParseJson(json);
  EXPECT_TRUE(root.has_value()) << json;
  if (!root.has_value()) return out;
  out.display_time_unit = (*root)["displayTimeUnit"].string;
  EXPECT_EQ((*root)["traceEvents"].type, Json::kArray);
  for (const Json& e : (*root)["traceEvents"].array) {
    EXPECT_EQ(e["pid"].number, 1);
    const std::string& ph = e["ph"].string;
    const std::string& name = e["name"].string;
    const Json& args = e["args"];
    EXPECT_EQ(args.type, Json::kObject) << name;
    if (ph == "M" && name == "process_name") {
      out.process_name = args["name"].string;
    } else if (ph == "M" && name == "thread_name") {
      const int tid = static_cast<int>(e["tid"].number);
      EXPECT_FALSE(out.thread_names.count(tid)) << "one thread per rank";
      out.thread_names[tid] = args["name"].string;
    } else if (ph == "M" && name == "thread_sort_index") {
      out.sort_index[static_cast<int>(e["tid"].number)] =
          static_cast<int>(args["sort_index"].number);
    } else {
      EXPECT_EQ(ph, "X") << name;
      out.ops.push_back(e);
    }
  }
  return out;
}

TEST(ChromeTraceTest, OneThreadPerRankWithMicrosecondsFromTheEarliestStart) {
  const std::string json = ChromeTrace(TwoRankTrace());
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.back(), '\n');
  const ParsedTrace t = Parse(json);
  EXPECT_EQ(t.display_time_unit, "ms");
  EXPECT_EQ(t.process_name, "job job-t, communicator world 0x00000000000000ab (2 ranks)");
  EXPECT_EQ(t.thread_names,
            (std::map<int, std::string>{{0, "rank 0  node-0 GPU0"}, {1, "rank 1  node-1 GPU1"}}));
  EXPECT_EQ(t.sort_index, (std::map<int, int>{{0, 0}, {1, 1}}));
  ASSERT_EQ(t.ops.size(), 3u);
  // In the answer's order: rank 1's two collectives, then rank 0's, the earliest (ts 0).
  const Json& a = t.ops[0];
  EXPECT_EQ(a["name"].string, "AllReduce");
  EXPECT_EQ(a["cat"].string, "nccl");
  EXPECT_EQ(a["tid"].number, 1);
  EXPECT_DOUBLE_EQ(a["ts"].number, 2.5);        // 5,002,500 ns - 5,000,000 ns
  EXPECT_DOUBLE_EQ(a["dur"].number, 1234.567);  // 1,234,567 ns
  EXPECT_EQ(a["args"]["seq"].number, 1);
  const Json& b = t.ops[1];
  EXPECT_EQ(b["name"].string, "AllGather");
  EXPECT_DOUBLE_EQ(b["ts"].number, 4000);
  EXPECT_DOUBLE_EQ(b["dur"].number, 0.5);
  EXPECT_EQ(b["args"]["seq"].number, 2);
  const Json& c = t.ops[2];
  EXPECT_EQ(c["tid"].number, 0);
  EXPECT_DOUBLE_EQ(c["ts"].number, 0);
  EXPECT_DOUBLE_EQ(c["dur"].number, 1237.067);
  // Both ranks' first collectives end together, as the aggregator aligned them.
  EXPECT_DOUBLE_EQ(a["ts"].number + a["dur"].number, c["ts"].number + c["dur"].number);
}

TEST(ChromeTraceTest, NamesAreEscaped) {
  ncclwatch::v1::GetTraceResponse trace = TwoRankTrace();
  trace.set_job_id("job \"x\"\\y");
  trace.set_comm_name("tab\there\nnewline");
  trace.mutable_ranks(0)->set_node("node\"1");
  trace.mutable_ranks(0)->mutable_ops(0)->set_op("All\"Reduce");
  const ParsedTrace t = Parse(ChromeTrace(trace));
  EXPECT_EQ(t.process_name,
            "job job \"x\"\\y, communicator tab\there\nnewline 0x00000000000000ab (2 ranks)");
  EXPECT_EQ(t.thread_names.at(1), "rank 1  node\"1 GPU1");
  ASSERT_EQ(t.ops.size(), 3u);
  EXPECT_EQ(t.ops[0]["name"].string, "All\"Reduce");
}

TEST(ChromeTraceTest, ATraceWithoutCollectivesIsStillValid) {
  ncclwatch::v1::GetTraceResponse empty;
  empty.set_job_id("j");
  empty.set_comm_name("world");
  const ParsedTrace t = Parse(ChromeTrace(empty));
  EXPECT_EQ(t.process_name, "job j, communicator world 0x0000000000000000 (0 ranks)");
  EXPECT_TRUE(t.thread_names.empty());
  EXPECT_TRUE(t.ops.empty());

  // A rank with no sampled collective still gets its track.
  empty.add_ranks()->set_rank(3);
  const ParsedTrace one = Parse(ChromeTrace(empty));
  EXPECT_EQ(one.thread_names, (std::map<int, std::string>{{3, "rank 3   GPU0"}}));
  EXPECT_TRUE(one.ops.empty());
}

}  // namespace
}  // namespace ncclwatch::cli
