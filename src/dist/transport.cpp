// dist/transport.cpp - the Transport interface's shared checks and
// InProcessGroup: ranks as threads of one process
// (spattn/dist_transport.hpp).
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "dist/cp_tensor_ops.hpp"
#include "spattn/dist_transport.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

void Transport::check_and_count(const std::vector<Message>& sends, const std::vector<Message>& recvs) {
  for (const auto* list : {&sends, &recvs}) {
    std::vector<bool> seen(static_cast<size_t>(world_size()), false);
    for (const Message& m : *list) {
      require(m.peer >= 0 && m.peer < world_size() && m.peer != rank(), "rank ", rank(), " of ", world_size(),
              " cannot exchange with peer ", m.peer);
      require(!seen[static_cast<size_t>(m.peer)], "rank ", rank(), ": two messages ",
              list == &sends ? "to" : "from", " peer ", m.peer, " in one exchange");
      seen[static_cast<size_t>(m.peer)] = true;
      require(m.bytes >= 0 && (m.bytes == 0 || m.data != nullptr), "rank ", rank(), ": a message of ", m.bytes,
              " bytes at ", m.data);
    }
  }
  for (const Message& m : sends) bytes_sent_ += m.bytes;
}

// ---- InProcessGroup ----

struct InProcessGroup::Mailbox {
  struct Post {
    const void* data;
    int64_t bytes;
    bool taken;
    bool copying;  // a receiver is reading it (outside the lock)
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Post> posts;  // (from, to, exchange number)
  bool failed = false;
  double timeout_s = 0;

  // Waits (holding `lock`) until ready() or a failure; throws on a failure or the timeout.
  template <typename Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready, int64_t rank, const char* what, int64_t peer) {
    const auto limit = std::chrono::duration<double>(timeout_s);
    const bool ok = changed.wait_for(lock, limit, [&] { return failed || ready(); });
    require(!failed, "rank ", rank, ": another rank of the in-process group failed");
    require(ok, "rank ", rank, " waited ", timeout_s, " s for ", what, " peer ", peer);
  }
};

namespace {

class InProcessExchange : public Exchange {
 public:
  using Mailbox = InProcessGroup::Mailbox;
  InProcessExchange(Mailbox& mail, int64_t rank, int64_t number, std::vector<Message> sends,
                    std::vector<Message> recvs)
      : mail_(mail), rank_(rank), number_(number), sends_(std::move(sends)), recvs_(std::move(recvs)) {}

  void wait(int64_t peer) override {
    for (Message& m : recvs_) {
      if (m.peer != peer || m.bytes == 0) continue;
      std::unique_lock<std::mutex> lock(mail_.mutex);
      const auto key = std::make_tuple(peer, rank_, number_);
      mail_.wait(lock, [&] { return mail_.posts.count(key) > 0; }, rank_, "the message from", peer);
      Mailbox::Post& post = mail_.posts.at(key);
      require(post.bytes == m.bytes, "rank ", rank_, " expected ", m.bytes, " bytes from rank ", peer, ", which sent ",
              post.bytes);
      post.copying = true;
      lock.unlock();
      try {
        detail::copy_bytes(m.data, post.data, m.bytes);
      } catch (...) {
        lock.lock();
        post.copying = false;
        mail_.changed.notify_all();
        throw;
      }
      lock.lock();
      post.copying = false;
      post.taken = true;
      m.bytes = 0;  // done
      mail_.changed.notify_all();
    }
  }

  void finish() override {
    for (const Message& m : std::vector<Message>(recvs_)) wait(m.peer);
    std::unique_lock<std::mutex> lock(mail_.mutex);
    for (const Message& m : sends_) {
      if (m.bytes == 0) continue;
      const auto key = std::make_tuple(rank_, m.peer, number_);
      mail_.wait(lock, [&] { return mail_.posts.at(key).taken; }, rank_, "its message to be taken by", m.peer);
      mail_.posts.erase(key);
    }
    sends_.clear();
  }

  // An exchange left early (an error on this rank) withdraws what it posted,
  // after any copy out of it has ended, so that no peer reads freed buffers.
  ~InProcessExchange() override {
    std::unique_lock<std::mutex> lock(mail_.mutex);
    for (const Message& m : sends_) {
      const auto post = mail_.posts.find(std::make_tuple(rank_, m.peer, number_));
      if (post == mail_.posts.end()) continue;
      mail_.changed.wait(lock, [&] { return !post->second.copying; });
      mail_.posts.erase(post);
    }
  }

 private:
  Mailbox& mail_;
  int64_t rank_, number_;
  std::vector<Message> sends_, recvs_;
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(InProcessGroup::Mailbox& mail, int64_t rank, int64_t world_size)
      : mail_(mail), rank_(rank), world_size_(world_size) {}
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }

  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& recvs,
                                  void* stream) override {
    check_and_count(sends, recvs);
    const int64_t number = exchanges_++;
    // The stream's work is done before peers read what it packed, and before
    // this rank's receives overwrite buffers its earlier kernels read (the
    // copies run on the legacy default stream, which does not wait for it).
    bool device = false;
    for (const auto* list : {&sends, &recvs})
      for (const Message& m : *list) device = device || (m.bytes > 0 && detail::on_device(m.data));
    detail::synchronize(stream, device);
    {
      std::lock_guard<std::mutex> lock(mail_.mutex);
      for (const Message& m : sends)
        if (m.bytes > 0) mail_.posts[std::make_tuple(rank_, m.peer, number)] = {m.data, m.bytes, false, false};
    }
    mail_.changed.notify_all();
    return std::make_unique<InProcessExchange>(mail_, rank_, number, sends, recvs);
  }

 private:
  InProcessGroup::Mailbox& mail_;
  int64_t rank_, world_size_, exchanges_ = 0;
};

}  // namespace

InProcessGroup::InProcessGroup(int64_t world_size, double timeout_s)
    : world_size_(world_size), mail_(std::make_unique<Mailbox>()) {
  require(world_size >= 1, "world_size must be >= 1, got ", world_size);
  require(timeout_s > 0, "timeout_s must be > 0, got ", timeout_s);
  mail_->timeout_s = timeout_s;
}

InProcessGroup::~InProcessGroup() = default;

std::unique_ptr<Transport> InProcessGroup::transport(int64_t rank) {
  require(rank >= 0 && rank < world_size_, "rank must be in [0, ", world_size_, "), got ", rank);
  return std::make_unique<InProcessTransport>(*mail_, rank, world_size_);
}

void InProcessGroup::run(const std::function<void(Transport&)>& fn) {
  std::exception_ptr first;
  std::mutex first_mutex;
  std::vector<std::thread> threads;
  const int device = detail::current_device();  // the ranks' threads work on the caller's device
  for (int64_t r = 0; r < world_size_; ++r) {
    threads.emplace_back([&, r] {
      try {
        detail::use_device(device);
        auto t = transport(r);
        fn(*t);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(first_mutex);
          if (!first) first = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mail_->mutex);
        mail_->failed = true;
        mail_->changed.notify_all();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  mail_->posts.clear();
  mail_->failed = false;
  if (first) std::rethrow_exception(first);
}

}  // namespace spattn::dist
