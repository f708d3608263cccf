#pragma once
/// dblock::testing (target dblock::testing): test code that uses dblock's locks without a server.
///
/// A TestStore is the real embedded backend (SQLite, on a private file in a temporary directory
/// that goes with it), migrated, whose database reads a clock the test moves, and whose managers
/// (every LockManager, LeaderElection, LockSet and asio manager made on store()) read a local clock
/// that moves with it. advance(30s) runs the product's own rules: leases, lock-delays, minimum
/// holds, occurrences and the reaper follow the database clock; the watchdog renews at its
/// intervals and the deadline timer declares a lock lost at its local deadline, on the local
/// clock. advance() returns once every consequence has run (renewals, losses, on_lost callbacks),
/// so a test of a 30-second lease takes milliseconds and never depends on the machine's speed.
///
/// Faults on demand: expire(), revoke(), steal(), inject() (busy, failed, disconnected, lost
/// replies, stalled statements); and what happened: holder(), events(), grants(), losses().
/// What it cannot show (PostgreSQL's or MariaDB's own behaviour, poolers, replication, real
/// networks): doc/testing.md, "Limits".
///
/// Thread-safety: a TestStore is safe to use from several threads, but advance(), expire(),
/// revoke(), steal() and unstall() are meant for the test's own thread: they wait for the managers'
/// threads, so calling them from an on_lost callback or a watchdog thread deadlocks (they throw
/// after TestStoreOptions::settle_limit of real time instead).
///
/// Clocks: the local clock starts at std::chrono::steady_clock::now() when the store is made and
/// moves only by advance(); Lock::local_deadline() of its locks is on it (compare with local_now()).
/// The database clock starts at the system clock's time then and moves with it. Waiting in
/// acquire(name, timeout) is bounded by real time (a waiter polls; a test that makes one wait
/// moves the clock from another thread).
///
/// Example (a job that must stop when its lock is lost):
/// ```
/// dblock::testing::TestStore db;
/// dblock::LockManager locks(db.store());
/// auto lock = locks.acquire("nightly", 0ms);
/// db.expire("nightly");                      // the holder is told at once
/// EXPECT_TRUE(lock.stop_token().stop_requested());
/// ```

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/fwd.h>
#include <dblock/lock.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>

namespace dblock::testing {

/// Which statements a fault hits.
enum class Statements {
  acquire,     ///< acquisitions (and re-entries), exclusive or group
  renew,       ///< the watchdog's renewals
  release,     ///< releases
  fence,       ///< the start of a fenced transaction (Store::fenced)
  occurrence,  ///< claiming and recording occurrences
  reap,        ///< the reaper's deletions
  any,         ///< every statement of the store, the test store's own reads included
};

/// What the statement meets instead of the database: the errors the SQLite backend gives, which
/// the core classifies as it does for every backend (retried, resolved or reported).
enum class Fault {
  busy,        ///< SQLite's "database is locked" (SQLITE_BUSY): transient; the core retries it a few times
  error,       ///< SQLite's "disk I/O error" (SQLITE_IOERR): a DatabaseError, nothing ran
  disconnect,  ///< the connection drops before the statement is sent: a ConnectionError, nothing ran
  reply_lost,  ///< the statement runs and its reply is lost: the outcome is unknown to the caller
  stall,       ///< the statement's thread waits, before it runs, until unstall() (then it runs)
};

/// One lock event of any manager of the store, as ManagerOptions::on_event sees it, with the time
/// on the test clock since the store was made.
struct Event {
  LockEventKind kind = LockEventKind::acquired;
  std::string name;  ///< empty for renewal rounds and retries
  std::int64_t token = 0;
  std::int64_t count = 0;  ///< acquired: the re-entrancy depth (1: a fresh grant); renewed: locks renewed
  std::chrono::milliseconds at{0};
};

struct TestStoreOptions {
  /// Most sessions of the store's pool. Default: 4.
  std::size_t pool_size = 4;
  /// How long (real time) advance() and the faults wait for the managers' threads to finish what a
  /// move started before they throw std::runtime_error (a callback that blocks). Default: 30 s.
  std::chrono::milliseconds settle_limit{30'000};
  /// Logger for the library. Default: none (silent).
  std::shared_ptr<spdlog::logger> logger;
};

class DBLOCK_EXPORT TestStore {
 public:
  /// Creates the temporary directory and the database, and migrates it.
  /// @throws ConnectionError when the temporary directory cannot be made (TMPDIR).
  explicit TestStore(TestStoreOptions options = {});
  /// Lets every stalled statement go, and removes the database. Managers made on store() should be
  /// gone first (they keep the Store alive, but their locks' files are removed).
  ~TestStore();
  TestStore(const TestStore&) = delete;
  TestStore& operator=(const TestStore&) = delete;

