// spattn/dist_transport.hpp - how context-parallel ranks move their rows: one
// small interface and its transports.
//
// A Transport knows its rank and world size and starts exchanges: every rank
// passes the messages it sends and the buffers it receives into, matching its
// peers' (what rank a sends to b, b receives from a, the same number of
// bytes), the ranks' calls in the same order. Buffers are host or device
// memory as the transport takes them. Context-parallel attention starts one
// exchange per stage (spattn/dist_attention.hpp): a message to one peer and
// one from another.
//
//   InProcessGroup   the ranks as threads of one process (tests, one device);
//                    host and device buffers.
//   nccl_transport   NCCL point-to-point (ncclSend / ncclRecv in one group per
//                    exchange) on the caller's communicator, or on one built
//                    from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as
//                    torchrun sets them; device buffers. Compiled where CMake
//                    finds NCCL (the NVIDIA wheel PyTorch installs carries
//                    it); nccl_available() says whether it was.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace spattn::dist {

// `bytes` bytes at `data`, to or from rank `peer`.
struct Message {
  int64_t peer = 0;
  void* data = nullptr;
  int64_t bytes = 0;
};

// An exchange under way.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // Returns once the message from `peer` may be read: on the host (host
  // transports) or, for device transports, by work queued on the exchange's
  // stream after this call.
  virtual void wait(int64_t peer) = 0;
  // Returns once everything, sends too, is done (the same way); the send and
  // receive buffers may then be reused or freed.
  virtual void finish() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  // Starts an exchange of `sends` and `recvs` (at most one message per peer
  // each way; empty messages are allowed and move nothing). `stream`: the
  // cudaStream_t the caller's device work runs on (null: the default stream);
  // host transports ignore it. Throws spattn::Error for a message to itself
  // or to a rank outside the group.
  virtual std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                          void* stream) = 0;
  // Bytes this rank has sent through the transport so far.
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  // Checks the peers of `sends` and `recvs` and counts the bytes sent.
  void check_and_count(const std::vector<Message>& sends, const std::vector<Message>& recvs);

 private:
  int64_t bytes_sent_ = 0;
};

// world_size ranks as threads of this process. A receiver copies straight
// from its peer's send buffer (cudaMemcpy for device memory); a rank's
// finish() returns once its peers have taken what it sent. A wait longer than
// timeout_s throws spattn::Error instead of hanging.
class InProcessGroup {
 public:
  explicit InProcessGroup(int64_t world_size, double timeout_s = 120.0);
  ~InProcessGroup();
  int64_t world_size() const { return world_size_; }
  // Rank `rank`'s transport (valid while the group lives).
  std::unique_ptr<Transport> transport(int64_t rank);
  // Calls fn(transport) on one thread per rank and returns when all are done;
  // rethrows the first error (the other ranks' waits then fail at once).
  void run(const std::function<void(Transport&)>& fn);

  struct Mailbox;

 private:
  int64_t world_size_;
  std::unique_ptr<Mailbox> mail_;
};

// Whether the library was built with NCCL.
bool nccl_available();
// A transport over the caller's NCCL communicator (an ncclComm_t, which the
// caller keeps alive and destroys). Throws spattn::Error without NCCL.
std::unique_ptr<Transport> nccl_transport(void* comm);
// A transport over a communicator it builds and owns: rank RANK of
// WORLD_SIZE, the bootstrap at MASTER_ADDR:MASTER_PORT + 1 (torchrun's store
// keeps MASTER_PORT), on device LOCAL_RANK (else RANK) modulo the visible
// devices.
// Throws spattn::Error naming the variable that is missing or malformed.
std::unique_ptr<Transport> nccl_transport_from_env();

}  // namespace spattn::dist
