#pragma once
// The occurrence role of a backend: records of a scheduled job's occurrences, claimed atomically
// by the holder of the job's lock and kept past its run (migration 0007). One domain operation per
// call; no retries or waiting inside.

#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include <dblock/occurrence.hpp>

namespace dblock::detail {

struct OccurrenceClaimRef {
  std::string_view name;        // the job's lock name
  std::string_view occurrence;  // its key
  std::string_view owner;
  std::int64_t token = 0;  // the caller's live grant on `name`
  std::chrono::milliseconds keep{0};
  bool retry_failed = false;
};

/// A status as the statements write it ('abandoned' only as listed).
[[nodiscard]] inline OccurrenceStatus occurrence_status_of(std::string_view text) noexcept {
  if (text == "succeeded") return OccurrenceStatus::succeeded;
  if (text == "failed") return OccurrenceStatus::failed;
  if (text == "abandoned") return OccurrenceStatus::abandoned;
  return OccurrenceStatus::running;
}

class OccurrenceBackend {
 public:
  virtual ~OccurrenceBackend() = default;
  /// The database's clock, milliseconds since the Unix epoch.
  virtual std::int64_t clock_ms() = 0;
  /// Inserts the record 'running' when there is none, in one statement, only while `token` holds a
  /// live lease on `name`. An existing record is taken over only when it carries `token` already (a
  /// claim whose reply was lost) or, with retry_failed, when it failed or was abandoned (its
  /// token's lease ended: the caller's live grant proves that). True when the record is the caller's.
  virtual bool claim(const OccurrenceClaimRef& claim) = 0;
  /// Records the end of the run that claimed with `token`; false when the record is not that run's.
  virtual bool finish(std::string_view name, std::string_view occurrence, std::int64_t token, int exit_code) = 0;
  /// Records ordered by name and occurrence: all, or those of `only_name` when it is not empty.
  virtual std::vector<OccurrenceInfo> list(std::string_view only_name) = 0;
  /// Deletes at most `batch` records kept long enough, except one still running under a live
  /// lease. Returns how many.
  virtual std::size_t reap(std::size_t batch) = 0;
};

}  // namespace dblock::detail
