#include "comm/loopback_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

class LoopbackCommunicator : public Communicator {
 public:
  LoopbackCommunicator(int rank, int world) : rank_(rank), world_(world) {}

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override { return "loopback"; }

  // Rows sent to this rank are the rows received from it. The step passes
  // the same buffer for both at world size 1, so nothing moves; distinct
  // host buffers are copied.
  absl::Status AllToAllV(const void* send,
                         absl::Span<const int64_t> send_counts, void* recv,
                         absl::Span<const int64_t> recv_counts,
                         ElementType type, std::chrono::milliseconds,
                         void*) override {
    if (static_cast<int>(send_counts.size()) != world_ ||
        static_cast<int>(recv_counts.size()) != world_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loopback all-to-all takes ", world_, " counts each way"));
    }
    for (int q = 0; q < world_; ++q) {
      if (q == rank_) continue;
      if (send_counts[q] != 0 || recv_counts[q] != 0) {
        return absl::InternalError(
            absl::StrCat("loopback all-to-all of rank ", rank_, " of ", world_,
                         ": the plan moves rows to or from rank ", q));
      }
    }
    if (send_counts[rank_] != recv_counts[rank_]) {
      return absl::InvalidArgumentError(
          absl::StrCat("loopback all-to-all sends ", send_counts[rank_],
                       " elements but expects ", recv_counts[rank_]));
    }
    if (send != recv && send_counts[rank_] > 0) {
      std::memcpy(recv, send, send_counts[rank_] * DTypeSize(type));
    }
    return absl::OkStatus();
  }

 private:
  int rank_, world_;
};

}  // namespace

std::unique_ptr<Communicator> CreateLoopbackCommunicator(int rank, int world) {
  return std::make_unique<LoopbackCommunicator>(rank, world);
}

}  // namespace moe
