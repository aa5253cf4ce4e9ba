// Transport security between ncclwatch's daemons: TLS or mutual TLS on the agent -> aggregator
// channel, and an optional bearer token on top (for clusters whose identity is a Kubernetes
// service-account token rather than a client certificate).
//
// Certificates, keys and tokens are read from files (Kubernetes Secrets mounted as volumes). A
// token file is re-read at most every `kTokenRefresh`, so a rotated token is picked up without a
// restart. Nothing read here is ever logged.
#ifndef NCCLWATCH_PROTO_SECURITY_H_
#define NCCLWATCH_PROTO_SECURITY_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/sync.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"

namespace ncclwatch {

// The client side of a channel. With `enabled` false the channel is plaintext.
struct ClientTls {
  bool enabled = false;
  std::string ca_file;      // roots that sign the server's certificate; empty: the system's
  std::string cert_file;    // client certificate (mutual TLS); empty: none
  std::string key_file;     // its private key

  // As the daemons' and the CLI's flags give it: TLS when asked for, or when any file is named.
  static ClientTls FromFlags(bool tls, std::string ca_file, std::string cert_file,
                             std::string key_file) {
    const bool any = !ca_file.empty() || !cert_file.empty() || !key_file.empty();
    return {tls || any, std::move(ca_file), std::move(cert_file), std::move(key_file)};
  }
};

// The server side. With `cert_file` empty the port is plaintext; with `client_ca_file` set, a
// client must present a certificate signed by it (mutual TLS) or the handshake fails.
struct ServerTls {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls);

// A bearer token kept in a file.
class TokenFile {
 public:
  static constexpr absl::Duration kTokenRefresh = absl::Seconds(30);

  // Reads `path` once; fails if it cannot be read or holds no token. An empty `path` means no
  // token is configured: nullptr.
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
// it turns away. Without a token file it lets everything in.
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

#endif  // NCCLWATCH_PROTO_SECURITY_H_
