#pragma once
// The bench role of a backend: the performance floor `dblock bench` compares dblock with, and
// rows to reap. Nothing else uses it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace dblock::detail {

/// The performance floor for `dblock bench`: this backend's own acquire and release statements run
/// with the bare driver on one dedicated session, prepared once — no pool, no validation, no
/// bookkeeping. Single-threaded.
class RawLockClient {
 public:
  virtual ~RawLockClient() = default;
  /// The token when granted.
  virtual std::optional<std::int64_t> acquire(const std::string& name, const std::string& owner,
                                              std::int64_t ttl_ms) = 0;
  virtual bool release(const std::string& name, const std::string& owner, std::int64_t token) = 0;
  /// The server's own blocking lock (PostgreSQL: pg_advisory_lock), the floor for hand-offs;
  /// false when the dialect has none.
  virtual bool blocking_lock(std::int64_t key) = 0;
  virtual void blocking_unlock(std::int64_t key) = 0;
  /// The server functions blocking_lock/unlock call, for the benchmark's labels.
  [[nodiscard]] virtual std::string_view blocking_lock_functions() const noexcept { return "none"; }
};

/// The floor of the fence scenario: one short write transaction — the dialect's begin, one insert
/// into a bench-owned table (created if missing), commit — with the bare driver on one dedicated
/// session, prepared once. Single-threaded.
class RawWriteClient {
 public:
  virtual ~RawWriteClient() = default;
  /// One committed transaction inserting (run, n); with `fence`, the fence for (name, token) as its
  /// first statement, as Store::fenced runs it: the fence's own cost without dblock's.
  virtual void write(const std::string& run, std::int64_t n,
                     const std::optional<std::pair<std::string, std::int64_t>>& fence) = 0;
  /// The same insert as text, for Store::fenced ($1, $2 or ?, ?; both parameters as text).
  [[nodiscard]] virtual const std::string& insert_sql() const noexcept = 0;
  /// Deletes the rows of `run`.
  virtual void clear(const std::string& run) = 0;
};

/// The server's ceiling for dblock's own statements: one connection driven as leanly as the driver
/// allows (PostgreSQL: pipeline mode), no pool, no locking, no wake-ups. Each cycle is one round
/// trip: the names the previous cycle was granted are released in one statement (release_last_many;
/// one name: release_last) and `names` acquired in another (acquire_many; one name: acquire), each
/// its own transaction, both sent before either reply is read. Single-threaded.
class RawBatchClient {
 public:
  virtual ~RawBatchClient() = default;
  /// `names`: distinct and sorted by bytes, as the core's batches are. Returns how many were granted.
  virtual std::size_t cycle(std::span<const std::string> names, const std::string& owner, std::int64_t ttl_ms) = 0;
  /// Releases what the last cycle was granted.
  virtual void release_held() = 0;
};

/// Which hand-written SQL: as a user would write it, or with the delete committed without waiting
/// for the disk (what dblock's release does on PostgreSQL), the most such SQL gains from that.
enum class HandWritten { synchronous, asynchronous_delete };

class BenchBackend {
 public:
  virtual ~BenchBackend() = default;
  /// For `dblock bench`: a bare-driver client running the same statements (see RawLockClient).
  virtual std::unique_ptr<RawLockClient> raw_client() = 0;
  /// For `dblock bench`: the same bare client running the simplest SQL a user would write by hand
  /// (an upsert with the token drawn in VALUES, a plain delete), none of dblock's safety; null
  /// where the bench has none for this backend (or for `how`).
  virtual std::unique_ptr<RawLockClient> hand_written_client(HandWritten how) {
    (void)how;
    return nullptr;
  }
  /// For `dblock bench --scenario fence`: a bare-driver write transaction (see RawWriteClient);
  /// null where the bench has none for this backend.
  virtual std::unique_ptr<RawWriteClient> raw_write_client() { return nullptr; }
  /// For `dblock bench`: the ceiling of the combined statements (see RawBatchClient); null where
  /// the backend has no such client.
  virtual std::unique_ptr<RawBatchClient> ceiling_client() { return nullptr; }
  /// For `dblock bench`: inserts `count` rows named `<stem><i>` whose lease has already ended.
  virtual void seed_expired(std::string_view stem, std::size_t count) = 0;
};

}  // namespace dblock::detail
