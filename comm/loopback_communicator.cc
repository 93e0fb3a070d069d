#include "comm/loopback_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

class LoopbackCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "loopback"; }

  // Rows sent to rank 0 are the rows received from it. The step passes the
  // same buffer for both at world size 1, so nothing moves; distinct host
  // buffers are copied.
  absl::Status AllToAllV(const void* send,
                         absl::Span<const int64_t> send_counts, void* recv,
                         absl::Span<const int64_t> recv_counts,
                         ElementType type, std::chrono::milliseconds,
                         void*) override {
    if (send_counts.size() != 1 || recv_counts.size() != 1) {
      return absl::InvalidArgumentError(
          "loopback all-to-all takes one count each way");
    }
    if (send_counts[0] != recv_counts[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("loopback all-to-all sends ", send_counts[0],
                       " elements but expects ", recv_counts[0]));
    }
    if (send != recv && send_counts[0] > 0) {
      std::memcpy(recv, send, send_counts[0] * ElementSize(type));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Communicator> CreateLoopbackCommunicator() {
  return std::make_unique<LoopbackCommunicator>();
}

}  // namespace moe
