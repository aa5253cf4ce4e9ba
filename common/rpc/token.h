// Bearer tokens: the optional shared secret an agent sends to push batches and a client sends to
// query (for clusters whose identity is a Kubernetes service-account token rather than a client
// certificate). Tokens are read from files (Secrets mounted as volumes) and never logged.
#ifndef NCCLWATCH_COMMON_RPC_TOKEN_H_
#define NCCLWATCH_COMMON_RPC_TOKEN_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/sync.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace ncclwatch {

// A bearer token kept in a file, re-read at most every `kTokenRefresh` so that a rotated token is
// picked up without a restart. Thread-safe.
class TokenFile {
 public:
  static constexpr absl::Duration kTokenRefresh = absl::Seconds(30);

  // Reads `path` once; NotFound if it cannot be read, InvalidArgument if it holds no token. An
  // empty `path` means no token is configured: nullptr.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(std::string path);

  // The current token (surrounding whitespace removed). If a re-read fails, the last good token
  // stays in use.
  std::string Get();

 private:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}
  absl::StatusOr<std::string> Read() const;

  const std::string path_;
  ncclwatch::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  absl::Time read_at_ ABSL_GUARDED_BY(mu_);
};

// Lets in what carries `authorization: Bearer <token>` (compared in constant time) and counts what
// it turns away. Without a token file it lets everything in. Thread-safe.
class BearerGate {
 public:
  // `token` and `refused` may be null; both outlive the gate.
  BearerGate(TokenFile* token, Counter* refused) : token_(token), refused_(refused) {}
  // An HTTP request's `Authorization` header value.
  bool Admits(std::string_view authorization) const;
  // A gRPC call's `authorization` metadata.
  bool Admits(const grpc::ServerContextBase& context) const;

 private:
  TokenFile* token_;
  Counter* refused_;
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_TOKEN_H_
