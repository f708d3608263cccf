#pragma once
/// Fenced transactions: writes to the lock's own database that commit only while the lock's grant
/// is the name's live holder. See doc/semantics.md, "Fence", and doc/sql-contract.md.
///
///   auto lock = manager.acquire("orders/42", std::chrono::seconds(5));
///   store->fenced(lock, [&](dblock::FencedTransaction& tx) {
///     tx.execute("UPDATE orders SET state = $1 WHERE id = $2", {"shipped", "42"});  // ? on MySQL/SQLite
///   });
///
/// Several locks (a LockSet, or a vector of targets) fence one transaction together:
///   store->fenced(lock_set, [&](dblock::FencedTransaction& tx) { ... });
///
/// The transaction runs on one of the store's own sessions; its first statement is the fence: the
/// grant must be the live holder (else LockLost, nothing committed), and from then until the
/// transaction ends no takeover, reap, revocation or forced release of the lock's row can commit.
/// On PostgreSQL and MySQL/MariaDB the server also ends the transaction when it idles past the
/// lease left. On a connection the application owns, call the fence function itself (doc/sql-contract.md).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/export.hpp>
#include <dblock/lock.hpp>
#include <dblock/options.hpp>
#include <dblock/store.hpp>  // IWYU pragma: export (Store::fenced is how a FenceTarget is used)

namespace dblock {

namespace detail {
class FencedSession;
}

/// Which grant fences the transaction: a held Lock, or a (name, token) pair from elsewhere (another
/// process's `dblock run`, say, that passed its token on). A Lock that is a permit of a semaphore
/// or a read lock fences its own membership (member()): it must be a live member of the group that
/// holds the name, and fences of members do not exclude each other (doc/semantics.md, "Fence").
struct DBLOCK_EXPORT FenceTarget {
  FenceTarget(const Lock& lock);  // NOLINT(google-explicit-constructor): a Lock is the usual target
  FenceTarget(std::string name, std::int64_t token) : name(std::move(name)), token(token) {}
  /// A group's member held elsewhere: its owner id and kind (permit or shared) as the holders table
  /// has them, and its token.
  [[nodiscard]] static FenceTarget member(std::string name, std::string owner, HolderKind kind, std::int64_t token);
  std::string name;
  std::int64_t token = 0;
  HolderKind kind = HolderKind::exclusive;  ///< exclusive: a plain lock (or a read-write lock's writer)
  std::string owner;                        ///< a member's owner id; empty for a plain lock
};

/// Rows of a query, each cell as text (NULL: empty optional).
using FenceRows = std::vector<std::vector<std::optional<std::string>>>;

/// The open transaction handed to Store::fenced's work. Statements take text parameters, written
/// $1, $2 … on PostgreSQL and ? on MySQL/MariaDB and SQLite; the database converts them.
class DBLOCK_EXPORT FencedTransaction {
 public:
  /// A statement that returns rows.
  FenceRows query(std::string_view sql, const std::vector<std::string>& params = {});
  /// A statement that changes rows: how many it changed.
  std::int64_t execute(std::string_view sql, const std::vector<std::string>& params = {});
  /// The lease the grant had left when the fence ran, by the database's clock; empty on SQLite,
  /// whose write lock holds the name however long the transaction takes.
  [[nodiscard]] std::optional<std::chrono::milliseconds> lease_left() const noexcept;

  FencedTransaction(const FencedTransaction&) = delete;
  FencedTransaction& operator=(const FencedTransaction&) = delete;

 private:
  friend class Store;
  DBLOCK_HIDDEN FencedTransaction(detail::FencedSession& session, std::string name,
                                  std::chrono::steady_clock::time_point deadline);
  void check_deadline() const;
  detail::FencedSession& session_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace dblock
