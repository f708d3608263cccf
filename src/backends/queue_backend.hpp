#pragma once
// The fair-queue role of a backend (doc/fair-queue.md): waiters recorded as rows, granted in arrival
// order by the release of the name's last holder, in the same statement and commit. One domain
// operation per call; the waiting itself (when to look, renew, leave) is the core's.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/lock_backend.hpp"

namespace dblock::detail {

/// What a waiter's turn found: queued (seq > 0, no grant) or granted (seq 0, a grant), or
/// neither (seq 0, no grant: the waiter's row is gone and no grant is its own).
struct Turn {
  std::int64_t seq = 0;
  std::optional<Grant> grant;
  /// With a grant: its lease left. Queued: the holder's lease left (0: the name has no live row).
  milliseconds left{0};
};

/// A waiter's read-only look at its own place: whether its row is still queued, and the grant a
/// release handed it, if any.
struct WaiterLook {
  bool queued = false;
  std::optional<Grant> grant;
  milliseconds grant_left{0};   // with a grant: its lease left
  milliseconds holder_left{0};  // the name's row, whoever holds it: its lease left (0: none live)
};

/// One edge of the wait graph: the live waiter `waiter` waits for `name`, whose live row `holder`
/// holds. `queued_order` orders the edges by when their waiter queued (equal values are possible on
/// MySQL/MariaDB): it is compared, never read as a time.
struct WaitEdge {
  std::string waiter;
  std::string name;
  std::string holder;
  std::int64_t queued_order = 0;
};

class QueueBackend {
 public:
  virtual ~QueueBackend() = default;

  /// One round trip. `seq` 0: a new arrival takes `name` (exclusive, lease `ttl`) when it is free and
  /// nobody live waits, or else is queued behind every earlier waiter with a waiter lease of
  /// `waiter_ttl`. `seq` > 0: the queued waiter renews its waiter lease, and takes the name when it
  /// is free and it is the first live waiter; when its row is gone, the grant a release handed it.
  virtual Turn take_turn(std::string_view name, std::string_view owner, milliseconds ttl, milliseconds waiter_ttl,
                         std::int64_t seq) = 0;
  /// Read-only, one round trip: the waiter's row and its grant.
  virtual WaiterLook look(std::string_view name, std::string_view owner, std::int64_t seq) = 0;
  /// Deletes the waiter's row; true when it was there (then no release can grant it any more),
  /// false when it was gone (granted, or reaped). Safe to send twice.
  virtual bool leave(std::string_view name, std::string_view owner, std::int64_t seq) = 0;
  /// LockBackend::release_last that also grants the name to the first live exclusive waiter in the
  /// same commit and wakes it; to the live exclusive waiter whose owner is `successor` (non-empty)
  /// ahead of earlier ones when it waits (migration 0019). Returns 0, or empty when the row does not
  /// carry this owner and token.
  virtual std::optional<std::int64_t> release_handing_off(std::string_view name, std::string_view owner,
                                                          std::int64_t token, std::string_view successor) = 0;
  /// Deletes at most `batch` waiter rows whose waiter lease has ended. Returns how many. (MariaDB:
  /// also at most `batch` arrival counters of names nobody waits for, idle ten minutes.)
  virtual std::size_t reap_waiters(std::size_t batch) = 0;
  /// Read-only: how many waiter rows `name` has, live or not (tests, status).
  virtual std::size_t waiter_rows(std::string_view name) = 0;
  /// Read-only, one statement: the first `limit` live waiters by name, then arrival, each with its
  /// position among its name's live waiters (from 1) and the time since it queued, by the
  /// database's clock (Store::waiters()).
  virtual std::vector<WaiterInfo> list_waiters(std::size_t limit) = 0;
  /// Read-only, one round trip: the place of waiter `seq` among the live waiters of `name` (1: the
  /// first), 0 when its row is gone or its waiter lease ended.
  virtual std::int64_t place(std::string_view name, std::int64_t seq) = 0;
  /// Read-only, one statement: the wait graph's edges (a live exclusive waiter and the live holder of
  /// its name), at most `limit` of them, earliest queued first. `queued_order`: the waiter's seq where it
  /// is drawn from one counter for every name (PostgreSQL's sequence, SQLite's one writer), else the
  /// time it queued in microseconds (MySQL/MariaDB, whose seq counts per name).
  virtual std::vector<WaitEdge> wait_edges(std::size_t limit) = 0;
};

}  // namespace dblock::detail
