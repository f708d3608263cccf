#pragma once
/// LeaderElection campaigns for one name: the process whose campaign holds the name's lock is
/// the leader, for as long as it holds it. A thread of its own campaigns (waits for the lock),
/// reports on_elected(token) when it is granted, and on_revoked() when the term ends; after a
/// loss it campaigns again. Destruction resigns. Each term has a fencing token larger than every
/// earlier term's: pass it to whatever the leader writes to.
///
/// Callbacks: on_elected runs on the campaign thread. on_revoked runs once per term, after the
/// term's on_elected returned: on the manager's watchdog or deadline-timer thread when the lease
/// is lost (at the latest at the lease's local deadline, before the database can grant the name
/// to anyone else), or on the thread that calls resign() or destroys the election. Neither may
/// throw, call resign() or destroy the election. A long on_elected delays the report of a loss
/// that happens meanwhile: return promptly and do the leader's work elsewhere (is_leader() stays
/// exact meanwhile).
///
/// Thread-safe. Clock: the steady clock, like Lock::local_deadline.
///
/// Example:
///   dblock::LeaderElection election(store, "scheduler", {
///       .on_elected = [&](std::int64_t token) { scheduler.start(token); },
///       .on_revoked = [&] { scheduler.stop(); }});

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <spdlog/fwd.h>
#include <dblock/lock.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

#include <dblock/export.hpp>

namespace dblock {

class LockManager;

/// Who leads a name now, as the lock table says (LeaderElection::leader, LeaderObserver).
struct LeaderInfo {
  std::string owner;       ///< the leader's owner id (host, pid, nonce, owner_tag)
  std::int64_t token = 0;  ///< the term's fencing token: a new term has a larger one
  /// When the term began: the grant, by the database's clock, placed on this host's clock.
  std::chrono::system_clock::time_point since;
  std::chrono::milliseconds lease_left{0};  ///< by the database's clock, when it was read
  /// The same term (lease_left and since, measured at each read, are not compared).
  [[nodiscard]] bool same_term(const LeaderInfo& other) const { return owner == other.owner && token == other.token; }
};

/// LeaderElection::health(): a readiness/liveness answer for a probe.
struct ElectionHealth {
  bool healthy = true;
  bool leader = false;  ///< this process leads now
  std::string detail;   ///< why not healthy, or what it is doing
};

struct ElectionOptions {
  /// This process became leader; the argument is the term's fencing token. Default: none.
  std::function<void(std::int64_t token)> on_elected;
  /// The term ended: lost, resigned or destroyed. Default: none.
  std::function<void()> on_revoked;
  /// The manager the election makes for itself: mode, lease (default_ttl), renewal, owner_tag,
  /// logger of the store. Its on_lost is called too, before on_revoked.
  ManagerOptions manager;
  /// How long one campaign wait lasts before the thread checks whether it should stop: the most
  /// resign() and the destructor wait for a campaign in progress. Not with manager.fair_queue: a
  /// campaign then waits in the name's queue in one call, which resign() stops at once (a wait in
  /// slices would leave the queue at each slice's end and queue again at its back). Default: 250 ms.
  std::chrono::milliseconds campaign_slice{250};
  /// Pause before campaigning again after an error other than a timeout (a missing schema,
  /// a refused mode). Default: 1 s.
  std::chrono::milliseconds retry_after_error{1000};
};

class DBLOCK_EXPORT LeaderElection {
 public:
  /// Starts campaigning at once. @throws InvalidArgument for a bad name or options, and what
  /// the LockManager constructor throws (SchemaError when dblock's tables are missing).
  LeaderElection(std::shared_ptr<Store> store, std::string name, ElectionOptions options = {});
  /// Resigns (see resign()).
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  /// True while this process is leader and its lock is not lost (exact, not a cached flag).
  [[nodiscard]] bool is_leader() const;
  /// The current term's fencing token, empty while not leader.
  [[nodiscard]] std::optional<std::int64_t> token() const;
  /// Terms won so far.
  [[nodiscard]] std::uint64_t terms() const;
  /// Who leads the name now, read from the database (one statement): this process or another,
  /// empty while nobody holds it. @throws ConnectionError, DatabaseError.
  [[nodiscard]] std::optional<LeaderInfo> leader() const;
  /// The same, for any name, without campaigning (`dblock leader NAME`).
  [[nodiscard]] static std::optional<LeaderInfo> leader(Store& store, std::string_view name);
  /// Fails while this process leads but its lease was not renewed on time (less than one renewal
  /// interval of it is left: renewals are failing, the term ends at the lease's local deadline), and
  /// while campaigning fails with an error other than a timeout. A follower waiting its turn is
  /// healthy. No I/O: cheap enough for every probe.
  [[nodiscard]] ElectionHealth health() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// Stops campaigning and ends the current term: the lock is released (so another campaigner
  /// is granted it at once) and on_revoked runs on this thread. Idempotent; never throws (a
  /// failed release is logged, and the row then lapses with its lease).
  void resign() noexcept;

