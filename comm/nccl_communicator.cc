#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_status.h"
#include "core/status_macros.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status NcclError(ncclResult_t r, ncclComm_t comm, const char* what,
                       const char* file, int line) {
  const char* last =
      comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  return absl::UnavailableError(absl::StrCat(
      file, ":", line, ": ", what, ": ", ncclGetErrorString(r),
      last != nullptr && *last ? " (" : "", last != nullptr ? last : "",
      last != nullptr && *last ? ")" : ""));
}

#define MOE_NCCL_ERROR(r, comm, what) \
  NcclError(r, comm, what, __FILE__, __LINE__)

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device)
      : comm_(comm), rank_(rank), world_(world), device_(device) {}
  ~NcclCommunicator() override {
    // Abort, not finalize: finalising waits for the peers, which may be gone.
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override { return "nccl"; }
  bool device_memory() const override { return true; }

  absl::Status AllToAllV(const void* send,
                         absl::Span<const int64_t> send_counts, void* recv,
                         absl::Span<const int64_t> recv_counts,
                         ElementType type, std::chrono::milliseconds timeout,
                         void* stream) override {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("NCCL communicator was aborted");
    }
    if (static_cast<int>(send_counts.size()) != world_ ||
        static_cast<int>(recv_counts.size()) != world_) {
      return absl::InvalidArgumentError("all-to-all counts need one per rank");
    }
    MOE_CUDA_OK(cudaSetDevice(device_));
    const ncclDataType_t t = type == ElementType::kF32    ? ncclFloat32
                             : type == ElementType::kBF16 ? ncclBfloat16
                                                          : ncclUint8;
    const size_t es = DTypeSize(type);
    auto s = static_cast<cudaStream_t>(stream);
    ncclResult_t r = ncclGroupStart();
    size_t so = 0, ro = 0;
    for (int q = 0; q < world_ && r == ncclSuccess; ++q) {
      if (send_counts[q] > 0) {
        r = ncclSend(static_cast<const char*>(send) + so * es, send_counts[q],
                     t, q, comm_, s);
      }
      if (r == ncclSuccess && recv_counts[q] > 0) {
        r = ncclRecv(static_cast<char*>(recv) + ro * es, recv_counts[q], t, q,
                     comm_, s);
      }
      so += send_counts[q];
      ro += recv_counts[q];
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    return Settle(r, Clock::now() + timeout, "all-to-all");
  }

  absl::Status Await(void* event, Clock::time_point deadline) override {
    auto ev = static_cast<cudaEvent_t>(event);
    while (true) {
      const cudaError_t e = cudaEventQuery(ev);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady)
        return CudaError(e, "cudaEventQuery", __FILE__, __LINE__);
      // The runtime also records NotReady as this thread's last error; clear
      // it, or the next kernel launch check would report it as its own.
      (void)cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        const absl::Status s =
            MOE_NCCL_ERROR(state, comm_, "collective failed");
        Abort();
        return s;
      }
      if (Clock::now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", rank_,
                         ": collectives did not finish by the step deadline; "
                         "communicator aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // One all-to-all of a float to every rank (itself included) on a stream of
  // its own: NCCL connects peers lazily, on their first send and receive,
  // which can take far longer than a step's deadline (InfiniBand, many
  // ranks). Done here, before the worker reports ready, under `deadline`.
  absl::Status WarmUp(Clock::time_point deadline) {
    MOE_CUDA_OK(cudaSetDevice(device_));
    const size_t bytes = 2 * world_ * sizeof(float);
    void* buf = nullptr;
    MOE_CUDA_OK(cudaMalloc(&buf, bytes));
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    absl::Status s;
    if (cudaError_t e =
            cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      s = CudaError(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    if (s.ok()) {
      if (cudaError_t e =
              cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
          e != cudaSuccess) {
        s = CudaError(e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
      }
    }
    if (s.ok()) {
      if (cudaError_t e = cudaMemsetAsync(buf, 0, bytes, stream);
          e != cudaSuccess) {
        s = CudaError(e, "cudaMemsetAsync", __FILE__, __LINE__);
      }
    }
    const std::vector<int64_t> ones(world_, 1);
    if (s.ok()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      s = AllToAllV(buf, ones, static_cast<float*>(buf) + world_, ones,
                    ElementType::kF32,
                    std::max(left, std::chrono::milliseconds(1)), stream);
    }
    if (s.ok()) {
      if (cudaError_t e = cudaEventRecord(done, stream); e != cudaSuccess) {
        s = CudaError(e, "cudaEventRecord", __FILE__, __LINE__);
      }
    }
    if (s.ok()) s = Await(done, deadline);
    // On failure abort (if the failing call has not already), which ends
    // NCCL's kernels: the stream drains before the buffer is freed.
    if (!s.ok()) Abort();
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (done != nullptr) cudaEventDestroy(done);
    cudaFree(buf);
    (void)cudaGetLastError();
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("NCCL warm-up all-to-all: ", s.message()));
    }
    return absl::OkStatus();
  }

  // Waits for a non-blocking NCCL call to finish enqueuing.
  absl::Status Settle(ncclResult_t r, Clock::time_point deadline,
                      const char* what) {
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", rank_, ": NCCL ", what,
                         " did not start in time; communicator aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(10));
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) {
      const absl::Status s = MOE_NCCL_ERROR(r, comm_, what);
      Abort();
      return s;
    }
    return absl::OkStatus();
  }

 private:
  void Abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  ncclComm_t comm_;
  int rank_, world_, device_;
};

constexpr char kIdKey[] = "nccl-unique-id";

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world, gloo::rendezvous::Store& store, int device,
    std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  MOE_CUDA_OK(cudaSetDevice(device));
  ncclUniqueId id;
  try {
    if (rank == 0) {
      if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
        return MOE_NCCL_ERROR(r, nullptr, "ncclGetUniqueId");
      }
      store.set(kIdKey, std::vector<char>(id.internal,
                                          id.internal + sizeof(id.internal)));
    } else {
      store.wait({kIdKey}, timeout);
      const std::vector<char> bytes = store.get(kIdKey);
      if (bytes.size() != sizeof(id.internal)) {
        return absl::InternalError(
            "malformed NCCL unique id in the rendezvous store");
      }
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("NCCL rendezvous: ", e.what()));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r =
      ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return MOE_NCCL_ERROR(r, nullptr, "ncclCommInitRankConfig");
  }
  auto c = std::make_unique<NcclCommunicator>(comm, rank, world, device);
  if (absl::Status s = c->Settle(r, deadline, "communicator init"); !s.ok())
    return s;
  // Connect every pair now, under the longer of the two timeouts.
  MOE_RETURN_IF_ERROR(c->WarmUp(start + std::max(timeout, connect_timeout)));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace moe
