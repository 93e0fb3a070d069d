// The NCCL communicator on one GPU (world size 1: NCCL takes one rank per
// device): creation runs the warm-up all-to-all, after which a step's
// all-to-all moves the rows. Skips, with the reason, when no CUDA device is
// visible.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(NcclCommunicator, WarmsUpThenMovesRows) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
    GTEST_SKIP() << s.message();
  }
  gloo::rendezvous::HashStore store;
  auto comm = CreateNcclCommunicator(0, 1, store, 0, std::chrono::seconds(30),
                                     std::chrono::seconds(60));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<float> x = {1, 2, 3, 4, 5};
  void *send = nullptr, *recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, 5 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, 5 * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(send, x.data(), 5 * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  const std::vector<int64_t> counts = {5};
  ASSERT_TRUE((*comm)
                  ->AllToAllV(send, counts, recv, counts, ElementType::kF32,
                              std::chrono::seconds(10), stream)
                  .ok());
  ASSERT_EQ(cudaEventRecord(done, stream), cudaSuccess);
  ASSERT_TRUE((*comm)
                  ->Await(done, std::chrono::steady_clock::now() +
                                    std::chrono::seconds(10))
                  .ok());
  std::vector<float> y(5);
  ASSERT_EQ(cudaMemcpy(y.data(), recv, 5 * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(y, x);
  cudaEventDestroy(done);
  cudaStreamDestroy(stream);
  cudaFree(send);
  cudaFree(recv);
}

}  // namespace
}  // namespace moe
