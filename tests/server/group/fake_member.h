// A member of the worker group without a stream: it keeps what the group
// sends it, so the group's classes are tested without gRPC.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/group/group_member.h"

namespace moe::testing {

class FakeMember : public GroupMember {
 public:
  explicit FakeMember(WorkerRegistration info)
      : GroupMember(std::move(info), 1) {}
  bool Write(const EncodedStep&) override { return true; }
  bool Assign(const GroupAssignment& a) override {
    std::lock_guard<std::mutex> lock(mu_);
    assignments_.push_back(a);
    return true;
  }
  bool SendPlacement(const PlacementUpdate&) override { return true; }
  std::vector<GroupAssignment> assignments() {
    std::lock_guard<std::mutex> lock(mu_);
    return assignments_;
  }

 private:
  std::mutex mu_;
  std::vector<GroupAssignment> assignments_;
};

inline std::shared_ptr<FakeMember> Member(const std::string& host,
                                          std::string collective_host = "") {
  return std::make_shared<FakeMember>(
      WorkerRegistration{.host = host,
                         .pid = 1,
                         .device = "cpu",
                         .collective_host = std::move(collective_host)});
}

}  // namespace moe::testing
