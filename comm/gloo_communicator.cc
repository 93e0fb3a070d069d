#include "comm/gloo_communicator.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/alltoallv.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"

namespace moe {
namespace {

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx)
      : ctx_(std::move(ctx)) {}

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string name() const override { return "gloo"; }

  absl::Status AllToAllV(const void* send,
                         absl::Span<const int64_t> send_counts, void* recv,
                         absl::Span<const int64_t> recv_counts,
                         ElementType type, std::chrono::milliseconds timeout,
                         void* /*stream*/) override {
    if (static_cast<int>(send_counts.size()) != size() ||
        static_cast<int>(recv_counts.size()) != size()) {
      return absl::InvalidArgumentError("all-to-all counts need one per rank");
    }
    // Gloo builds buffers from the pointers even for empty transfers.
    float dummy = 0;
    void* in = send != nullptr ? const_cast<void*>(send) : &dummy;
    void* out = recv != nullptr ? recv : &dummy;
    std::vector<int64_t> sc(send_counts.begin(), send_counts.end());
    std::vector<int64_t> rc(recv_counts.begin(), recv_counts.end());
    try {
      gloo::AlltoallvOptions opts(ctx_);
      if (type == ElementType::kF32) {
        opts.setInput(static_cast<float*>(in), sc);
        opts.setOutput(static_cast<float*>(out), rc);
      } else {
        opts.setInput(static_cast<uint16_t*>(in), sc);
        opts.setOutput(static_cast<uint16_t*>(out), rc);
      }
      opts.setTimeout(timeout);
      opts.setTag(tag_++);
      gloo::alltoallv(opts);
    } catch (const gloo::IoException& e) {
      return absl::UnavailableError(absl::StrCat(
          "gloo all-to-all (rank ", rank(), " of ", size(), "): ", e.what()));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("gloo all-to-all (rank ", rank(),
                                              " of ", size(), "): ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint32_t tag_ = 0;
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
