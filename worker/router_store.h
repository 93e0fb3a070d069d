// Gloo's rendezvous store, served by the router (WorkerControl.StoreSet /
// StoreGet) and scoped to one group generation.
#pragma once

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

 private:
  void Authorize(grpc::ClientContext* ctx) const;
  std::vector<std::string> Fetch(const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout);

  std::shared_ptr<moe::v1::WorkerControl::Stub> stub_;
  uint64_t generation_;
  std::string token_;  // the Assignment's store_token
  std::chrono::milliseconds timeout_;
  std::string auth_token_;
};

}  // namespace moe
