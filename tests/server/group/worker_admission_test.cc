// server/worker_admission: a worker from another host advertising a
// loopback collective address is refused, and so is a second worker on one
// GPU unless both exchange over Gloo; each refusal says what to change.
#include "server/group/worker_admission.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

WorkerRegistration Worker(const std::string& host, const std::string& gpu,
                          bool shares) {
  WorkerRegistration r;
  r.host = host;
  r.pid = 7;
  r.device = "cuda:0";
  r.device_identity = gpu;
  r.shares_device = shares;
  return r;
}

TEST(WorkerAdmission, ALoopbackCollectiveAddressIsRefusedFromAnotherHost) {
  WorkerRegistration r = Worker("b", "", false);
  r.collective_host = "127.0.0.1";
  const absl::Status s = CheckCollectiveHost(r, "ipv4:10.1.2.3:5000");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--collective-host"), std::string::npos) << s;
  EXPECT_TRUE(CheckCollectiveHost(r, "ipv4:127.0.0.1:5000").ok());
  r.collective_host = "10.1.2.3";
  EXPECT_TRUE(CheckCollectiveHost(r, "ipv4:10.1.2.3:5000").ok());
}

TEST(WorkerAdmission, OneGpuTakesOneNcclWorker) {
  const WorkerRegistration nccl = Worker("a", "GPU-1", false);
  const WorkerRegistration gloo = Worker("a", "GPU-1", true);
  const std::vector<RegisteredWorker> one_nccl = {{&nccl, "rank 0 (a pid 7)"}};
  const std::vector<RegisteredWorker> one_gloo = {{&gloo, "rank 0 (a pid 7)"}};
  const absl::Status s = CheckDevice(nccl, one_nccl);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 0 (a pid 7)"), std::string::npos) << s;
  EXPECT_FALSE(CheckDevice(gloo, one_nccl).ok());
  EXPECT_FALSE(CheckDevice(nccl, one_gloo).ok());
  EXPECT_TRUE(CheckDevice(gloo, one_gloo).ok());  // both over Gloo
  EXPECT_TRUE(CheckDevice(Worker("a", "GPU-2", false), one_nccl).ok());
  EXPECT_TRUE(CheckDevice(Worker("b", "GPU-1", false), one_nccl).ok());
  EXPECT_TRUE(CheckDevice(Worker("a", "", false), one_nccl).ok());  // a CPU
}

}  // namespace
}  // namespace moe
