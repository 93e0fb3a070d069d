// Gloo's rendezvous store, served by the router (WorkerControl.StoreSet /
// StoreGet) and scoped to one group generation.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gloo/rendezvous/store.h"
#include "moe/v1/worker.grpc.pb.h"

namespace moe {

class RouterStore : public gloo::rendezvous::Store {
 public:
  // `auth_token` (may be empty) is sent as "authorization: Bearer <token>".
  RouterStore(std::shared_ptr<moe::v1::WorkerControl::Stub> stub,
              uint64_t generation, std::string token,
              std::chrono::milliseconds timeout, std::string auth_token = "")
      : stub_(std::move(stub)),
        generation_(generation),
        token_(std::move(token)),
        timeout_(timeout),
        auth_token_(std::move(auth_token)) {}

  // Gloo's Store reports failures by throwing; these throw
  // gloo::IoException when the router cannot be reached or a key does not
  // appear in time.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // False once a call failed for a reason other than a key not appearing
  // in time (the generation is over, the token is refused, the router is
  // gone): another connect attempt in this generation cannot succeed.
  bool retryable() const { return retryable_; }

 private:
  [[noreturn]] void Fail(const std::string& what, const grpc::Status& s);
  void Authorize(grpc::ClientContext* ctx) const;
  std::vector<std::string> Fetch(const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout);

  std::shared_ptr<moe::v1::WorkerControl::Stub> stub_;
  uint64_t generation_;
  std::string token_;  // the Assignment's store_token
  std::chrono::milliseconds timeout_;
  std::string auth_token_;
  std::atomic<bool> retryable_{true};
};

// Attempt `attempt` (from 1) to connect within one generation: its keys are
// the store's own on the first attempt and "KEY/aN" on later ones, so that a
// retry never reads a peer's address from an attempt that peer abandoned.
// ("R/aN" is still rank R's key: WorkerPool's KeyOwner.)
class AttemptStore : public gloo::rendezvous::Store {
 public:
  AttemptStore(gloo::rendezvous::Store& store, int attempt)
      : store_(store), attempt_(attempt) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string Key(const std::string& key) const;

  gloo::rendezvous::Store& store_;
  const int attempt_;
};

}  // namespace moe
