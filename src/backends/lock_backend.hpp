#pragma once
// The lock role of a backend: table-mode locks as rows, one domain operation per call (no SQL
// above it, no retries or waiting inside it). The release notifications waiters listen to are a
// role of their own (notification_backend.hpp).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/store.hpp>

#include "backends/backend_errors.hpp"

namespace dblock::detail {

using std::chrono::milliseconds;

/// Owners no live holder can have (dblock's owner ids start with a host name, never with `(`): a
/// revoked row keeps its lease under kRevokedOwner + the first kMarkedOwnerKept characters of its
/// holder's owner, and a row kept after its release for the lock's minimum hold under
/// kMinHoldOwner + the same. Nobody renews or re-enters such a row; acquirers wait for its lease
/// like any other owner's. (9 + 240 and 10 + 240 fit MySQL's VARCHAR(255) owner.)
inline constexpr std::string_view kRevokedOwner = "(revoked)";
inline constexpr std::string_view kMinHoldOwner = "(min-hold)";
inline constexpr std::size_t kMarkedOwnerKept = 240;
/// Whether `row` (as the backend returns it, owner unpresented) is the row of `owner`'s grant
/// `token` that an operator revoked: its owner is marked, so that holder's release no longer
/// matches it, and only acknowledge_revoked deletes it.
inline bool revoked_from(const LockInfo& row, std::string_view owner, std::int64_t token) {
  std::string_view marked = row.owner;
  return row.token == token && marked.starts_with(kRevokedOwner) && !marked.substr(kRevokedOwner.size()).empty() &&
         owner.starts_with(marked.substr(kRevokedOwner.size()));
}

struct Grant {
  std::int64_t count = 0;  // re-entrancy depth after this acquisition
  std::int64_t token = 0;
};

/// A lock to renew: the row must still carry this owner and token and a live lease.
struct HeldRef {
  std::string_view name;
  std::string_view owner;
  std::int64_t token = 0;
  milliseconds ttl{0};
  HolderKind kind = HolderKind::exclusive;  // permit or shared: a group's member (GroupBackend)
};

/// What one renewal statement did: the positions in its `held` renewed, and those it left alone
/// because another transaction holds their row locked (an application's fenced transaction, the
/// holder's own included): neither renewed nor lost. The caller keeps those leases' deadlines and
/// asks again soon; no other owner can take a row while a fence share-locks it.
struct Renewal {
  Renewal() = default;
  /// Every position not renewed is gone (a backend that never leaves a row alone).
  Renewal(std::vector<std::size_t> renewed_positions)
      : renewed(std::move(renewed_positions)) {}  // NOLINT(google-explicit-constructor)
  std::vector<std::size_t> renewed;
  std::vector<std::size_t> busy;
  /// Among `renewed`: the positions whose grant was asked to let go (ask_release). A backend that
  /// cannot tell leaves it empty for a round (a renewal that met a fence on MySQL).
  std::vector<std::size_t> asked;
};

/// One acquisition of a combined statement (exclusive locks only; groups are never combined):
/// try_acquire's arguments.
struct AcquireRequest {
  std::string_view name;
  std::string_view owner;
  milliseconds ttl{0};
  std::int64_t held_token = 0;
  milliseconds lock_delay{0};
};

/// One last-level release of a combined statement: release_last's arguments.
struct ReleaseRequest {
  std::string_view name;
  std::string_view owner;
  std::int64_t token = 0;
};

class LockBackend {
 public:
  virtual ~LockBackend() = default;

