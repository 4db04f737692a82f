// dist/nccl_transport.cpp - the NCCL transport (spattn/dist_transport.hpp):
// an exchange is one ncclGroupStart / ncclSend... ncclRecv... / ncclGroupEnd
// on a communication stream of its own, which first waits for the caller's
// stream (the rows to send are packed there); an event at its end lets the
// caller's stream wait for the rows. Context-parallel attention starts one
// exchange per stage, so the caller computes on one stage's rows while the
// next travels. Compiled where CMake finds NCCL (SPATTN_NCCL).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "spattn/dist_transport.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

namespace {

using cuda_detail::check_cuda;

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) fail("NCCL transport: ", what, " failed: ", ncclGetErrorString(status));
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

class NcclExchange : public Exchange {
 public:
  NcclExchange(cudaStream_t caller, cudaEvent_t done) : caller_(caller), done_(done) {}
  ~NcclExchange() override { cudaEventDestroy(done_); }  // released once the exchange completes
  void wait(int64_t) override { finish(); }
  void finish() override { check_cuda(cudaStreamWaitEvent(caller_, done_, 0), "cudaStreamWaitEvent"); }

 private:
  cudaStream_t caller_;
  cudaEvent_t done_;
};

class NcclTransport : public Transport {
 public:
  NcclTransport(ncclComm_t comm, bool owned) : comm_(comm), owned_(owned) {
    int n = 0, r = 0, device = 0;
    check_nccl(ncclCommCount(comm, &n), "ncclCommCount");
    check_nccl(ncclCommUserRank(comm, &r), "ncclCommUserRank");
    check_nccl(ncclCommCuDevice(comm, &device), "ncclCommCuDevice");
    check_cuda(cudaSetDevice(device), "cudaSetDevice");  // the stream below on the communicator's device
    world_size_ = n;
    rank_ = r;
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~NcclTransport() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    if (owned_) ncclCommDestroy(comm_);
  }
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }

  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                  void* stream) override {
    check_and_count(sends, recvs);
    cudaEvent_t packed = new_event();
    check_cuda(cudaEventRecord(packed, as_stream(stream)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, packed, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(packed);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const Message& m : sends)
      if (m.bytes > 0)
        check_nccl(ncclSend(m.data, static_cast<size_t>(m.bytes), ncclUint8, static_cast<int>(m.peer), comm_, stream_),
                   "ncclSend");
    for (const Message& m : recvs)
      if (m.bytes > 0)
        check_nccl(ncclRecv(m.data, static_cast<size_t>(m.bytes), ncclUint8, static_cast<int>(m.peer), comm_, stream_),
                   "ncclRecv");
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    cudaEvent_t done = new_event();
    check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
    return std::make_unique<NcclExchange>(as_stream(stream), done);
  }

 private:
  ncclComm_t comm_;
  bool owned_;
  int64_t rank_ = 0, world_size_ = 1;
  cudaStream_t stream_ = nullptr;
};

// The integer value of environment variable `name`, required to be in [lo, hi].
int64_t env_int(const char* name, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  require(text != nullptr && *text != '\0', "NCCL transport: environment variable ", name,
          " is not set (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; export them under other launchers)");
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  require(*end == '\0' && value >= lo && value <= hi, "NCCL transport: ", name, "=", text,
          " is not an integer in [", lo, ", ", hi, "]");
  return value;
}

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Transport> nccl_transport(void* comm) {
  require(comm != nullptr, "nccl_transport: comm is null");
  return std::make_unique<NcclTransport>(static_cast<ncclComm_t>(comm), false);
}

std::unique_ptr<Transport> nccl_transport_from_env() {
  const int64_t world = env_int("WORLD_SIZE", 1, 1 << 20);
  const int64_t rank = env_int("RANK", 0, world - 1);
  const int64_t port = env_int("MASTER_PORT", 1, 65534);
  const char* addr = std::getenv("MASTER_ADDR");
  require(addr != nullptr && *addr != '\0', "NCCL transport: environment variable MASTER_ADDR is not set");
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  require(devices > 0, "NCCL transport: no CUDA device");
  // LOCAL_RANK (else RANK) modulo the visible devices: one device per process
  // where the launcher sets CUDA_VISIBLE_DEVICES per rank.
  const int64_t local = std::getenv("LOCAL_RANK") ? env_int("LOCAL_RANK", 0, 1 << 20) : rank;
  check_cuda(cudaSetDevice(static_cast<int>(local % devices)), "cudaSetDevice");
  // NCCL's own bootstrap at a fixed address: every rank gets the same id and
  // rank 0 listens there (one port above torchrun's store). A caller's own
  // NCCL_COMM_ID is kept; the one set here is removed again, so that later
  // communicators of the process (torch.distributed's) bootstrap as usual.
  const bool own_id = std::getenv("NCCL_COMM_ID") == nullptr;
  if (own_id) setenv("NCCL_COMM_ID", (std::string(addr) + ":" + std::to_string(port + 1)).c_str(), 1);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  ncclResult_t status = ncclGetUniqueId(&id);
  if (status == ncclSuccess) status = ncclCommInitRank(&comm, static_cast<int>(world), id, static_cast<int>(rank));
  if (own_id) unsetenv("NCCL_COMM_ID");
  check_nccl(status, "ncclGetUniqueId / ncclCommInitRank");
  return std::make_unique<NcclTransport>(comm, true);
}

}  // namespace spattn::dist
