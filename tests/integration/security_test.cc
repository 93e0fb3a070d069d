// TLS on the public API, mutual TLS between router and workers, bearer
// tokens: only a client with the CA and the token gets answers, failures
// carry the right codes (and a plaintext client a hint at TLS), health
// stays plaintext and open, a worker without a certificate the router
// trusts never joins (each side says why, the router once per peer), and a
// worker whose key is not its certificate's does not start.
#include <grpcpp/generic/generic_stub.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "proto/credentials.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/test_certs.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using testing::LocalCluster;

constexpr char kToken[] = "s3cret-token-for-tests";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("certs_"));
    auto certs = testing::MakeTestCerts(*dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new testing::TestCerts(*certs);
    std::ofstream(*dir_ + "/tokens") << "\n  old-token-still-valid \n"
                                     << kToken << "\n";
    std::ofstream(*dir_ + "/client_token") << kToken << "\n";
    cluster_ = new LocalCluster();
    LocalCluster::Options o = SecureOptions();
    o.client = Client(certs_->ca, kToken);
    const absl::Status s = cluster_->Start(o);
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete certs_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static LocalCluster::Options SecureOptions() {
    LocalCluster::Options o;
    o.model_args = {"--synthetic", "--hidden=32", "--inter=16", "--experts=4",
                    "--top-k=2"};
    o.workers = 1;
    o.worker_port = true;
    o.health_port = true;
    o.router_args = {
        "--tls-cert=" + certs_->server_cert, "--tls-key=" + certs_->server_key,
        "--tls-ca=" + certs_->ca, "--auth-token-file=" + *dir_ + "/tokens"};
    o.worker_args = {"--tls-ca=" + certs_->ca,
                     "--tls-cert=" + certs_->client_cert,
                     "--tls-key=" + certs_->client_key};
    return o;
  }
  static ClientOptions Client(const std::string& ca, const std::string& token) {
    ClientOptions c;
    c.credentials = *MakeChannelCredentials({"", "", ca});
    c.auth_token = token;
    return c;
  }
  static absl::Status Call(ClientOptions c) {
    c.target = cluster_->target();
    MoeClient client(c);
    std::vector<float> x(2 * 32, 0.5f);
    ForwardOptions fo;
    fo.timeout = std::chrono::seconds(10);
    return client.Forward(0, x.data(), 2, 32, fo).status();
  }

  static std::string* dir_;
  static testing::TestCerts* certs_;
  static LocalCluster* cluster_;
};
std::string* SecurityTest::dir_ = nullptr;
testing::TestCerts* SecurityTest::certs_ = nullptr;
LocalCluster* SecurityTest::cluster_ = nullptr;

TEST_F(SecurityTest, ClientWithCaAndTokenIsAnswered) {
  EXPECT_TRUE(Call(Client(certs_->ca, kToken)).ok());
  EXPECT_TRUE(
      Call(Client(certs_->ca, "old-token-still-valid")).ok());  // rotation
  EXPECT_TRUE(cluster_->client().GetModelInfo().ok());
  // The admin call too (one worker: a placement of its experts).
  auto r = cluster_->client().Rebalance();
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Call(Client(certs_->ca, kToken)).ok());
}

TEST_F(SecurityTest, PlaintextClientIsRefused) {
  ClientOptions plain;
  plain.auth_token = kToken;
  const absl::Status s = Call(plain);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  // gRPC says only "Socket closed"; the client adds what that means here.
  EXPECT_NE(s.message().find("may want TLS; pass --tls-ca"), std::string::npos)
      << s;
}

TEST_F(SecurityTest, UntrustedServerCertificateIsRefused) {
  const absl::Status s = Call(Client(certs_->rogue_ca, kToken));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message().find("--tls-ca"), std::string::npos) << s;  // TLS on
}

