#pragma once
// The group role of a backend: several holders of one name in table mode — the permit holders of
// a counting semaphore and the readers of a read-write lock — and writers marked as waiting, so
// that a stream of readers cannot starve them. A group holds its name through the name's lock
// row, so plain locks and groups of one name exclude each other. One domain operation per call.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>

#include "backends/lock_backend.hpp"
#include "base/holder_kind.hpp"

namespace dblock::detail {

class GroupBackend {
 public:
  virtual ~GroupBackend() = default;

  /// Joins, or re-enters (`held_token`: the caller's membership token, 0 for none), the group of
  /// `kind` (permit or shared) holding `name`, or starts one when the name is free, in one round
  /// trip with one clock reading. Refused (empty) while another exclusive holder or a group of the
  /// other kind holds it, while `capacity` permits are held by others (permit), or while a writer
  /// waits (shared). The token: the membership's own, rising per name in grant order (a group's
  /// first member's is the group's epoch); a reader's own row of the same group, live or lapsed,
  /// taken afresh keeps its token and count.
  virtual std::optional<Grant> try_acquire_member(std::string_view name, std::string_view owner, HolderKind kind,
                                                  std::int64_t capacity, milliseconds ttl, std::int64_t held_token) = 0;
  /// One level of a membership: the levels left, or empty when the membership is no longer the
  /// caller's (nothing is changed then). The group's lock row goes with its last live member.
  virtual std::optional<std::int64_t> release_member(std::string_view name, std::string_view owner, HolderKind kind,
                                                     std::int64_t token) = 0;
  /// As LockBackend::renew, for memberships (`held[i].kind` permit or shared): renews those still
  /// live in a live group, and their groups' lock rows with them.
  virtual Renewal renew_members(std::span<const HeldRef> held, std::chrono::steady_clock::time_point reply_by) = 0;
  /// For a waiting member: when a place may come free — the earliest lease of a permit group's live
  /// members, else the lease left on `name` (as LockBackend::lease_left).
  virtual std::optional<milliseconds> first_lease_end(std::string_view name) = 0;
  /// For an exclusive waiter: the lease left on `name` (as LockBackend::lease_left), and, when
  /// readers hold it, `owner` marked as a waiting writer for `mark_for` (no new reader is admitted
  /// meanwhile). Sets `marked` when it did.
  virtual std::optional<milliseconds> lease_left_marking_writer(std::string_view name, std::string_view owner,
                                                                milliseconds mark_for, bool& marked) = 0;
  /// Takes back the waiting-writer mark of `owner` on `name`, if any.
  virtual void unmark_writer(std::string_view name, std::string_view owner) = 0;
};

}  // namespace dblock::detail
