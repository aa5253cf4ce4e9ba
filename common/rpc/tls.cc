#include "proto/security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ncclwatch {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the ", what, " file ", path));
  std::stringstream data;
  data << in.rdbuf();
  if (data.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " file ", path, " is empty"));
  }
  return data.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadWhole(tls.ca_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs its key, and a key its certificate");
  }
  if (!tls.cert_file.empty()) {
    auto cert = ReadWhole(tls.cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadWhole(tls.key_file, "client key");
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
  auto cert = ReadWhole(tls.cert_file, "server certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadWhole(tls.key_file, "server key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!tls.client_ca_file.empty()) {
    auto ca = ReadWhole(tls.client_ca_file, "client CA certificate");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(std::string path) {
  if (path.empty()) return nullptr;
  std::unique_ptr<TokenFile> file(new TokenFile(std::move(path)));
  auto token = file->Read();
  if (!token.ok()) return token.status();
  ncclwatch::MutexLock lock(&file->mu_);
  file->token_ = *std::move(token);
  file->read_at_ = absl::Now();
  return file;
}

absl::StatusOr<std::string> TokenFile::Read() const {
  auto data = ReadWhole(path_, "token");
  if (!data.ok()) return data.status();
  std::string token(absl::StripAsciiWhitespace(*data));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("the token file ", path_, " is blank"));
  return token;
}

std::string TokenFile::Get() {
  ncclwatch::MutexLock lock(&mu_);
  if (absl::Now() - read_at_ >= kTokenRefresh) {
    read_at_ = absl::Now();
    if (auto token = Read(); token.ok()) token_ = *std::move(token);
  }
  return token_;
}

bool BearerGate::Admits(std::string_view authorization) const {
  if (token_ == nullptr) return true;
  const std::string token = token_->Get();
  constexpr std::string_view kPrefix = "Bearer ";
  bool match = authorization.size() == kPrefix.size() + token.size() &&
               authorization.substr(0, kPrefix.size()) == kPrefix;
  if (match) {
    // Compare every byte, whatever the first difference: no timing hint at the token.
    unsigned char diff = 0;
    for (size_t i = 0; i < token.size(); ++i) {
      diff |= static_cast<unsigned char>(authorization[kPrefix.size() + i] ^ token[i]);
    }
    match = diff == 0;
  }
  if (!match && refused_ != nullptr) refused_->Increment();
  return match;
}

bool BearerGate::Admits(const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  return Admits(it == metadata.end() ? std::string_view()
                                     : std::string_view(it->second.data(), it->second.size()));
}

}  // namespace ncclwatch
