// TLS and mutual TLS for ncclwatch's gRPC channels (agent -> aggregator, CLI -> aggregator).
//
// Certificates and keys are read from files (Kubernetes Secrets mounted as volumes) when the
// credentials are made. Nothing read here is ever logged.
#ifndef NCCLWATCH_COMMON_RPC_TLS_H_
#define NCCLWATCH_COMMON_RPC_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace ncclwatch {

// The client side of a channel. With `enabled` false the channel is plaintext.
struct ClientTls {
  bool enabled = false;
  std::string ca_file;    // roots that sign the server's certificate; empty: the system's
  std::string cert_file;  // client certificate (mutual TLS); empty: none
  std::string key_file;   // its private key

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

// Plaintext credentials when TLS is off. NotFound / InvalidArgument (naming the file) when a file
// cannot be read or is empty, InvalidArgument for a certificate without its key or the reverse.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls);

// The whole content of a credential file; `what` names it in errors ("server key"). NotFound if
// it cannot be read, InvalidArgument if it is empty.
absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const char* what);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RPC_TLS_H_
