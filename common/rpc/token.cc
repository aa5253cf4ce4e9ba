#include "common/rpc/token.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/tls.h"
#include "grpcpp/server_context.h"

namespace ncclwatch {

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
  auto data = ReadCredentialFile(path_, "token");
  if (!data.ok()) return data.status();
  std::string token(absl::StripAsciiWhitespace(*data));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("the token file ", path_, " is blank"));
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
