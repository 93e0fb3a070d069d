#include "comm/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace moe {
namespace {

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx)
      : ctx_(std::move(ctx)) {}

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string name() const override { return "gloo"; }

  // Pairwise sends and receives on gloo's unbound buffers, as
  // gloo::alltoallv does, except that a pair with nothing to move in a
  // direction posts nothing: both ends know every count from the plan, so
  // a rank whose rows all stay (or that has none) does not wait on a peer
  // for empty messages. Receives are posted before sends.
  absl::Status AllToAllV(const void* send,
                         absl::Span<const int64_t> send_counts, void* recv,
                         absl::Span<const int64_t> recv_counts,
                         ElementType type, std::chrono::milliseconds timeout,
                         void* /*stream*/) override {
    const int P = size(), me = rank();
    if (static_cast<int>(send_counts.size()) != P ||
        static_cast<int>(recv_counts.size()) != P) {
      return absl::InvalidArgumentError("all-to-all counts need one per rank");
    }
    if (send_counts[me] != recv_counts[me]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all-to-all: rank ", me, " sends itself ", send_counts[me],
          " elements but expects ", recv_counts[me]));
    }
    const size_t es = DTypeSize(type);
    send_offsets_.assign(P + 1, 0);
    recv_offsets_.assign(P + 1, 0);
    for (int q = 0; q < P; ++q) {
      send_offsets_[q + 1] = send_offsets_[q] + send_counts[q] * es;
      recv_offsets_[q + 1] = recv_offsets_[q] + recv_counts[q] * es;
    }
    if (send_counts[me] > 0) {
      std::memcpy(static_cast<char*>(recv) + recv_offsets_[me],
                  static_cast<const char*>(send) + send_offsets_[me],
                  send_counts[me] * es);
    }
    const uint32_t tag = tag_++;  // every rank counts every call
    try {
      // Gloo builds buffers from the pointers even for empty transfers.
      char dummy = 0;
      auto in = ctx_->createUnboundBuffer(
          send != nullptr ? const_cast<void*>(send) : &dummy, send_offsets_[P]);
      auto out = ctx_->createUnboundBuffer(recv != nullptr ? recv : &dummy,
                                           recv_offsets_[P]);
      const auto slot = gloo::Slot::build(gloo::kAlltoallSlotPrefix, tag);
      int receives = 0, sends = 0;
      for (int i = 1; i < P; ++i) {
        const int from = (me + P - i) % P;
        if (recv_counts[from] == 0) continue;
        out->recv(from, slot, recv_offsets_[from], recv_counts[from] * es);
        ++receives;
      }
      for (int i = 1; i < P; ++i) {
        const int to = (me + i) % P;
        if (send_counts[to] == 0) continue;
        in->send(to, slot, send_offsets_[to], send_counts[to] * es);
        ++sends;
      }
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      auto left = [&] {
        return std::max(std::chrono::milliseconds(1),
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now()));
      };
      for (int i = 0; i < sends; ++i) {
        if (!in->waitSend(left())) {
          return absl::UnavailableError(absl::StrCat(
              "gloo all-to-all (rank ", me, " of ", P, "): send aborted"));
        }
      }
      for (int i = 0; i < receives; ++i) {
        if (!out->waitRecv(left())) {
          return absl::UnavailableError(absl::StrCat(
              "gloo all-to-all (rank ", me, " of ", P, "): receive aborted"));
        }
      }
    } catch (const gloo::IoException& e) {
      return absl::UnavailableError(absl::StrCat("gloo all-to-all (rank ", me,
                                                 " of ", P, "): ", e.what()));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("gloo all-to-all (rank ", me,
                                              " of ", P, "): ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint32_t tag_ = 0;
  std::vector<size_t> send_offsets_, recv_offsets_;  // bytes; reused
};

// Gives every rendezvous wait the whole timeout, whatever gloo asks for.
class FullTimeoutStore : public gloo::rendezvous::Store {
 public:
  FullTimeoutStore(gloo::rendezvous::Store& store,
                   std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    return store_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    store_.wait(keys, timeout_);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& /*timeout*/) override {
    store_.wait(keys, timeout_);
  }

 private:
  gloo::rendezvous::Store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    int rank, int size, const std::string& host, gloo::rendezvous::Store& store,
    std::chrono::milliseconds timeout) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo waits 5x the context's timeout for a pair to connect: a peer
    // that gave up (e.g. "no route to host" just after a partition heals)
    // would hold this rank that long. Connect within `timeout` instead; the
    // store waits keep the whole timeout, and so do the collectives (each
    // is given its own).
    ctx->setTimeout(std::max(timeout / 5, std::chrono::milliseconds(1)));
    FullTimeoutStore full(store, timeout);
    ctx->connectFullMesh(full, device);
    ctx->setTimeout(timeout);
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(ctx)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo rendezvous of rank ", rank,
                                               " of ", size, " at ", host,
                                               " failed: ", e.what()));
  }
}

}  // namespace moe
