#pragma once
/// Prometheus metrics of LockManagers on the application's own prometheus::Registry
/// (prometheus-cpp; link dblock::prometheus, built when prometheus-cpp is found). Fed by the
/// manager's event hook: pass handler() as ManagerOptions::on_event. Families (doc/metrics.md):
///   dblock_acquire_wait_seconds{outcome="acquired|timeout|failed"}  histogram
///   dblock_lock_hold_seconds{end="released|lost"}                   histogram
///   dblock_held_locks, dblock_waiting_acquires                      gauges
///   dblock_locks_lost_total, dblock_acquire_contended_total         counters
///   dblock_renewal_duration_seconds{outcome="renewed|failed"}       histogram
///   dblock_statement_retries_total                                  counter
/// Lock names are never a label unless PrometheusOptions::lock_label maps them to a bounded set.
///
/// Example:
///   auto registry = std::make_shared<prometheus::Registry>();
///   dblock::PrometheusMetrics metrics(*registry, {.labels = {{"service", "billing"}}});
///   dblock::LockManager locks(store, {.on_event = metrics.handler()});
///   prometheus::Exposer exposer{"127.0.0.1:9100"};
///   exposer.RegisterCollectable(registry);

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace dblock {

struct PrometheusOptions {
  /// Maps a lock name to a label value from a small, fixed set (e.g. "orders/42" -> "orders"):
  /// the per-lock families then carry a `lock` label. Every distinct value is a time series kept
  /// for the life of the process, so never return the name itself for unbounded names. Must be
  /// thread-safe and must not throw. Default: none (no `lock` label).
  std::function<std::string(std::string_view name)> lock_label;
  /// Constant labels on every family, e.g. {{"service", "billing"}}. Default: none.
  std::map<std::string, std::string> labels;
  /// Bucket bounds in seconds. Defaults: waits 1 ms .. 5 min, holds 10 ms .. 1 h, renewals 1 ms .. 10 s.
  std::vector<double> wait_buckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300};
  std::vector<double> hold_buckets{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600};
  std::vector<double> renewal_buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10};
};

class PrometheusMetrics {
 public:
  /// Registers the families on `registry`, which must outlive this object.
  /// @throws std::invalid_argument (prometheus-cpp's) for a bad constant label.
  explicit PrometheusMetrics(prometheus::Registry& registry, PrometheusOptions options = {});
  ~PrometheusMetrics();
  PrometheusMetrics(const PrometheusMetrics&) = delete;
  PrometheusMetrics& operator=(const PrometheusMetrics&) = delete;

  /// Records one event. Thread-safe, never throws.
  void record(const LockEvent& event) noexcept;
  /// An on_event handler calling record(); this object must outlive every manager given it.
  [[nodiscard]] std::function<void(const LockEvent&)> handler();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dblock
