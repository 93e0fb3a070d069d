// The router's WorkerControl service as a worker's tests need it: records
// each Join's registration and token and every message that follows, sends
// what the test gives it, refuses or cuts off sessions on request, and
// serves a rendezvous store without generations or tokens.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "moe/v1/worker.grpc.pb.h"

namespace moe::testing {

// An empty Step of `generation` numbered `id` (the fake's tests never run
// one), and what a worker answers.
moe::v1::RouterMessage StepMessage(uint64_t generation, uint64_t id);
bool IsReady(const moe::v1::WorkerMessage& m);
bool IsResult(const moe::v1::WorkerMessage& m);

class FakeRouter final : public moe::v1::WorkerControl::Service {
 public:
  FakeRouter();
  ~FakeRouter() override;
  std::string address() const;

  // The next Joins end at once after registration with these statuses.
  void RefuseNext(grpc::Status status);
  // Sends `msg` on the open session, waiting up to 10 s for one.
  bool Send(const moe::v1::RouterMessage& msg);
  // Ends the open session from the router's side (CANCELLED for the
  // worker).
  void CutOff();

  int joins() const;
  // Sessions ended by the worker (its writes done).
  int left() const;
  std::vector<moe::v1::Register> registrations() const;
  std::vector<std::string> tokens() const;
  // Keys set in the rendezvous store.
  size_t store_keys() const;
  // Everything after each registration, in order.
  std::vector<moe::v1::WorkerMessage> received() const;
  // Waits up to 10 s for `n` messages satisfying `pred`.
  bool AwaitReceived(int n, bool (*pred)(const moe::v1::WorkerMessage&)) const;

  grpc::Status Join(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
          stream) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx,
                        const moe::v1::StoreSetRequest* req,
                        moe::v1::StoreSetResponse* resp) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx,
                        const moe::v1::StoreGetRequest* req,
                        moe::v1::StoreGetResponse* resp) override;

 private:
  int CountLocked(bool (*pred)(const moe::v1::WorkerMessage&)) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::vector<grpc::Status> refusals_ ABSL_GUARDED_BY(mu_);
  int joins_ ABSL_GUARDED_BY(mu_) = 0;
  int left_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<moe::v1::Register> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<moe::v1::WorkerMessage> received_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(mu_);
  grpc::ServerContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
      stream_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace moe::testing
