#pragma once
// LockMode::advisory: PostgreSQL session advisory locks (MySQL: GET_LOCK) on one pooled session
// per owner, pinned while the owner holds any lock. Re-entry is counted here (the server is asked once per lock);
// the watchdog checks the pinned sessions and reports the locks of a broken one lost.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/manager_base.hpp"

namespace dblock::detail {

class AdvisoryCore final : public ManagerBase {
 public:
  AdvisoryCore(std::shared_ptr<Store> store, ManagerOptions options);

  std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options) override;
  Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options) override;
  std::optional<Lock> try_acquire(const AdvisoryKey& key, const LockOptions& options) override;
  Lock acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, const LockOptions& options) override;
  void release(const std::shared_ptr<HeldLock>& held) override;

 private:
  /// One owner's pinned session. `use` serialises its statements; `users` (guarded by mutex_)
  /// counts its held locks plus acquisitions in flight, and the session goes back at zero.
  struct Pinned {
    explicit Pinned(std::string owner_in) : owner(std::move(owner_in)) {}
    const std::string owner;
    std::mutex use;
    std::unique_ptr<AdvisorySession> session;  // guarded by `use`; null when broken
    std::size_t users = 0;
  };
  struct AdvisoryHeld final : HeldLock {
    AdvisoryHeld(std::string name, std::string owner, std::int64_t token, AdvisoryTarget target_in,
                 std::shared_ptr<Pinned> pinned_in)
        : HeldLock(std::move(name), std::move(owner), token, std::chrono::milliseconds(0), SteadyClock::time_point::max()),
          target(target_in), pinned(std::move(pinned_in)) {}
    const AdvisoryTarget target;
    const std::shared_ptr<Pinned> pinned;
  };
  using Key = std::tuple<std::string, AdvisoryKey, std::string, bool>;  // owner, key, name, shared

  /// `timeout` empty: one try.
  /// `name` empty: an explicit key, shown as key.to_string().
  std::optional<Lock> acquire_key(std::string_view name, const AdvisoryKey& key, const LockOptions& options,
                                  std::optional<std::chrono::milliseconds> timeout);
  static Key key_of(const std::string& owner, const AdvisoryTarget& target) {
    return Key{owner, target.key, target.name, target.shared};
  }
  /// One statement on the owner's session (or a re-entry, which needs none). The flag is true
  /// when the grant created a new held record, which keeps the caller's pin.
  std::pair<std::optional<Lock>, bool> attempt(std::string_view name, const std::string& owner,
                                               const AdvisoryTarget& target, const std::shared_ptr<Pinned>& pinned,
                                               std::chrono::milliseconds wait, SteadyClock::time_point started);
  std::shared_ptr<Pinned> pin(const std::string& owner);
  void unpin(const std::shared_ptr<Pinned>& pinned);
  /// The session of `pinned` broke: drops it and takes every lock on it out of the table (the
  /// server released them with the connection). REQUIRES: pinned->use held. Report them after
  /// letting go of `use`: the user's callback may release guards.
  std::vector<std::shared_ptr<AdvisoryHeld>> detach_session(const std::shared_ptr<Pinned>& pinned);
  void report_all_lost(const std::vector<std::shared_ptr<AdvisoryHeld>>& gone, std::string_view why);
  bool watchdog_cycle() override;

  std::map<Key, std::shared_ptr<AdvisoryHeld>> held_;      // guarded by mutex_
  std::map<std::string, std::shared_ptr<Pinned>> pinned_;  // by owner; guarded by mutex_
};

}  // namespace dblock::detail
