#include "aggregator/server/remote_write.h"

#include <atomic>
#include <thread>

#include "aggregator/store/store_keys.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "snappy.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

TEST(RemoteWriteUrlTest, ParsesHttpAndRefusesWhatItCannotDo) {
  auto t = ParseRemoteWriteUrl("http://mimir.monitoring:8080/api/v1/push");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->host, "mimir.monitoring");
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->path, "/api/v1/push");
  EXPECT_EQ(ParseRemoteWriteUrl("http://prom/api/v1/write")->port, 80);
  EXPECT_NE(ParseRemoteWriteUrl("https://x/y").status().message().find("https is not supported"),
            std::string::npos);
  EXPECT_FALSE(ParseRemoteWriteUrl("prom:9090/api/v1/write").ok());
  EXPECT_FALSE(ParseRemoteWriteUrl("http://prom:99999/").ok());
  EXPECT_FALSE(ParseRemoteWriteUrl("http://:9090/").ok());
}

TEST(RemoteWriteSamplesTest, SendsOnlyNewerSamplesWithSortedLabelsAndTheName) {
  std::vector<SeriesPoint> samples = {
      {"ncclwatch_straggler", {{"rank", "5"}, {"job_id", "j"}}, 1.0, 2'000},
      {"ncclwatch_straggler", {{"rank", "4"}, {"job_id", "j"}}, 0.0, 2'000},
  };
  std::map<std::string, int64_t> sent = {
      {SeriesIdentity("ncclwatch_straggler", {{"rank", "4"}, {"job_id", "j"}}), 2'000}};
  auto pending = NewSamples(samples, sent);
  ASSERT_EQ(pending.size(), 1u);
  const auto& ts = pending[0].series;
  ASSERT_EQ(ts.labels_size(), 3);
  EXPECT_EQ(ts.labels(0).name(), "__name__");
  EXPECT_EQ(ts.labels(0).value(), "ncclwatch_straggler");
  EXPECT_EQ(ts.labels(1).name(), "job_id");
  EXPECT_EQ(ts.labels(2).name(), "rank");
  ASSERT_EQ(ts.samples_size(), 1);
  EXPECT_EQ(ts.samples(0).timestamp(), 2'000);
  EXPECT_EQ(ts.samples(0).value(), 1.0);
}

// A receiver that decodes what it gets and can be told to fail.
class FakeReceiver {
 public:
  FakeReceiver() {
    server_.Post("/api/v1/write", [this](const httplib::Request& req, httplib::Response& res) {
      std::string raw;
      ncclwatch::remotewrite::WriteRequest w;
      if (req.get_header_value("Content-Encoding") != "snappy" ||
          !snappy::Uncompress(req.body.data(), req.body.size(), &raw) || !w.ParseFromString(raw)) {
        res.status = 400;
        return;
      }
      if (fail_) {
        res.status = 503;
        return;
      }
      received_ += w.timeseries_size();
    });
    port_ = server_.bind_to_any_port("127.0.0.1");  // listening: connections wait in the backlog
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeReceiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::atomic<bool> fail_{false};
  std::atomic<int> received_{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(RemoteWriterTest, ASeriesNotDeliveredGoesOutAgainAfterAFailure) {
  FakeReceiver receiver;
  MetricRegistry metrics;
  RemoteWriter writer({"127.0.0.1", receiver.port(), "/api/v1/write"}, metrics);
  std::vector<SeriesPoint> samples = {{"a", {{"x", "1"}}, 1, 1'000}, {"b", {}, 2, 1'000}};
  receiver.fail_ = true;
  absl::Status failed = writer.Send(samples);
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("HTTP 503"), std::string::npos) << failed;
  receiver.fail_ = false;
  ASSERT_THAT(writer.Send(samples), IsOk());
  EXPECT_EQ(receiver.received_, 2);
  ASSERT_THAT(writer.Send(samples), IsOk());  // nothing new: nothing sent
  EXPECT_EQ(receiver.received_, 2);
  samples[0].time_ms = 2'000;
  ASSERT_THAT(writer.Send(samples), IsOk());
  EXPECT_EQ(receiver.received_, 3);
}

}  // namespace
}  // namespace ncclwatch::aggregator