TEST_F(SecurityTest, MissingOrWrongTokenIsUnauthenticated) {
  const absl::Status missing = Call(Client(certs_->ca, ""));
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(missing.message().find("authorization"), std::string::npos);
  EXPECT_EQ(Call(Client(certs_->ca, "not-the-token")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Call(Client(certs_->ca, std::string(kToken) + "x")).code(),
            absl::StatusCode::kUnauthenticated);
  ClientOptions c = Client(certs_->ca, "");
  c.target = cluster_->target();
  MoeClient client(c);
  EXPECT_EQ(client.GetModelInfo().status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client.GetExpertStats(0, false).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client.Rebalance().status().code(),
            absl::StatusCode::kUnauthenticated);
  grpc::ClientContext ctx;
  client.Prepare(&ctx, std::chrono::seconds(10));
  auto stream = client.stub()->ForwardStream(&ctx);
  moe::v1::ForwardResponse resp;
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, HealthIsPlaintextAndExempt) {
  ClientOptions h;
  h.target = absl::StrCat("127.0.0.1:", cluster_->health_port());
  MoeClient client(h);
  auto serving = client.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  // Over TLS on the public port, health needs no token either.
  auto tls = Client(certs_->ca, "");
  tls.target = cluster_->target();
  MoeClient tls_client(tls);
  auto tls_health = tls_client.Health();
  ASSERT_TRUE(tls_health.ok()) << tls_health.status();
  EXPECT_TRUE(*tls_health);
}

// Server reflection's method, called as a unary call with an empty
// request: UNIMPLEMENTED where reflection is not served.
grpc::StatusCode ReflectionCode(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  return status.error_code();
}

// With TLS on the public port: the plain-text probe port answers health
// and nothing else (reflection is UNIMPLEMENTED there).
TEST_F(SecurityTest, HealthPortServesOnlyHealth) {
  const grpc::StatusCode health = ReflectionCode(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", cluster_->health_port()),
                          grpc::InsecureChannelCredentials()));
  EXPECT_EQ(health, grpc::StatusCode::UNIMPLEMENTED);
  // The public port still serves reflection (whatever it answers to an
  // empty request, it is not UNIMPLEMENTED).
  const grpc::StatusCode pub = ReflectionCode(grpc::CreateChannel(
      cluster_->target(), *MakeChannelCredentials({"", "", certs_->ca})));
  EXPECT_NE(pub, grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(SecurityTest, MismatchedCertificateAndKeyAreReportedAsSuch) {
  testing::CommandResult r = testing::RunCommand(
      {testing::RouterBinary(), "--synthetic", "--hidden=32", "--inter=16",
       "--experts=4", "--top-k=2", "--num-workers=0", "--listen=127.0.0.1:0",
       "--tls-cert=" + certs_->server_cert, "--tls-key=" + certs_->client_key},
      std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("does not match --tls-cert"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("cannot listen"), std::string::npos) << r.output;
}

// The worker checks its pair at start too, as a usage error (2), rather
// than retrying forever with gRPC's "Invalid private key".
TEST_F(SecurityTest, WorkerWithMismatchedKeyExitsAtStart) {
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--tls-cert=" + certs_->client_cert, "--tls-key=" + certs_->rogue_key},
       "--tls-key " + certs_->rogue_key + " does not match --tls-cert " +
           certs_->client_cert},
      {{"--tls-cert=" + certs_->client_cert, "--tls-key=" + certs_->ca},
       "--tls-key file " + certs_->ca + " holds no PEM private key"},
      {{"--tls-cert=" + certs_->client_key, "--tls-key=" + certs_->client_key},
       "--tls-cert file " + certs_->client_key + " holds no PEM certificate"},
      {{"--tls-ca=" + certs_->client_key}, "--tls-ca file"},
      {{"--tls-ca=" + *dir_ + "/absent.pem"}, "--tls-ca file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {testing::WorkerBinary(),
                                     "--router=127.0.0.1:1"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    testing::CommandResult r =
        testing::RunCommand(argv, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("retrying"), std::string::npos) << r.output;
  }
}

TEST_F(SecurityTest, CliTakesTheTlsAndTokenFlags) {
  auto plaintext = testing::RunCommand(
      {testing::CliBinary(), "info", "--target=" + cluster_->target(),
       "--auth-token-file=" + *dir_ + "/client_token"},
      std::chrono::seconds(20));
  EXPECT_EQ(plaintext.exit_code, 14) << plaintext.output;  // UNAVAILABLE
  EXPECT_NE(plaintext.output.find("pass --tls-ca"), std::string::npos)
      << plaintext.output;
  auto ok = testing::RunCommand(
      {testing::CliBinary(), "forward", "--target=" + cluster_->target(),
       "--layer=0", "--random=3", "--tls-ca=" + certs_->ca,
       "--auth-token-file=" + *dir_ + "/client_token"},
      std::chrono::seconds(20));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  auto no_token = testing::RunCommand(
      {testing::CliBinary(), "info", "--target=" + cluster_->target(),
       "--tls-ca=" + certs_->ca},
      std::chrono::seconds(20));
  EXPECT_EQ(no_token.exit_code, 16) << no_token.output;  // UNAUTHENTICATED
}

TEST_F(SecurityTest, WorkerWithoutATrustedCertificateCannotRegister) {
  LocalCluster cluster;
  LocalCluster::Options o = SecureOptions();
  o.workers = 0;  // started by hand below
  o.router_args.push_back("--num-workers=1");
  o.client = Client(certs_->ca, kToken);
  o.ready_timeout = std::chrono::milliseconds(200);
  EXPECT_FALSE(cluster.Start(o).ok());  // nobody registered yet
  // A certificate from another CA, and no certificate at all.
  ASSERT_TRUE(cluster
                  .StartWorker({"--tls-ca=" + certs_->ca,
                                "--tls-cert=" + certs_->rogue_cert,
                                "--tls-key=" + certs_->rogue_key})
                  .ok());
  ASSERT_TRUE(cluster.StartWorker({"--tls-ca=" + certs_->ca}).ok());
  // And a plaintext one.
  ASSERT_TRUE(cluster.StartWorker({}).ok());
  EXPECT_FALSE(cluster.WaitReady(std::chrono::seconds(3)).ok());
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->ready_workers(), 0);
  // In 3 s each retried several times (every 0.5 s); the router said why
  // once per peer and reason, with the peer's address, and none of gRPC's
  // raw handshake lines.
  std::string router_log;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = router_log.find(what); at != std::string::npos;
         at = router_log.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        router_log = cluster.router().Log();
        return count("TLS handshake with 127.0.0.1:") >= 3;
      },
      std::chrono::seconds(30)))
      << router_log;
  // The router never saw them register.
  EXPECT_EQ(router_log.find("registered"), std::string::npos) << router_log;
  for (const char* reason :
       {"refused: certificate verify failed",
        "refused: peer did not return a certificate",
        "refused: wrong version number (a plaintext client"}) {
    EXPECT_EQ(count(reason), 1u) << reason << "\n" << router_log;
  }
  EXPECT_EQ(count("TLS handshake with 127.0.0.1:"), 3u) << router_log;
  EXPECT_EQ(count("Handshake failed with fatal error"), 0u) << router_log;
  // Each worker says what its "Socket closed" likely means.
  for (int i = 0; i < 3; ++i) {
    const std::string says =
        i < 2 ? "refused the TLS handshake or closed the connection ("
              : "closed the connection (";
    const std::string hint = i < 2 ? "): check --tls-ca / --tls-cert / "
                                     "--tls-key match the router's"
                                   : "): its worker port may want TLS";
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          const std::string log = cluster.worker(i).Log();
          return log.find(says) != std::string::npos &&
                 log.find(hint) != std::string::npos;
        },
        std::chrono::seconds(30)))
        << cluster.worker(i).Log();
  }
  // A worker with the right certificate gets in.
  ASSERT_TRUE(cluster
                  .StartWorker({"--tls-ca=" + certs_->ca,
                                "--tls-cert=" + certs_->client_cert,
                                "--tls-key=" + certs_->client_key})
                  .ok());
  ASSERT_TRUE(cluster.WaitReady(std::chrono::seconds(30)).ok())
      << cluster.Logs();
  std::vector<float> x(32, 0.5f);
  EXPECT_TRUE(cluster.client().Forward(0, x.data(), 1, 32, {}).ok());
}

}  // namespace
}  // namespace moe
