#include "common/rpc/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ncclwatch {

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the ", what, " file ", path));
  std::stringstream data;
  data << in.rdbuf();
  if (data.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " file ", path, " is empty"));
  }
  return data.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadCredentialFile(tls.ca_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its certificate");
  }
  if (!tls.cert_file.empty()) {
    auto cert = ReadCredentialFile(tls.cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadCredentialFile(tls.key_file, "client key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls) {
  if (tls.cert_file.empty()) {
    if (!tls.key_file.empty() || !tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "a TLS key or client CA was given without the server certificate");
    }
    return grpc::InsecureServerCredentials();
  }
  auto cert = ReadCredentialFile(tls.cert_file, "server certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadCredentialFile(tls.key_file, "server key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!tls.client_ca_file.empty()) {
    auto ca = ReadCredentialFile(tls.client_ca_file, "client CA certificate");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace ncclwatch
