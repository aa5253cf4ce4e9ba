// Stand-ins shared by the agent's tests: a temporary directory, the kubelet's pod-resources
// service and an aggregator that keeps what it is sent, each serving on a real socket.
#ifndef NCCLWATCH_AGENT_AGENT_TEST_UTIL_H_
#define NCCLWATCH_AGENT_AGENT_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "k8s/podresources_v1.grpc.pb.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"

namespace ncclwatch::agent {

// A fresh directory under /tmp, removed with everything in it at destruction; empty path if it
// could not be made.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ncclwatch-agent-test-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The kubelet's side of the API, answering what the test last told it to. Fault switches:
// FailNext (answer the next call with an error) and Hang (hold every call until released).
class FakeKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  ~FakeKubelet() {
    Release();
    if (server_) server_->Shutdown();
  }
  // Serves on the unix socket `path`; false if it cannot.
  bool Serve(const std::string& path) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }

  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* response) override {
    if (hang_) {
      arrived_.Notify();
      release_.WaitForNotificationWithTimeout(absl::Seconds(60));
    }
    ncclwatch::MutexLock lock(&mu_);
    ++calls_;
    if (fail_next_ != grpc::StatusCode::OK) {
      grpc::Status status(fail_next_, "injected");
      fail_next_ = grpc::StatusCode::OK;
      return status;
    }
    *response = answer_;
    return grpc::Status::OK;
  }

  void SetAnswer(::v1::ListPodResourcesResponse answer) {
    ncclwatch::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  void FailNext(grpc::StatusCode code) {
    ncclwatch::MutexLock lock(&mu_);
    fail_next_ = code;
  }
  int calls() {
    ncclwatch::MutexLock lock(&mu_);
    return calls_;
  }
  // Before the server starts.
  void Hang() { hang_ = true; }
  ncclwatch::Notification& arrived() { return arrived_; }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 private:
  bool hang_ = false;
  ncclwatch::Notification arrived_;  // a call is being held
  ncclwatch::Notification release_;
  ncclwatch::Mutex mu_;
  ::v1::ListPodResourcesResponse answer_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode fail_next_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<grpc::Server> server_;  // last: shut down before the rest goes
};

// Acknowledges and keeps every batch, decoded as the aggregator decodes them.
class StandInAggregator final : public ncclwatch::v1::Ingest::CallbackService {
 public:
  ~StandInAggregator() {
    if (server_) server_->Shutdown();
  }
  // Serves on a free loopback port; returns its host:port, empty if it cannot.
  std::string Serve() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && port != 0 ? "127.0.0.1:" + std::to_string(port) : "";
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const ncclwatch::v1::NodeBatch* batch,
                                 ncclwatch::v1::BatchAck* ack) override {
    {
      ncclwatch::MutexLock lock(&mu);
      batches.push_back(*batch);
    }
    ack->set_batch_seq(batch->batch_seq());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  ncclwatch::Mutex mu;
  std::vector<ncclwatch::v1::NodeBatch> batches ABSL_GUARDED_BY(mu);

 private:
  std::unique_ptr<grpc::Server> server_;
};

// Adds a pod with one container and returns the container, for adding devices to.
inline ::v1::ContainerResources* AddPod(::v1::ListPodResourcesResponse* answer,
                                        const std::string& ns, const std::string& pod,
                                        const std::string& container) {
  ::v1::PodResources* p = answer->add_pod_resources();
  p->set_namespace_(ns);
  p->set_name(pod);
  ::v1::ContainerResources* c = p->add_containers();
  c->set_name(container);
  return c;
}

inline void AddDevices(::v1::ContainerResources* container, const std::string& resource,
                       std::initializer_list<const char*> ids) {
  ::v1::ContainerDevices* d = container->add_devices();
  d->set_resource_name(resource);
  for (const char* id : ids) d->add_device_ids(id);
}

// Sends one report over the plugin socket `address` that names `gpu`, has job id `job`, and
// claims to come from pod prod-ns/victim-pod-0; returns the agent's summary of the stream.
inline ncclwatch::v1::StreamSummary SendClaimingReport(const std::string& address,
                                                       const std::string& gpu,
                                                       const std::string& job) {
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  ncclwatch::v1::RankReport r;
  r.set_report_id(1);
  auto* id = r.mutable_identity();
  id->set_job_id(job);
  id->set_gpu_uuid(gpu);
  id->set_comm_hash(0xabc);
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  id->set_pod("victim-pod-0");
  id->set_pod_namespace("prod-ns");
  r.set_interval_start_unix_ns(1'700'000'000'000'000'000);
  r.set_interval_end_unix_ns(1'700'000'001'000'000'000);
  EXPECT_TRUE(writer->Write(r));
  writer->WritesDone();
  EXPECT_TRUE(writer->Finish().ok());
  return summary;
}

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_TEST_UTIL_H_
