#pragma once
/// Plain option structs; every default is written next to its field. Use designated
/// initialisers: `dblock::ManagerOptions{.default_ttl = 10s}`. Validation happens in one place,
/// when the struct is handed to dblock, and throws dblock::InvalidArgument naming the field.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include <spdlog/fwd.h>

namespace dblock {

using std::chrono::milliseconds;

/// A timeout that never runs out in practice (100 years): acquire(name, wait_forever). Longer
/// timeouts, milliseconds::max() included, are treated as this one.
inline constexpr milliseconds wait_forever = std::chrono::hours(24 * 365 * 100);

/// How a Store connects. Most fields can also be given as URI query parameters
/// (`?schema=s&prefix=p&pool=8`); an explicit field here wins over the URI.
struct StoreOptions {
  /// Schema (PostgreSQL) that holds dblock's tables. Default: from the URI, else "public".
  std::string schema;
  /// Prefix of every dblock table name. Default: from the URI, else "dblock_".
  std::string prefix;
  /// Most sessions the pool opens at once. Default: from the URI, else 8.
  std::size_t pool_size = 0;
  /// How long to wait for a free pooled session or a new connection. Default: 10 s.
  milliseconds connect_timeout{10'000};
  /// How long to wait for the reply to one statement before the session is abandoned and the
  /// call fails with ConnectionError (a stalled server or network). Default: 30 s.
  milliseconds statement_timeout{30'000};
  /// Logger for the library. Default: none (silent).
  std::shared_ptr<spdlog::logger> logger;
};

/// Whose re-entry counts as re-entrant.
enum class OwnerScope {
  thread,   ///< each thread of a manager is its own owner (java.util.concurrent, Redisson). Default.
  manager,  ///< every thread of one LockManager shares ownership.
};

/// Where a LockManager keeps its locks.
enum class LockMode {
  /// A row per lock in dblock's lock table, with a lease renewed by the watchdog. Every backend.
  table,
  /// The server's own session locks, on a pooled connection pinned while the owner holds any: no
  /// lease and no row; the server releases them when the connection dies (the watchdog then
  /// reports them lost). PostgreSQL: advisory locks, keys AdvisoryKey (doc/advisory.md).
  /// MySQL/MariaDB: GET_LOCK on names, exclusive only, refused on Galera (doc/mysql.md). Not on
  /// SQLite (InvalidArgument).
  advisory,
};

/// What a LockManager reports to ManagerOptions::on_event, e.g. to feed a metrics system.
enum class LockEventKind {
  acquired,      ///< a grant (re-entries included); `waited` is the time spent in acquire()
  contended,     ///< a try found another live owner
  timeout,       ///< acquire() gave up after `waited`
  released,      ///< a guard released its level (also when its statement failed: it let go all the same)
  renewed,       ///< a renewal cycle extended `count` leases (name empty); `latency` is its round trip
  lost,          ///< a held lease was found lost (once per grant, like ManagerStats::lost). Each grant
                 ///< ends exactly once: the released event of its last level (count 0) or lost, the
                 ///< first of them; a loss found after it is only logged
  waiting,       ///< acquire() found the name taken and starts to wait; the same call later reports
                 ///< exactly one of acquired, timeout or failed, on the same thread
  failed,        ///< acquire() that had reported `waiting` ended with an error other than a timeout
  renew_failed,  ///< a renewal cycle for `count` leases failed (they are retried; name empty)
  retried,       ///< a statement is run again after a deadlock, lock-wait timeout or busy database
};

struct LockEvent {
  LockEventKind kind;
  std::string_view name;   ///< empty for renewal cycles and retries
  std::int64_t token = 0;  ///< 0 in advisory mode while no one has asked the Lock for it
  std::int64_t count = 0;  ///< re-entrancy depth (left to its guards, for `released`), or locks renewed for `renewed`
  std::chrono::milliseconds waited{0};
  /// released (the last level) and lost: how long the grant was held, by the steady clock.
  std::chrono::microseconds held{0};
  /// acquired (the granting statement), renewed, renew_failed and released: how long the statement took.
  std::chrono::microseconds latency{0};
};

/// What a holder of a name is.
enum class HolderKind {
  exclusive,  ///< the name's only holder: a plain lock, or the writer of a read-write lock
  permit,     ///< one of up to N holders of a counting semaphore (LockOptions::permits)
  shared,     ///< one of any number of readers (LockOptions::shared)
};

/// Per-acquisition options.
struct LockOptions {
  /// Lease length. Zero means the manager's default_ttl. Must be >= 3 x the renew interval.
  milliseconds ttl{0};
  /// A shared (read) lock: held by any number of shared holders at once, excluding exclusive
  /// ones. Advisory mode: pg_advisory_lock_shared. Table mode: a reader of the name's read-write
  /// lock, whose writers are the plain (exclusive) acquisitions of the name; a writer that waits
  /// is not starved by readers arriving after it (writer preference). Default: exclusive.
  bool shared = false;
  /// Table mode: a counting semaphore; up to `permits` holders at once, each with its own lease,
  /// renewal and fencing token. Each acquisition is judged by its own `permits` (the rule when
  /// callers disagree: a caller is admitted while fewer than its own `permits` others hold one).
  /// Exclusive locks and read locks of the same name exclude permit holders. 0: not a semaphore.
  std::int64_t permits = 0;
  /// Table mode, exclusive locks: the name stays unavailable until at least this long after the
  /// grant (by the database's clock), however early the lock is released (ShedLock's
  /// lockAtLeastFor: a job that must not run more often than this). A release before then keeps
  /// the row, its lease cut to end at grant + min_hold, renewed by nobody. 0: none. A re-entry
  /// with a longer one raises it for the whole grant.
  milliseconds min_hold{0};
  /// Table mode, exclusive locks: lock-delay (Consul's). When this lock's lease ends WITHOUT a
  /// release (its holder paused, died, or lost its connection and could not renew), the name stays
  /// unavailable for this long after the lease's end, by the database's clock, for holders whose
  /// work may outlive their lease. A release (and a revoked holder letting go) frees the name at
  /// once; renewals are unaffected. 0: none. Up to 30 days. A re-entry with a longer one raises it
  /// for the whole grant.
  milliseconds lock_delay{0};
  /// Table mode, exclusive locks: a short note shown beside the holder (`dblock locks`, the status
  /// page, Store::locks()): who it is, what it does. Up to 255 bytes of valid UTF-8 without NUL;
  /// written by one more statement after the grant (a re-entry keeps the first level's), for this
  /// grant only. A note that cannot be written is logged, and the lock is held all the same. A view:
  /// the call copies it (the asio API when the operation starts, as it does the name), so
  /// LockOptions stays trivially destructible (GCC 12 destroys a temporary with a destructor inside
  /// a `co_await` expression twice). Default: none.
  std::string_view note;
};
static_assert(std::is_trivially_destructible_v<LockOptions>,
              "LockOptions is passed as a temporary inside co_await expressions (see LockOptions::note)");

/// Policy of one LockManager.
struct ManagerOptions {
  /// Table or advisory locks. Default: table.
  LockMode mode = LockMode::table;
  /// Lease of a lock unless LockOptions::ttl says otherwise. Default: 30 s. Limits: 3 ms .. 30 days.
  /// In advisory mode there is no lease; default_ttl / 3 is then how often the watchdog checks
  /// the pinned connections.
  milliseconds default_ttl{30'000};
  /// How often the watchdog renews every held lock in one statement. Zero = default_ttl / 3.
  /// Must be at most a third of every lock's TTL.
  milliseconds renew_interval{0};
  /// Owner identity scope for re-entry. Default: per thread.
  OwnerScope owner_scope = OwnerScope::thread;
  /// Waiting without a release notification (SQLite, MySQL; PostgreSQL only as a safety net):
  /// first delay, growth factor and cap of the exponential backoff; each delay is jittered
  /// uniformly in [delay/2, delay].
  milliseconds backoff_initial{5};
  double backoff_factor = 2.0;
  milliseconds backoff_max{500};
  /// Called when a held lock is found lost: from the watchdog thread (row gone, taken over,
  /// session broken) or from the deadline timer thread, at the local deadline, when no renewal
  /// succeeded in time, whatever the renewal statement in flight is doing. Must not block for
  /// long and must not throw. `token` is 0 for an advisory lock whose token was never asked for.
  std::function<void(std::string_view name, std::int64_t token)> on_lost;
  /// Table mode, plain locks: called from the watchdog thread, once per grant, when a renewal finds
  /// the grant asked to let go (Store::request_release, `dblock release --ask`, the sidecar's POST
  /// /api/request-release), at the latest one renewal interval after the request. A request only:
  /// the lock stays held until it is released. Must not block for long and must not throw.
  /// Default: none (Lock::release_requested() tells as well).
  std::function<void(std::string_view name, std::int64_t token)> on_release_requested;
  /// Called on every lock event, from the thread that caused it (renewed/lost: the watchdog).
  /// Must be cheap and must not throw. Default: none.
  std::function<void(const LockEvent&)> on_event;
  /// Extra text mixed into the owner id, e.g. a pod name: up to 64 bytes of UTF-8 without control
  /// characters (InvalidArgument otherwise). Default: none.
  std::string owner_tag;
  /// Table mode on PostgreSQL and MySQL/MariaDB: concurrent acquisitions and last-level releases
  /// of this manager that would otherwise wait for each other go out together, one statement per
  /// batch (doc/performance.md, "Combining"); each caller still gets exactly its own outcome. A
  /// lone request goes at once. false: one statement per request. Default: true.
  bool combine_requests = true;
  /// Table mode, plain locks: a last release that would wait for another release statement of
  /// this manager returns at once instead, and the manager's writer thread sends it with the others
  /// queued meanwhile (doc/semantics.md, "Releases written behind"). Such a release reports a lost
  /// lock only from what the manager knows (its local deadline, a renewal that failed), not from the
  /// database's answer (a row the writer then finds revoked or gone is only logged: the grant has
  /// ended as the release said), and another process may still find the row for a moment after it returns;
  /// acquisitions through this manager wait for it. A lone release is sent by its caller as before.
  /// Default: false.
  bool write_behind_releases = false;
  /// Table mode, every backend: a waiting acquisition of a plain exclusive lock (no lock_delay, no
  /// min_hold, owners by thread, not a re-entry) records itself in the database after its first try
  /// fails, and the last release of a holder of this manager grants the name to the first live waiter
  /// in the same commit: waiters are served in arrival order and a hand-off is one commit
  /// (doc/fair-queue.md). Releases are then not written behind. Default: false.
  bool fair_queue = false;
  /// With fair_queue: called on the waiting thread when an acquisition queues, with its place among
  /// the name's live waiters (1: it is granted the name next), which one more read-only statement
  /// reads only when this is set. Must not block for long and must not throw. Default: none.
  std::function<void(std::string_view name, std::int64_t position)> on_queued;
};

}  // namespace dblock
