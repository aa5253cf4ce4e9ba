#include "plugin/offline_dump.h"

#include <sys/stat.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <filesystem>

#include "common/op_math.h"
#include "common/prom_text.h"
#include "proto/inspector.h"

namespace ncclwatch::plugin {
namespace {

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return std::string(buf, n < 0 ? 0 : std::min<size_t>(n, sizeof(buf) - 1));
}

// JSON string body (no quotes) with the characters JSON requires escaped.
std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += Format("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<OfflineDump> OfflineDump::Open(const std::string& dir, Identity identity,
                                               std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *error = "cannot create " + dir + ": " + ec.message();
    return nullptr;
  }
  std::string log_path =
      Format("%s/%s-pid%u.log", dir.c_str(), identity.host.c_str(), identity.pid);
  std::string prom_path = Format("%s/nccl_inspector_metrics_%s-pid%u.prom", dir.c_str(),
                                 GpuLabel(identity.cuda_device).c_str(), identity.pid);
  FILE* log = std::fopen(log_path.c_str(), "a");
  if (log == nullptr) {
    *error = "cannot open " + log_path + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<OfflineDump>(
      new OfflineDump(std::move(identity), std::move(log_path), std::move(prom_path), log));
}

OfflineDump::~OfflineDump() {
  if (log_ != nullptr) std::fclose(log_);
}

void OfflineDump::Submit(ncclwatch::v1::RankReport report) {
  if (!report.final()) UpdateMetrics(report);
}

void OfflineDump::OnOperation(const CommState& comm, const Completion& c, int64_t drained_unix_ns) {
  if (!c.timed) return;  // Inspector's records all carry an execution time
  uint64_t sn = c.p2p ? ++p2p_sn_[&comm] : 0;
  AppendOperation(comm.identity(), c,
                  MessageBytes(c.datatype != nullptr ? c.datatype : "", c.count), sn,
                  static_cast<uint64_t>(drained_unix_ns / 1000));
}

void OfflineDump::OnCommunicatorFinalized(const CommState& comm) {
  p2p_sn_.erase(&comm);
  ForgetCommunicator(comm.identity().comm_hash, comm.identity().rank);
  Flush();
}

void OfflineDump::AppendOperation(const CommIdentity& comm, const Completion& c, uint64_t bytes,
                                  uint64_t p2p_sn, uint64_t now_unix_us) {
  const char* op = c.func != nullptr ? c.func : "Invalid";
  // Inspector reports whole microseconds; bandwidth comes from the exact GPU duration.
  uint64_t exec_us = c.exec_ns / 1000;
  Bandwidth bw = ComputeBandwidth(op, comm.nranks, bytes, c.exec_ns);
  // Laid out by hand: clang-format would split the format strings in the middle of fields.
  // clang-format off
  std::string line = Format(
      "{\"header\":{\"id\":\"0x%" PRIx64 "\",\"comm_name\":\"%s\",\"rank\":%d,\"n_ranks\":%d,"
      "\"nnodes\":%d},",
      comm.comm_hash, JsonEscape(OrUnknown(comm.comm_name)).c_str(), comm.rank, comm.nranks,
      comm.n_nodes);
  line += Format(
      "\"metadata\":{\"inspector_output_format_version\":\"v4.0\",\"git_rev\":\"ncclwatch\","
      "\"rec_mechanism\":\"nccl_profiler_interface\",\"dump_timestamp_us\":%" PRIu64 ","
      "\"hostname\":\"%s\",\"pid\":%u},",
      now_unix_us, JsonEscape(identity_.host).c_str(), identity_.pid);
  if (c.p2p) {
    line += Format(
        "\"p2p_perf\":{\"p2p\":\"%s\",\"p2p_sn\":%" PRIu64 ",\"p2p_peer\":%d,"
        "\"p2p_msg_size_bytes\":%" PRIu64 ",\"p2p_exec_time_us\":%" PRIu64 ","
        "\"p2p_timing_source\":\"kernel_gpu\",\"p2p_algobw_gbs\":%lf,\"p2p_busbw_gbs\":%lf}}\n",
        op, p2p_sn, c.peer, bytes, exec_us, bw.alg_gbs, bw.bus_gbs);
  } else {
    line += Format(
        "\"coll_perf\":{\"coll\":\"%s\",\"coll_sn\":%" PRIu64 ",\"coll_msg_size_bytes\":%" PRIu64
        ",\"coll_exec_time_us\":%" PRIu64 ",\"coll_timing_source\":\"kernel_gpu\","
        "\"coll_algobw_gbs\":%lf,\"coll_busbw_gbs\":%lf}}\n",
        op, c.seq, bytes, exec_us, bw.alg_gbs, bw.bus_gbs);
  }
  // clang-format on
  std::fwrite(line.data(), 1, line.size(), log_);
}

void OfflineDump::UpdateMetrics(const ncclwatch::v1::RankReport& report) {
  const auto& id = report.identity();
  std::vector<Sample>& out = latest_[{id.comm_hash(), id.rank()}];
  out.clear();
  for (InspectorSample& sample : InspectorSamples(report)) {
    LabelPairs labels = InspectorJobLabels(identity_.slurm_job_id);
    labels.insert(labels.end(), {{"node", OrUnknown(identity_.host)},
                                 {"gpu", GpuLabel(identity_.cuda_device)},
                                 {"comm_name", OrUnknown(id.comm_name())}});
    labels.insert(labels.end(), sample.labels.begin(), sample.labels.end());
    // Render the label block once through the exposition writer: "name{...} value\n".
    PromTextWriter w;
    w.Sample("x", labels, 0);
    out.push_back({sample.name, w.text().substr(1, w.text().rfind(' ') - 1), sample.value});
  }
}

void OfflineDump::ForgetCommunicator(uint64_t comm_hash, int rank) {
  latest_.erase({comm_hash, rank});
}

void OfflineDump::Flush() {
  std::fflush(log_);
  std::string text;
  for (const InspectorFamily& family : kInspectorFamilies) {
    bool header = false;
    for (const auto& [key, samples] : latest_) {
      for (const Sample& s : samples) {
        if (s.family != family.name) continue;
        if (!header) {
          text += Format("# HELP %s %s\n# TYPE %s gauge\n", family.name, family.help, family.name);
          header = true;
        }
        text += Format("%s%s %.6g\n", family.name, s.labels.c_str(), s.value);
      }
    }
  }
  // Textfile collectors must never see a half-written file: write aside, then rename.
  std::string tmp = prom_path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;
  std::fwrite(text.data(), 1, text.size(), f);
  bool ok = std::fclose(f) == 0;
  if (ok) std::rename(tmp.c_str(), prom_path_.c_str());
}

}  // namespace ncclwatch::plugin