  /// The owner id this election campaigns as: what a leader passes to hand_over() to make this
  /// process its successor. Waits for the campaign thread to start (it says so first).
  [[nodiscard]] std::string owner_id() const;
  /// Hands leadership to the campaigner whose owner_id() is `successor`: this term ends
  /// (on_revoked runs on this thread, before the successor can be granted) and its lock is
  /// released with Lock::hand_over, which grants the name to the successor's waiting campaign in
  /// the same commit: at no moment does nobody lead, and never do two. When `successor` is not
  /// waiting (not campaigning, or not yet queued), the first campaigner in the queue is granted it.
  /// This process then campaigns again, behind the others. Needs manager.fair_queue (table mode)
  /// on both elections. Returns false when this process does not lead.
  /// @throws InvalidArgument (leadership kept) without the fair queue or for a bad owner id;
  ///         ConnectionError/DatabaseError as Lock::release (the term has ended; the lock lapses).
  bool hand_over(std::string_view successor);

 private:
  void campaign(std::stop_token stop);
  /// The manager reported `token`'s lock lost.
  void lock_lost(std::int64_t token);

  std::shared_ptr<Store> store_;  // for leader()
  const std::string name_;
  ElectionOptions options_;
  mutable std::mutex state_;                  // guards the term below
  mutable std::condition_variable_any wake_;  // owner_id() waits on it too
  std::optional<Lock> term_;                  // the leader's lock
  std::optional<Lock> ended_by_loss_;         // a lost term's guard, for the campaign thread to drop
  std::uint64_t terms_ = 0;
  std::string campaign_error_;  // the last campaign attempt's error, empty after a success or timeout
  std::string campaign_owner_;  // the campaign thread's owner id, set when it starts
  bool handing_over_ = false;   // hand_over() releases the ended term: the campaign waits for it
  std::mutex callbacks_;        // on_elected and on_revoked of one term never overlap, and come in order
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<LockManager> manager_;  // after the state: its threads stop before the state goes
  std::jthread campaigner_;               // last: stopped and joined first
};

struct ObserverOptions {
  /// How often the lock table is read. Default: 1 s.
  std::chrono::milliseconds interval{1000};
  /// Called on the observer's thread with the new leader (empty: none) whenever the term changes
  /// (another owner or token), and once with the first reading. Must not throw or destroy the
  /// observer. Default: none.
  std::function<void(const std::optional<LeaderInfo>&)> on_change;
};

/// Watches who leads a name without campaigning (etcd's observe): a thread reads the name's row
/// every interval and reports term changes. A read that fails keeps the last answer and is
/// retried at the next interval (errors are logged to the store's logger). Thread-safe.
class DBLOCK_EXPORT LeaderObserver {
 public:
  /// @throws InvalidArgument for a bad name or a non-positive interval.
  LeaderObserver(std::shared_ptr<Store> store, std::string name, ObserverOptions options = {});
  ~LeaderObserver();
  LeaderObserver(const LeaderObserver&) = delete;
  LeaderObserver& operator=(const LeaderObserver&) = delete;

  /// The last reading (empty before the first one succeeded, or while nobody leads).
  [[nodiscard]] std::optional<LeaderInfo> current() const;
  /// Readings that succeeded so far.
  [[nodiscard]] std::uint64_t readings() const;

 private:
  void observe(std::stop_token stop);

  std::shared_ptr<Store> store_;
  const std::string name_;
  ObserverOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  std::optional<LeaderInfo> current_;
  std::uint64_t readings_ = 0;
  std::jthread thread_;  // last: stopped and joined first
};

}  // namespace dblock
