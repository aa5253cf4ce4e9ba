#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/rpc/backoff.h"
#include "common/rpc/tls.h"
#include "common/rpc/token.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

using ::ncclwatch::testutil::IsOk;

TEST(BackoffTest, DoublesWithJitterUpToTheCapAndStartsOverAfterReset) {
  Backoff backoff(std::chrono::milliseconds(100), std::chrono::milliseconds(1000), /*seed=*/7);
  const int64_t ceilings[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (int64_t ceiling : ceilings) {
    const int64_t wait = backoff.NextDelay().count();
    EXPECT_GE(wait, ceiling / 2);
    EXPECT_LE(wait, ceiling);
  }
  backoff.Reset();
  const int64_t wait = backoff.NextDelay().count();
  EXPECT_GE(wait, 50);
  EXPECT_LE(wait, 100);
}

TEST(BackoffTest, SpreadsClientsThatFailedTogether) {
  // Two clients seeded differently do not retry in lockstep: over a few rounds their waits differ.
  Backoff a(std::chrono::milliseconds(1000), std::chrono::milliseconds(1000), 1);
  Backoff b(std::chrono::milliseconds(1000), std::chrono::milliseconds(1000), 2);
  int differ = 0;
  for (int i = 0; i < 8; ++i) differ += a.NextDelay() != b.NextDelay() ? 1 : 0;
  EXPECT_GT(differ, 0);
}

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/ncclwatch-rpc-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }
  std::string dir_;
};

using TokenFileTest = FileTest;

TEST_F(TokenFileTest, NoPathMeansNoToken) {
  auto token = TokenFile::Open("");
  ASSERT_THAT(token, IsOk());
  EXPECT_EQ(*token, nullptr);
}

TEST_F(TokenFileTest, MissingAndBlankFilesAreRefusedWithTheirReason) {
  EXPECT_EQ(TokenFile::Open(dir_ + "/absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(TokenFile::Open(Write("empty", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto blank = TokenFile::Open(Write("blank", " \n\t\n"));
  EXPECT_EQ(blank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(blank.status().message().find("blank"), std::string::npos);
}

TEST_F(TokenFileTest, SurroundingWhitespaceIsNotPartOfTheToken) {
  auto token = TokenFile::Open(Write("token", "  s3cret\n"));
  ASSERT_THAT(token, IsOk());
  EXPECT_EQ((*token)->Get(), "s3cret");
}

TEST_F(TokenFileTest, TheGateAdmitsOnlyTheExactBearerTokenAndCountsRefusals) {
  auto token = TokenFile::Open(Write("token", "s3cret"));
  ASSERT_THAT(token, IsOk());
  Counter refused;
  BearerGate gate(token->get(), &refused);
  EXPECT_TRUE(gate.Admits("Bearer s3cret"));
  EXPECT_FALSE(gate.Admits("Bearer s3cre"));
  EXPECT_FALSE(gate.Admits("Bearer s3cret2"));
  EXPECT_FALSE(gate.Admits("bearer s3cret"));
  EXPECT_FALSE(gate.Admits("s3cret"));
  EXPECT_FALSE(gate.Admits(""));
  EXPECT_EQ(refused.value(), 5u);
}

TEST(BearerGateTest, WithoutATokenEverythingIsAdmitted) {
  Counter refused;
  BearerGate gate(nullptr, &refused);
  EXPECT_TRUE(gate.Admits(""));
  EXPECT_TRUE(gate.Admits("Bearer anything"));
  EXPECT_EQ(refused.value(), 0u);
}

using TlsTest = FileTest;

TEST_F(TlsTest, PlaintextUnlessAskedFor) {
  EXPECT_FALSE(ClientTls::FromFlags(false, "", "", "").enabled);
  EXPECT_TRUE(ClientTls::FromFlags(true, "", "", "").enabled);
  EXPECT_TRUE(ClientTls::FromFlags(false, "ca.pem", "", "").enabled);
  EXPECT_THAT(MakeChannelCredentials(ClientTls{}), IsOk());
  EXPECT_THAT(MakeServerCredentials(ServerTls{}), IsOk());
}

TEST_F(TlsTest, HalfAKeyPairOrAnUnreadableFileIsAClearError) {
  const std::string pem = Write("cert.pem", "not really a certificate");
  ClientTls client{true, "", pem, ""};
  EXPECT_EQ(MakeChannelCredentials(client).status().code(), absl::StatusCode::kInvalidArgument);
  client = ClientTls{true, dir_ + "/absent-ca.pem", "", ""};
  auto missing = MakeChannelCredentials(client);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent-ca.pem"), std::string::npos);
  EXPECT_EQ(MakeServerCredentials(ServerTls{"", pem, ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeServerCredentials(ServerTls{pem, dir_ + "/absent.key", ""}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ncclwatch
