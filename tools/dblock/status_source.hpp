#pragma once
// What the sidecar's status page, JSON endpoint and lock-table gauges read: the lock table's rows,
// the fair queue's waiters and the census, each cached for a refresh interval, so that any number of scrapes and page
// loads cost at most one census (a scan of the table) per interval and one listing per interval.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <dblock/store.hpp>

namespace dblock::cli {

struct StatusSnapshot {
  std::vector<LockInfo> rows;       ///< at most the row limit, ordered by name
  bool truncated = false;           ///< the table has more rows than those
  std::vector<WaiterInfo> waiters;  ///< the fair queue's live waiters, at most the row limit, by name then arrival
  bool waiters_truncated = false;   ///< there are more waiters than those
  std::optional<LockCensus> census;
  std::chrono::system_clock::time_point read_at;
  std::string error;  ///< the last read's failure, empty when it worked
};

class StatusSource {
 public:
  using StoreGetter = std::function<std::shared_ptr<Store>()>;
  StatusSource(StoreGetter store, std::chrono::milliseconds census_every, std::chrono::milliseconds rows_every,
               std::size_t row_limit);

  /// The census, read again when older than census_every; empty when the database cannot be read.
  std::optional<LockCensus> census();
  /// Rows and census, the rows read again when older than rows_every.
  StatusSnapshot snapshot();
  /// How long the last census statement took (for the dblock_census_duration_seconds gauge).
  [[nodiscard]] std::chrono::microseconds last_census_duration() const;
  /// Forgets the cached rows and census (after a write action or a reaper cycle that deleted rows,
  /// so that the next page and scrape show it).
  void invalidate();

 private:
  StoreGetter store_;
  const std::chrono::milliseconds census_every_, rows_every_;
  const std::size_t row_limit_;
  mutable std::mutex census_mutex_, rows_mutex_;  // one reader at a time; the others wait for its result
  std::optional<LockCensus> census_;
  std::chrono::steady_clock::time_point census_at_{};
  std::chrono::microseconds census_duration_{0};
  std::optional<StatusSnapshot> rows_;
  std::chrono::steady_clock::time_point rows_at_{};
};

}  // namespace dblock::cli
