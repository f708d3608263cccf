#pragma once
// LockMode::table: a row per lock with a lease, the renewal watchdog, waiting woken by release
// notifications (or backoff), and the resolution of statements whose outcome is unknown.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
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
  using Key = std::pair<std::string, std::string>;  // owner, name

  bool watchdog_cycle() override;
  std::vector<std::shared_ptr<HeldLock>> held_snapshot() override;
  void deadline_passed(const std::shared_ptr<HeldLock>& held) override;
  std::chrono::milliseconds effective_ttl(const LockOptions& options) const;
  std::optional<Grant> acquire_once(std::string_view name, const std::string& owner, std::chrono::milliseconds ttl);
  std::optional<Grant> resolve_unknown_acquire(std::string_view name, const std::string& owner);
  Lock register_grant(std::string_view name, const std::string& owner, std::chrono::milliseconds ttl,
                      SteadyClock::time_point sent, Grant grant, std::chrono::milliseconds waited);
  std::optional<std::int64_t> release_once(const HeldLock& held, std::int64_t depth_before);
  void forget(const std::shared_ptr<HeldLock>& held);  // REQUIRES: mutex_ held
  void mark_lost(const std::shared_ptr<HeldLock>& held, std::string_view why);

  std::map<Key, std::shared_ptr<HeldLock>> held_;
};

}  // namespace dblock::detail
