#include "dblock/metrics.hpp"

#include <fmt/format.h>

namespace dblock::cli {

void ReaperMetrics::record(const ReapCycle& cycle) {
  rows_ += cycle.rows;
  ++cycles_;
  double seconds = static_cast<double>(cycle.duration.count()) / 1e6;
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++bucket_counts_[i];
  ++observations_;
  duration_sum_ += seconds;
  if (cycle.ok) {
    consecutive_failures_ = 0;
  } else {
    ++failures_;
    ++consecutive_failures_;
    last_error_ = cycle.error;
  }
}

void ReaperMetrics::record_failure(const std::string& error) {
  ++cycles_;
  ++failures_;
  ++consecutive_failures_;
  std::lock_guard lock(mutex_);
  last_error_ = error;
}

std::string ReaperMetrics::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

std::string ReaperMetrics::render(const std::optional<LockCensus>& census) const {
  std::string out;
  auto metric = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  metric("dblock_reaper_rows_reaped_total", "counter", "Expired lock rows deleted.", rows_.load());
  metric("dblock_reaper_cycles_total", "counter", "Reaper cycles run, failed ones included.", cycles_.load());
  metric("dblock_reaper_failures_total", "counter", "Reaper cycles that failed.", failures_.load());
  {
    std::lock_guard lock(mutex_);
    out +=
        "# HELP dblock_reaper_cycle_duration_seconds Duration of reaper cycles.\n"
        "# TYPE dblock_reaper_cycle_duration_seconds histogram\n";
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
      out +=
          fmt::format("dblock_reaper_cycle_duration_seconds_bucket{{le=\"{}\"}} {}\n", kBuckets[i], bucket_counts_[i]);
    out += fmt::format("dblock_reaper_cycle_duration_seconds_bucket{{le=\"+Inf\"}} {}\n", observations_);
    out += fmt::format("dblock_reaper_cycle_duration_seconds_sum {}\n", duration_sum_);
    out += fmt::format("dblock_reaper_cycle_duration_seconds_count {}\n", observations_);
  }
  metric("dblock_database_up", "gauge", "1 when the lock table could be read for this scrape.", census ? 1 : 0);
  if (census) {
    metric("dblock_locks_held", "gauge", "Locks with a live lease.", census->held);
    metric("dblock_locks_expired", "gauge", "Rows whose lease ended, not yet reaped.", census->expired);
    metric("dblock_oldest_held_lock_age_seconds", "gauge", "Age of the oldest live grant.",
           static_cast<double>(census->oldest_held_age.count()) / 1000.0);
    metric("dblock_queued_waiters", "gauge", "Live waiters in the fair queue (ManagerOptions::fair_queue).",
           census->queued);
  }
  return out;
}

}  // namespace dblock::cli
