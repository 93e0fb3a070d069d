// A StoreWaiter that records how its parked StoreGet ended: the tests of
// the rendezvous store and of the group's parts park these.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/group/rendezvous_store.h"

namespace moe {

struct RecordingStoreWaiter : StoreWaiter {
  int ended = 0;
  absl::Status status;
  std::vector<std::string> values;
  void End(const absl::Status& s, std::vector<std::string> v) override {
    ++ended;
    status = s;
    values = std::move(v);
  }
};

}  // namespace moe
