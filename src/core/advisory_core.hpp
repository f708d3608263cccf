#pragma once
// LockMode::advisory: PostgreSQL session advisory locks (MySQL: GET_LOCK) on one pooled session
// per owner, pinned while the owner holds any lock. Re-entry is counted here (the server is asked once per lock);
// the watchdog checks the pinned sessions and reports the locks of a broken one lost.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/advisory_backend.hpp"
#include "core/manager_base.hpp"

namespace dblock::detail {

/// Room for a late watchdog (a loaded machine) in pinned_session_silence().
inline constexpr std::chrono::milliseconds kPinnedSilenceSlack{2000};

/// How long a live owner may leave its pinned session without a statement (what
/// AdvisoryBackend::pin_advisory_session is told): the watchdog sends one on every pinned session
/// each check interval, an idle owner's included until the next cycle gives the session back; a
/// TTL more, because a lock whose session gave no sign of life for a TTL is reported lost locally
/// anyway (so a server that ends the session after this long never takes a lock its owner still
/// believes held); and the slack.
[[nodiscard]] constexpr std::chrono::milliseconds pinned_session_silence(std::chrono::milliseconds check_interval,
                                                                         std::chrono::milliseconds ttl) {
  return check_interval + ttl + kPinnedSilenceSlack;
}

class AdvisoryCore final : public ManagerBase {
 public:
  AdvisoryCore(std::shared_ptr<Store> store, ManagerOptions options);

  std::optional<Lock> try_acquire(std::string_view name, const LockOptions& options) override;
  Lock acquire(std::string_view name, std::chrono::milliseconds timeout, const LockOptions& options,
               const std::stop_token& stop = {}) override;
  std::optional<Lock> try_acquire(const AdvisoryKey& key, const LockOptions& options) override;
  Lock acquire(const AdvisoryKey& key, std::chrono::milliseconds timeout, const LockOptions& options) override;
  void release(const std::shared_ptr<HeldLock>& held) override;
  /// Draws the token on the lock's own session when first asked for: one round trip, which also
  /// proves the session (so the lock) alive. @throws LockLost when the lock is gone.
  std::int64_t token_of(HeldLock& held) override;

 protected:
  void start() override;

 private:
  struct AdvisoryHeld;

  AdvisoryBackend& advisory_;  // the constructor refuses a store without advisory locks, with the reason
  /// A held lock's identity within its owner: key, shared, name. The name is a view of the held
  /// record's own copy (or of the caller's name, for a lookup), so finding one allocates nothing.
  using HeldKey = std::tuple<AdvisoryKey, bool, std::string_view>;
  static HeldKey key_of(const AdvisoryTarget& target) { return {target.key, target.shared, target.name}; }

  /// One owner's state. `use` serialises the statements on its pinned session; `users` counts its
  /// held locks plus acquisitions in flight. At zero the session lingers with its owner, who
  /// usually comes back at once: the next acquisition skips the pool and talks to the same server
  /// process. It goes back to the pool when the pool runs dry, or when the watchdog finds the
  /// owner unused for a whole check interval (the record goes then, too).
  struct Pinned {
    explicit Pinned(std::string owner_in) : owner(std::move(owner_in)) {}
    const std::string owner;
    // Recursive for one reason: a thread inside `use` whose session lease finds the pool dry gives
    // back idle sessions and so tries `use` of every owner, its own too (see Pinned's users).
    std::recursive_mutex use;
    std::unique_ptr<AdvisorySession> session;  // guarded by `use`; null when none or broken
    std::size_t users = 0;                     // guarded by mutex_
    bool used_since_check = true;              // guarded by mutex_
    bool overdue = false;                      // guarded by mutex_: a lock on it passed its deadline; drop the session

    std::map<HeldKey, std::shared_ptr<AdvisoryHeld>> held;  // guarded by mutex_
  };
  struct AdvisoryHeld final : HeldLock {
    AdvisoryHeld(std::string name, std::int64_t token, const AdvisoryTarget& target_in,
                 std::shared_ptr<Pinned> pinned_in, std::chrono::milliseconds check_ttl, SteadyClock::time_point sent)
        : HeldLock(std::move(name), pinned_in->owner, token, check_ttl, lease_deadline(sent, check_ttl)),
          target{target_in.key, target_in.name.empty() ? std::string_view() : std::string_view(this->name),
                 target_in.shared},
          pinned(std::move(pinned_in)) {}
    const AdvisoryTarget target;  // its name views this record's own
    const std::shared_ptr<Pinned> pinned;
  };

  /// `timeout` empty: one try. `stop`: a request on it ends the wait as the deadline would.
  /// `name` empty: an explicit key, shown as key.to_string().
  std::optional<Lock> acquire_key(std::string_view name, const AdvisoryKey& key, const LockOptions& options,
                                  std::optional<std::chrono::milliseconds> timeout, const std::stop_token& stop = {});
  /// One statement on the owner's session (or a re-entry, which needs none). The flag is true
  /// when the grant created a new held record, which keeps the caller's pin.
  std::pair<std::optional<Lock>, bool> attempt(std::string_view name, const AdvisoryTarget& target,
                                               const std::shared_ptr<Pinned>& pinned, std::chrono::milliseconds wait,
                                               SteadyClock::time_point started);
  std::shared_ptr<Pinned> pin();
  void unpin(const std::shared_ptr<Pinned>& pinned);
  /// The session of `pinned` broke: drops it and takes every lock on it out of the table (the
  /// server released them with the connection). REQUIRES: pinned->use held. Report them after
  /// letting go of `use`: the user's callback may release guards.
  std::vector<std::shared_ptr<AdvisoryHeld>> detach_session(const std::shared_ptr<Pinned>& pinned);
  void report_all_lost(const std::vector<std::shared_ptr<AdvisoryHeld>>& gone, std::string_view why);
  /// Whether `held` is still its owner's record of the lock (not released, its connection not
  /// detached, not taken out at its deadline). REQUIRES: mutex_ held.
  bool registered(const AdvisoryHeld& held) const;
  /// Hands the sessions of owners without locks back to the pool (skipping any busy right now).
  void give_back_idle_sessions(const std::vector<std::shared_ptr<Pinned>>& owners);
  bool watchdog_cycle() override;
  std::vector<std::shared_ptr<HeldLock>> held_snapshot() override;
  void deadline_passed(const std::shared_ptr<HeldLock>& held) override;
  /// A statement sent at `sent` came back on the session of `pinned`: every lock on it was still
  /// held then, so each deadline moves to `sent` + TTL.
  void prove_alive(const std::shared_ptr<Pinned>& pinned, SteadyClock::time_point sent);
  /// Takes the lock on the owner's session, drops the session when it broke or was found
  /// overdue, and gives back a grant the same statement then failed on. REQUIRES: pinned->use held.
  std::optional<std::int64_t> lock_on_session(std::unique_lock<std::recursive_mutex>& use,
                                              const std::shared_ptr<Pinned>& pinned, const AdvisoryTarget& target,
                                              std::chrono::milliseconds wait);
  /// Drops the session of `pinned` when a lock on it passed its deadline (its locks were reported
  /// lost then). REQUIRES: pinned->use held.
  void drop_if_overdue(const std::shared_ptr<Pinned>& pinned);

  std::map<std::uint64_t, std::shared_ptr<Pinned>> pinned_;   // by owner_key_for_this_thread(); guarded by mutex_
  std::shared_ptr<const std::function<void()>> on_pool_dry_;  // registered weakly with the pool
};

}  // namespace dblock::detail