  /// The store to hand to the code under test (LockManager, LeaderElection, run_once, Reaper, ...).
  [[nodiscard]] const std::shared_ptr<Store>& store() const noexcept;

  // --- time

  /// Moves both clocks forward by `by`, in steps that stop at every time a manager's watchdog or
  /// deadline timer waits for, each step run to its end before the next (settle()).
  /// @throws std::runtime_error when the managers' threads do not settle within settle_limit.
  void advance(std::chrono::milliseconds by);
  /// Waits until every manager's watchdog and deadline timer has done what the time asks of it
  /// (a stalled statement's thread counts as done). advance() and the faults call it.
  /// @throws std::runtime_error when that takes longer than settle_limit (real time).
  void settle();
  /// The local clock (Lock::local_deadline() is on it).
  [[nodiscard]] std::chrono::steady_clock::time_point local_now() const;
  /// The database's clock.
  [[nodiscard]] std::chrono::system_clock::time_point database_now() const;
  /// How far the test has moved the clocks.
  [[nodiscard]] std::chrono::milliseconds elapsed() const;

  // --- faults

  /// Ends the lease of `name`'s exclusive holder now by the database's clock; its manager's next
  /// renewal runs at once and finds it gone (lost(), on_lost, stop_token()), and only then is the
  /// name free (after its lock-delay, the product's rule for a lease that ended). When the holder
  /// cannot be told (its renewal is stalled), the name stays unavailable until its lease would
  /// have ended: no one else can get it while its holder may still believe it holds it.
  /// Returns false when no live exclusive holder was there (a group, a revoked row, none).
  bool expire(std::string_view name);
  /// Store::revoke(name) (the operator's revocation), then the holder's renewal runs at once:
  /// it is told, and lets go of the name. Returns what Store::revoke returned.
  std::optional<LockInfo> revoke(std::string_view name);
  /// Store::request_release(name) (asking the holder to let go), then the holder's renewal runs at
  /// once: Lock::release_requested() is true and on_release_requested has been called when this
  /// returns (unless the holder's renewal is stalled). Returns what Store::request_release returned.
  std::optional<LockInfo> request_release(std::string_view name);
  /// Lets another owner take `name`: expire(name), then a manager of the test store's own
  /// ("dblock-testing-intruder", OwnerScope::manager) acquires it: a real grant with a greater
  /// token, renewed while the returned guard lives.
  /// @throws std::logic_error when the name is still unavailable (its lock-delay, a stalled
  ///         holder): advance() past it first.
  [[nodiscard]] Lock steal(std::string_view name, LockOptions options = {});
  /// The next `times` statements of `which` meet `fault`. Faults queue in the order given; a
  /// statement meets the first that matches it.
  void inject(Statements which, Fault fault, int times = 1);
  /// Drops the faults not met yet.
  void clear_faults();
  /// Lets every stalled statement run, then settles.
  void unstall();
  /// How many statements are stalled right now.
  [[nodiscard]] int stalled() const;

  // --- what happened

  /// The row of `name` as an operator sees it (Store::lock), or empty.
  [[nodiscard]] std::optional<LockInfo> holder(std::string_view name);
  /// Every lock event so far, in order; only `name`'s when given.
  [[nodiscard]] std::vector<Event> events(std::string_view name = {}) const;
  /// The fresh grants (acquired events at depth 1), in order: their tokens rise per name.
  [[nodiscard]] std::vector<Event> grants(std::string_view name = {}) const;
  /// The losses reported (lost events: each fires on_lost once), in order.
  [[nodiscard]] std::vector<Event> losses(std::string_view name = {}) const;
  /// Forgets the events so far.
  void clear_events();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dblock::testing
