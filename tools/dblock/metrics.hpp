#pragma once
// The sidecar's Prometheus metrics: counters and a histogram fed by reaper cycles, gauges read
// from the lock table at scrape time. Rendered in the Prometheus text exposition format 0.0.4.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <dblock/reaper.hpp>
#include <dblock/store.hpp>

namespace dblock::cli {

class ReaperMetrics {
 public:
  void record(const ReapCycle& cycle);
  /// Counts a cycle that could not start (database unreachable before the store opened).
  void record_failure(const std::string& error);
  /// `census` is empty when the database could not be read at scrape time.
  [[nodiscard]] std::string render(const std::optional<LockCensus>& census) const;

  [[nodiscard]] std::uint64_t consecutive_failures() const { return consecutive_failures_.load(); }
  [[nodiscard]] std::string last_error() const;

 private:
  static constexpr std::array<double, 10> kBuckets{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};

  std::atomic<std::uint64_t> rows_{0}, cycles_{0}, failures_{0}, consecutive_failures_{0};
  mutable std::mutex mutex_;  // guards the histogram and last_error_
  std::array<std::uint64_t, kBuckets.size()> bucket_counts_{};
  std::uint64_t observations_ = 0;
  double duration_sum_ = 0;
  std::string last_error_;
};

}  // namespace dblock::cli
