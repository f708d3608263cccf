#pragma once
// A bounded pool of database sessions, shared by every backend. Sessions are opened on demand up
// to the limit, handed out through an RAII lease, and taken back only when `usable()` (connected,
// no open transaction); broken ones are dropped, and the next lease opens a fresh one. Whoever
// keeps sessions out of the pool while idle registers a reclaimer, asked for them when it runs dry.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::detail {

template <class Session>
class SessionPool {
 public:
  using Factory = std::function<std::unique_ptr<Session>()>;

  class Lease {
   public:
    Lease(SessionPool& pool, std::unique_ptr<Session> session) : pool_(&pool), session_(std::move(session)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept = delete;
    ~Lease() {
      if (session_) pool_->give_back(std::move(session_));
    }
    Session* operator->() const noexcept { return session_.get(); }
    Session& operator*() const noexcept { return *session_; }

   private:
    SessionPool* pool_;
    std::unique_ptr<Session> session_;
  };

  SessionPool(Factory factory, std::string redacted_uri, std::size_t size, std::chrono::milliseconds timeout)
      : factory_(std::move(factory)), redacted_uri_(std::move(redacted_uri)), size_(size), timeout_(timeout) {}

  /// @throws ConnectionError when no session frees up and none can be opened within the timeout.
  [[nodiscard]] Lease lease() {
    std::unique_lock lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    bool reclaimed = false;
    while (true) {
      if (idle_.empty() && open_ >= size_ && !reclaimed) {
        // Dry: first ask those who keep idle sessions out of the pool (advisory owners) for them.
        reclaimed = true;
        auto reclaimers = live_reclaimers();
        lock.unlock();
        for (auto& give_back : reclaimers) (*give_back)();
        lock.lock();
      }
      if (!freed_.wait_until(lock, deadline, [&] { return !idle_.empty() || open_ < size_; }))
        throw ConnectionError(fmt::format("all {} pooled sessions to {} stayed busy for {}ms (raise ?pool=)", size_,
                                          redacted_uri_, timeout_.count()));
      if (!idle_.empty()) {
        auto session = std::move(idle_.back());
        idle_.pop_back();
        if (session->usable()) return Lease(*this, std::move(session));
        --open_;  // broke while idle: drop it and look again
        continue;
      }
      ++open_;
      lock.unlock();
      try {
        return Lease(*this, factory_());
      } catch (...) {
        lock.lock();
        --open_;
        freed_.notify_one();
        throw;
      }
    }
  }

  /// `give_back` is called, without the pool's lock, when a lease finds the pool dry; it should
  /// hand back sessions kept idle outside the pool. Forgotten once expired.
  void add_reclaimer(std::weak_ptr<const std::function<void()>> give_back) {
    std::lock_guard lock(mutex_);
    std::erase_if(reclaimers_, [](const auto& weak) { return weak.expired(); });
    reclaimers_.push_back(std::move(give_back));
  }

  /// Takes `session`, opened outside the pool (e.g. to look at the server first), as one of its own.
  void adopt(std::unique_ptr<Session> session) {
    std::lock_guard lock(mutex_);
    ++open_;
    idle_.push_back(std::move(session));
    freed_.notify_one();
  }

  /// A session outside the pool, e.g. for a listener or the migration lock.
  [[nodiscard]] std::unique_ptr<Session> connect_dedicated() const { return factory_(); }

 private:
  /// REQUIRES: mutex_ held.
  std::vector<std::shared_ptr<const std::function<void()>>> live_reclaimers() {
    std::vector<std::shared_ptr<const std::function<void()>>> live;
    for (auto& weak : reclaimers_)
      if (auto give_back = weak.lock()) live.push_back(std::move(give_back));
    return live;
  }

  void give_back(std::unique_ptr<Session> session) {
    bool keep = session->usable();
    {
      std::lock_guard lock(mutex_);
      if (keep)
        idle_.push_back(std::move(session));
      else
        --open_;
    }
    freed_.notify_one();
    // A dropped session closes here, outside the mutex.
  }

  Factory factory_;
  const std::string redacted_uri_;
  const std::size_t size_;
  const std::chrono::milliseconds timeout_;

  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Session>> idle_;
  std::size_t open_ = 0;  // idle + leased + being opened
  std::vector<std::weak_ptr<const std::function<void()>>> reclaimers_;
};

}  // namespace dblock::detail
