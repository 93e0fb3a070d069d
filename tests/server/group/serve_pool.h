// A WorkerPool served by its WorkerControl service on loopback TCP, as in
// production (with the in-process transport, a sync Write to one Join
// stream from another stream's handler was seen to hang, about 1 in 30
// runs, while the client was reading), and a stub to call it. The server
// must go before the service and the pool (its handlers call them).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/api/worker_control_service.h"
#include "server/group/worker_pool.h"

namespace moe::testing {

struct ServedPool {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<WorkerControlService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<moe::v1::WorkerControl::Stub> stub;
};

inline void ServePool(const WorkerPoolOptions& po,
                      const WorkerControlOptions& wo, ServedPool* out) {
  out->pool = std::make_unique<WorkerPool>(po);
  out->service =
      std::make_unique<WorkerControlService>(&out->pool->group(), wo);
  grpc::ServerBuilder b;
  b.RegisterService(out->service.get());
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  out->server = b.BuildAndStart();
  ASSERT_NE(out->server, nullptr);
  ASSERT_GT(port, 0);
  out->stub = moe::v1::WorkerControl::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

}  // namespace moe::testing
