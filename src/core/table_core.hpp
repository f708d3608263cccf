#pragma once
// LockMode::table: a row per lock with a lease, the renewal watchdog, waiting woken by release
// notifications (or backoff), and the resolution of statements whose outcome is unknown.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/manager_base.hpp"

namespace dblock::detail {

class TableCore final : public ManagerBase {
 public:
  TableCore(std::shared_ptr<Store> store, ManagerOptions options);

  std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options) override;
  Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options) override;
  using ManagerBase::acquire;
  using ManagerBase::try_acquire;
  void release(const std::shared_ptr<HeldLock>& held) override;

 private:
  using Key = std::tuple<std::string, std::string, HolderKind>;  // owner, name, kind

  /// What one acquisition asks for: a plain lock, or membership of a group (permit, shared).
  struct Request {
    HolderKind kind = HolderKind::exclusive;
    std::int64_t capacity = 0;  // permits
    std::chrono::milliseconds ttl{0};
  };

  bool watchdog_cycle() override;
  std::vector<std::shared_ptr<HeldLock>> held_snapshot() override;
  void deadline_passed(const std::shared_ptr<HeldLock>& held) override;
  Request request_of(const LockOptions& options) const;
  std::optional<Grant> acquire_once(std::string_view name, const std::string& owner, const Request& request);
  std::optional<Grant> resolve_unknown_acquire(std::string_view name, const std::string& owner);
  /// How long a waiter may sleep: until the lease on `name` ends, or for a member until the first
  /// member's does; an exclusive waiter marks itself as a waiting writer where readers hold the
  /// name (`marked` then turns true).
  std::optional<std::chrono::milliseconds> lease_left_for_waiter(std::string_view name, const std::string& owner,
                                                                 const Request& request, bool& marked);
  Lock register_grant(std::string_view name, const std::string& owner, const Request& request,
                      SteadyClock::time_point sent, Grant grant, std::chrono::milliseconds waited);
  std::optional<std::int64_t> release_once(const HeldLock& held, std::int64_t depth_before);
  /// Renews `refs` (plain locks and group members, each set in one statement); positions renewed.
  std::vector<std::size_t> renew_all(const std::vector<HeldRef>& refs, SteadyClock::time_point reply_by);
  void forget(const std::shared_ptr<HeldLock>& held);  // REQUIRES: mutex_ held
  void mark_lost(const std::shared_ptr<HeldLock>& held, std::string_view why);

  std::map<Key, std::shared_ptr<HeldLock>> held_;
};

}  // namespace dblock::detail
