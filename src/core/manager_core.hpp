#pragma once
// The state behind a LockManager: held-lock table, watchdog thread, acquire/release/wait policy.
// Lock guards share ownership of it, so locks outlive the LockManager object that made them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dblock/lock.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include "backends/backend.hpp"

namespace dblock::detail {

using SteadyClock = std::chrono::steady_clock;

/// One (owner, name) the manager holds; every re-entrant guard of it shares this record.
struct HeldLock {
  HeldLock(std::string name_in, std::string owner_in, std::int64_t token_in, std::chrono::milliseconds ttl_in,
           SteadyClock::time_point deadline)
      : name(std::move(name_in)), owner(std::move(owner_in)), token(token_in), ttl(ttl_in),
        local_deadline(deadline.time_since_epoch().count()) {}

  const std::string name;
  const std::string owner;
  const std::int64_t token;
  const std::chrono::milliseconds ttl;
  std::atomic<bool> lost{false};
  std::atomic<SteadyClock::rep> local_deadline;
  std::int64_t depth = 0;  // guarded by ManagerCore::mutex_
};

class ManagerCore : public std::enable_shared_from_this<ManagerCore> {
 public:
  ManagerCore(std::shared_ptr<Store> store, ManagerOptions options);
  ~ManagerCore();
  ManagerCore(const ManagerCore&) = delete;
  ManagerCore& operator=(const ManagerCore&) = delete;

  void start_watchdog();
  std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options);
  Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options);
  void release(const std::shared_ptr<HeldLock>& held);
  [[nodiscard]] std::string owner_for_this_thread() const;
  [[nodiscard]] ManagerStats stats() const;
  [[nodiscard]] spdlog::logger& logger() const { return *logger_; }

 private:
  using Key = std::pair<std::string, std::string>;  // owner, name

  std::chrono::milliseconds effective_ttl(const LockOptions& options) const;
  std::optional<Grant> acquire_once(std::string_view name, const std::string& owner, std::chrono::milliseconds ttl);
  std::optional<Grant> resolve_unknown_acquire(std::string_view name, const std::string& owner);
  Lock register_grant(std::string_view name, const std::string& owner, std::chrono::milliseconds ttl,
                      SteadyClock::time_point sent, Grant grant, std::chrono::milliseconds waited);
  std::optional<std::int64_t> release_once(const HeldLock& held, std::int64_t depth_before);
  void forget(const std::shared_ptr<HeldLock>& held);  // REQUIRES: mutex_ held
  void mark_lost(const std::shared_ptr<HeldLock>& held, std::string_view why);
  void emit(LockEventKind kind, std::string_view name, std::int64_t token = 0, std::int64_t count = 0,
            std::chrono::milliseconds waited = std::chrono::milliseconds(0)) const;
  void watchdog(std::stop_token stop);
  bool renew_cycle();

  std::shared_ptr<Store> store_;
  Backend& backend_;
  ManagerOptions options_;
  std::chrono::milliseconds renew_interval_;
  std::string owner_id_;
  std::shared_ptr<spdlog::logger> logger_;

  mutable std::mutex mutex_;
  std::condition_variable_any wake_watchdog_;
  std::map<Key, std::shared_ptr<HeldLock>> held_;

  std::atomic<std::uint64_t> acquired_{0}, contended_{0}, timeouts_{0}, renewals_{0}, lost_{0};
  std::atomic<std::int64_t> waited_ms_{0};
  std::jthread watchdog_;
};

}  // namespace dblock::detail
