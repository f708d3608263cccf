#pragma once
/// Occurrences: a scheduled job that runs once per occurrence of its schedule across a fleet.
/// Every host fires the job (a systemd timer, cron); the lock excludes runs that overlap in time,
/// and the occurrence record, kept in the database past the run, refuses every later run of the
/// same occurrence. See doc/semantics.md, "Occurrences".
///
///   auto lock = manager.try_acquire("nightly-report");
///   if (!lock) return;                                    // another host runs it now
///   auto run = Occurrence::claim(store, *lock, {.period = std::chrono::hours(24)});
///   if (!run.claimed()) return;                           // this occurrence has run already
///   bool ok = report();
///   run.finish(ok ? 0 : 1);

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/export.hpp>
#include <dblock/lock.hpp>
#include <dblock/store.hpp>

namespace dblock {

struct OccurrenceOptions {
  /// The schedule's period: occurrence k covers the database-clock instants
  /// [k*period + offset - tolerance, (k+1)*period + offset - tolerance). Zero: `key` names it.
  std::chrono::milliseconds period{0};
  /// How early a host may fire before the scheduled instant by the database's clock (its clock
  /// skew). Negative: the default, a tenth of the period capped at 5 minutes.
  std::chrono::milliseconds tolerance{-1};
  /// Where the periods start after the Unix epoch (UTC), in [0, period): e.g. 22h with a one-day
  /// period for a job at local midnight in UTC+2.
  std::chrono::milliseconds offset{0};
  /// An explicit occurrence key (e.g. the scheduled instant a unit knows), instead of `period`.
  std::string key;
  /// Whether a failed or abandoned run of this occurrence may be run again (by another host or a
  /// later firing in the same occurrence). Default: no — at most one run per occurrence.
  bool retry_failed = false;
  /// How long the record is kept (the reaper deletes it after). Zero: the default, 3 periods (at
  /// least 2 are enforced), or 7 days for an explicit key.
  std::chrono::milliseconds keep{0};
};

enum class OccurrenceStatus { running, succeeded, failed, abandoned };
[[nodiscard]] DBLOCK_EXPORT const char* occurrence_status_name(OccurrenceStatus status) noexcept;

struct OccurrenceInfo {
  std::string name;
  std::string occurrence;
  std::string owner;
  std::int64_t token = 0;                               ///< the lock grant the run held
  OccurrenceStatus status = OccurrenceStatus::running;  ///< abandoned: running, but its lease ended
  std::int64_t attempts = 0;
  std::optional<int> exit_code;
  std::chrono::milliseconds age{0};  ///< since it was (last) claimed, by the database's clock
};

/// The occurrence key for now by the database's clock: its scheduled instant in UTC and the period
/// ("2024-05-01T10:00:00Z/60m"), or options.key.
/// @throws InvalidArgument for a bad period, tolerance, offset or key.
[[nodiscard]] DBLOCK_EXPORT std::string occurrence_key(Store& store, const OccurrenceOptions& options);

/// Every occurrence record, ordered by name and occurrence.
[[nodiscard]] DBLOCK_EXPORT std::vector<OccurrenceInfo> occurrences(Store& store);

/// A claim of one occurrence of the job named like `lock`, by the holder of `lock`. Move-only. A
/// claimed occurrence not finished when the object goes is recorded as failed (exit code -1).
class DBLOCK_EXPORT Occurrence {
 public:
  /// Claims the current occurrence while `lock` is held: atomic across hosts (one statement on the
  /// primary key). Not claimed() when the occurrence was already claimed (and is not a failed one
  /// that options.retry_failed lets run again), or when `lock` no longer holds a live lease.
  [[nodiscard]] static Occurrence claim(const std::shared_ptr<Store>& store, const Lock& lock,
                                        const OccurrenceOptions& options);

  [[nodiscard]] bool claimed() const noexcept { return claimed_; }
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  /// When not claimed: the record that refused the claim, if it could be read.
  [[nodiscard]] const std::optional<OccurrenceInfo>& existing() const noexcept { return existing_; }
  /// Records how the run ended: 0 succeeded, anything else failed. Returns false when the record no
  /// longer carried this claim (another host retried it), or there was none.
  bool finish(int exit_code);

  Occurrence(Occurrence&& other) noexcept;
  Occurrence& operator=(Occurrence&&) = delete;
  Occurrence(const Occurrence&) = delete;
  Occurrence& operator=(const Occurrence&) = delete;
  ~Occurrence();

 private:
  Occurrence() = default;
  std::shared_ptr<Store> store_;
  std::string name_, key_;
  std::int64_t token_ = 0;
  bool claimed_ = false;
  bool finished_ = false;
  std::optional<OccurrenceInfo> existing_;
};

}  // namespace dblock
