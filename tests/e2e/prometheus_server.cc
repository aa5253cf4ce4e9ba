// See prometheus_server.h.
#include "tests/e2e/prometheus_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "httplib.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

Prometheus::Prometheus(const std::string& dir, const std::string& scrape_configs)
    : port_(FreePort()) {
  const std::string config = dir + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << scrape_configs;
  process_ = std::make_unique<Process>(
      std::vector<std::string>{"prometheus", "--config.file=" + config,
                               "--storage.tsdb.path=" + dir + "/prometheus-data",
                               "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                               "--web.enable-remote-write-receiver", "--log.level=warn"},
      std::map<std::string, std::string>{}, dir + "/prometheus.log");
}

bool Prometheus::WaitReady() {
  return PollUntil(
      [&] {
        httplib::Client c("127.0.0.1", port_);
        auto res = c.Get("/-/ready");
        return res && res->status == 200;
      },
      30, 200);
}

std::vector<Series> Prometheus::Query(const std::string& expr) {
  httplib::Client c("127.0.0.1", port_);
  auto res = c.Get(("/api/v1/query?query=" + httplib::detail::encode_query_param(expr)).c_str());
  std::vector<Series> out;
  google::protobuf::Struct doc;
  if (!res || res->status != 200 ||
      !google::protobuf::util::JsonStringToMessage(res->body, &doc).ok()) {
    return out;
  }
  const auto& result = doc.fields().at("data").struct_value().fields().at("result");
  for (const auto& item : result.list_value().values()) {
    Series s;
    for (const auto& [k, v] : item.struct_value().fields().at("metric").struct_value().fields()) {
      s.labels[k] = v.string_value();
    }
    const auto& value = item.struct_value().fields().at("value").list_value();
    s.value = std::stod(value.values(1).string_value());
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::map<std::string, std::string>> Prometheus::Alerts(
    const std::map<std::string, std::string>& labels) {
  httplib::Client c("127.0.0.1", port_);
  auto res = c.Get("/api/v1/alerts");
  std::vector<std::map<std::string, std::string>> out;
  google::protobuf::Struct doc;
  if (!res || res->status != 200 ||
      !google::protobuf::util::JsonStringToMessage(res->body, &doc).ok()) {
    return out;
  }
  const auto& alerts = doc.fields().at("data").struct_value().fields().at("alerts");
  for (const auto& item : alerts.list_value().values()) {
    const auto& fields = item.struct_value().fields();
    std::map<std::string, std::string> alert;
    for (const auto& [k, v] : fields.at("labels").struct_value().fields()) {
      alert[k] = v.string_value();
    }
    for (const auto& [k, v] : fields.at("annotations").struct_value().fields()) {
      alert["annotation:" + k] = v.string_value();
    }
    if (fields.count("state")) alert["state"] = fields.at("state").string_value();
    const bool matches = std::all_of(labels.begin(), labels.end(), [&](const auto& kv) {
      auto it = alert.find(kv.first);
      return it != alert.end() && it->second == kv.second;
    });
    if (matches) out.push_back(std::move(alert));
  }
  return out;
}

std::vector<Series> Prometheus::WaitFor(const std::string& expr, size_t n, double timeout_s) {
  std::vector<Series> last;
  PollUntil(
      [&] {
        last = Query(expr);
        return last.size() == n;
      },
      timeout_s, 200);
  return last.size() == n ? last : std::vector<Series>{};
}

}  // namespace ncclwatch::testing