  /// Insert, re-enter (same owner, live lease, token `held_token`: count+1, same token, the later
  /// of the two leases and the longer lock-delay) or take over (count 1, new token) a row whose
  /// name is free (its lease and the lock-delay after it have ended) or a live one of `owner` with
  /// another token (a leftover the caller no longer counts; it keeps the later of the two leases
  /// and the longer lock-delay, as a re-entry does, because a guard of the owner may still believe
  /// that row's lease: an acquisition landing after its reply was lost), in one round trip, with one clock
  /// reading; empty when another owner holds a live lease, or any owner's lease ended within its
  /// lock-delay. `held_token`: the token of the grant the caller holds on `name`, 0 for none.
  /// `lock_delay`: how long the name stays unavailable after this lease ends without a release
  /// (the row's expiry is the lease's end plus it; doc/semantics.md, "Lock-delay").
  virtual std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                           std::int64_t held_token, milliseconds lock_delay) = 0;
  std::optional<Grant> try_acquire(std::string_view name, std::string_view owner, milliseconds ttl,
                                   std::int64_t held_token) {
    return try_acquire(name, owner, ttl, held_token, milliseconds{0});
  }
  /// Decrements the count and deletes the row at zero. Returns the count left, or empty when the
  /// row does not carry this owner and token (nothing is changed then).
  virtual std::optional<std::int64_t> release(std::string_view name, std::string_view owner, std::int64_t token) = 0;
  /// Release by the holder of the last level it counts: deletes the row whatever its count (a
  /// count above the caller's is a re-entry whose reply was lost, held by nobody, which would keep
  /// the name blocked until the lease ends) in one plain statement. Returns 0, or empty when the
  /// row does not carry this owner and token.
  virtual std::optional<std::int64_t> release_last(std::string_view name, std::string_view owner,
                                                   std::int64_t token) = 0;
  /// The most requests one try_acquire_many / release_last_many statement may carry; 1: this
  /// backend does not combine, and the core never calls them.
  [[nodiscard]] virtual std::size_t max_batch() const noexcept = 0;
  /// try_acquire for every request, with the same rules per name, in ONE statement and one
  /// transaction. REQUIRES: names distinct and sorted by bytes (the one lock order of every
  /// statement that locks several rows). Returns one outcome per request, in request order. All or
  /// nothing: on an error no request took effect, except OutcomeUnknown (then all may have).
  virtual std::vector<std::optional<Grant>> try_acquire_many(std::span<const AcquireRequest> requests) = 0;
  /// release_last for every request in ONE statement: true where the row carried that owner and
  /// token and was deleted. Same requirements and error contract as try_acquire_many.
  virtual std::vector<bool> release_last_many(std::span<const ReleaseRequest> requests) = 0;
  /// Renews every given lock in one statement, never shortening a lease and keeping a lock's
  /// lock-delay after its renewed lease, and returns the positions in `held` of those renewed (the
  /// row still carried that name, owner and token and a live lease; a lease within its lock-delay
  /// has ended). Waits for the reply until `reply_by` at most where the driver allows (PostgreSQL;
  /// MySQL and SQLite are bounded by their statement timeout), then abandons the session and
  /// throws OutcomeUnknown.
  /// A row another transaction holds locked is left alone and reported busy, not waited for
  /// (PostgreSQL, MySQL/MariaDB; SQLite's one writer waits for a fence's write lock).
  virtual Renewal renew(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) = 0;
  /// Read-only: how long until `name` is free (its lease and any lock-delay after it), empty when
  /// there is no row.
  virtual std::optional<milliseconds> lease_left(std::string_view name) = 0;
  /// Read-only: the row for `name`, if any.
  std::optional<LockInfo> read(std::string_view name) {
    auto rows = list_rows(name, kAllRows);
    if (rows.empty()) return std::nullopt;
    return std::move(rows.front());
  }
  /// Read-only: every row, ordered by name.
  std::vector<LockInfo> list() { return list_rows({}, kAllRows); }
  /// Read-only: the first `limit` rows by name, without sending the others (a status page on a
  /// table of a million rows).
  std::vector<LockInfo> list_first(std::size_t limit) { return list_rows({}, limit); }
  /// Deletes the row whoever holds it, at once (the operator's unsafe delete: for a holder known
  /// to be dead). Returns whether a row existed.
  virtual bool force_release(std::string_view name) = 0;
  /// Revokes the live holder of `name`: its row's owner becomes kRevokedOwner + its owner, lease
  /// and token unchanged, so renewals and re-entries no longer match and acquirers wait until the
  /// lease ends (or acknowledge_revoked deletes it). Returns false when no live row was there to
  /// revoke (none, expired, already revoked, or kept for a minimum hold).
  virtual bool revoke(std::string_view name) = 0;
  /// Asks the live exclusive holder of `name` to let go: marks its grant (the row's token) as asked,
  /// which the holder's next renewal reports (Renewal::asked); ownership, lease and token stay. A
  /// later grant of the name is not asked. Safe to send twice. Returns false when no live exclusive
  /// holder was there (none, expired, a group's row, revoked, or kept for a minimum hold).
  virtual bool ask_release(std::string_view name) = 0;
  /// The holder's note for its grant (LockOptions::note), shown by list_rows while the row carries
  /// this grant. Does nothing when the row does not carry this owner and token.
  virtual void set_note(std::string_view name, std::string_view owner, std::int64_t token, std::string_view note) = 0;
  /// The revoked holder's acknowledgement (it no longer believes it holds the lock): deletes the
  /// row revoked from (owner, token) and wakes waiters. Returns whether it did.
  virtual bool acknowledge_revoked(std::string_view name, std::string_view owner, std::int64_t token) = 0;
  /// The last release of a lock with a minimum hold: when less than `min_hold` has passed since the
  /// grant by the database's clock, the row stays with its lease ending at grant + min_hold and its
  /// owner turned into kMinHoldOwner + owner (nobody renews or re-enters it) and no lock-delay (it
  /// was released). Returns false and
  /// changes nothing when the minimum hold has passed or the row does not carry this owner and
  /// token: the caller then releases as usual.
  virtual bool release_keeping(std::string_view name, std::string_view owner, std::int64_t token,
                               milliseconds min_hold) = 0;
  /// Deletes at most `batch` rows whose lease has ended at the moment of deletion, skipping rows
  /// another reaper or an acquirer is working on. Returns how many it deleted.
  virtual std::size_t reap(std::size_t batch) = 0;
  virtual LockCensus census() = 0;

  /// The applied schema version. @throws SchemaError(missing) when dblock's tables do not exist.
  virtual int schema_version() = 0;

 protected:
  static constexpr std::size_t kAllRows = static_cast<std::size_t>(INT64_MAX);
  /// Rows ordered by name: all of them when `only_name` is empty (lock names never are), at most `limit`.
  virtual std::vector<LockInfo> list_rows(std::string_view only_name, std::size_t limit) = 0;
};

}  // namespace dblock::detail
