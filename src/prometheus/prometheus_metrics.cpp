// PrometheusMetrics: LockEvents turned into prometheus-cpp metrics. Only the public event hook is
// used, so the adapter stays outside the library proper (its own target, optional dependency).

#include <dblock/prometheus.hpp>

#include <chrono>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace dblock {

namespace {

double seconds(std::chrono::microseconds duration) { return static_cast<double>(duration.count()) / 1e6; }
double seconds(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()) / 1e3; }

/// The manager whose waits this thread reports: acquire() waits on its caller's thread, one at a
/// time, and ends each wait with exactly one acquired, timeout or failed event on that thread.
thread_local const void* waiting_for = nullptr;

}  // namespace

struct PrometheusMetrics::Impl {
  explicit Impl(prometheus::Registry& registry, PrometheusOptions options_in)
      : options(std::move(options_in)),
        wait(prometheus::BuildHistogram()
                 .Name("dblock_acquire_wait_seconds")
                 .Help("Time acquire() spent until it was granted, timed out or failed, by outcome.")
                 .Labels(options.labels)
                 .Register(registry)),
        hold(prometheus::BuildHistogram()
                 .Name("dblock_lock_hold_seconds")
                 .Help("How long grants were held, by how they ended (released or lost).")
                 .Labels(options.labels)
                 .Register(registry)),
        held(prometheus::BuildGauge()
                 .Name("dblock_held_locks")
                 .Help("Locks this process holds now (re-entries count once).")
                 .Labels(options.labels)
                 .Register(registry)),
        waiting(prometheus::BuildGauge()
                    .Name("dblock_waiting_acquires")
                    .Help("acquire() calls of this process waiting for a lock now.")
                    .Labels(options.labels)
                    .Register(registry)),
        lost(prometheus::BuildCounter()
                 .Name("dblock_locks_lost_total")
                 .Help("Held locks lost (lease not renewed in time, taken over, revoked, session broken).")
                 .Labels(options.labels)
                 .Register(registry)),
        contended(prometheus::BuildCounter()
                      .Name("dblock_acquire_contended_total")
                      .Help("Acquisition tries that found another live owner.")
                      .Labels(options.labels)
                      .Register(registry)),
        renewal(prometheus::BuildHistogram()
                    .Name("dblock_renewal_duration_seconds")
                    .Help("Round trip of renewal cycles (one statement renews every held lock), by outcome.")
                    .Labels(options.labels)
                    .Register(registry)),
        retries(prometheus::BuildCounter()
                    .Name("dblock_statement_retries_total")
                    .Help("Statements run again after a deadlock, lock-wait timeout or busy database.")
                    .Labels(options.labels)
                    .Register(registry)),
        renewed(renewal.Add({{"outcome", "renewed"}}, options.renewal_buckets)),
        renew_failed(renewal.Add({{"outcome", "failed"}}, options.renewal_buckets)),
        retried(retries.Add({})) {
    // Without a lock label every series exists from the start, so a dashboard sees zeros, not gaps.
    if (!options.lock_label) {
      for (const char* outcome : {"acquired", "timeout", "failed"})
        (void)wait.Add({{"outcome", outcome}}, options.wait_buckets);
      for (const char* end : {"released", "lost"}) (void)hold.Add({{"end", end}}, options.hold_buckets);
      (void)held.Add({});
      (void)waiting.Add({});
      (void)lost.Add({});
      (void)contended.Add({});
    }
  }

  prometheus::Labels with_lock(std::string_view name, prometheus::Labels labels) const {
    if (options.lock_label) labels.emplace("lock", options.lock_label(name));
    return labels;
  }

  void record(const LockEvent& event, const void* self) {
    switch (event.kind) {
      case LockEventKind::acquired:
        wait.Add(with_lock(event.name, {{"outcome", "acquired"}}), options.wait_buckets).Observe(seconds(event.waited));
        if (event.count == 1) held.Add(with_lock(event.name, {})).Increment();
        end_wait(event, self);
        break;
      case LockEventKind::timeout:
      case LockEventKind::failed:
        wait.Add(with_lock(event.name, {{"outcome", event.kind == LockEventKind::timeout ? "timeout" : "failed"}}),
                 options.wait_buckets)
            .Observe(seconds(event.waited));
        end_wait(event, self);
        break;
      case LockEventKind::waiting:
        waiting.Add(with_lock(event.name, {})).Increment();
        waiting_for = self;
        break;
      case LockEventKind::contended:
        contended.Add(with_lock(event.name, {})).Increment();
        break;
      case LockEventKind::released:
        if (event.count > 0) break;  // an inner level: the grant is still held
        hold.Add(with_lock(event.name, {{"end", "released"}}), options.hold_buckets).Observe(seconds(event.held));
        held.Add(with_lock(event.name, {})).Decrement();
        break;
      case LockEventKind::lost:
        hold.Add(with_lock(event.name, {{"end", "lost"}}), options.hold_buckets).Observe(seconds(event.held));
        held.Add(with_lock(event.name, {})).Decrement();
        lost.Add(with_lock(event.name, {})).Increment();
        break;
      case LockEventKind::renewed:
        renewed.Observe(seconds(event.latency));
        break;
      case LockEventKind::renew_failed:
        renew_failed.Observe(seconds(event.latency));
        break;
      case LockEventKind::retried:
        retried.Increment();
        break;
    }
  }

  void end_wait(const LockEvent& event, const void* self) {
    if (waiting_for != self) return;
    waiting_for = nullptr;
    waiting.Add(with_lock(event.name, {})).Decrement();
  }

  PrometheusOptions options;
  prometheus::Family<prometheus::Histogram>& wait;
  prometheus::Family<prometheus::Histogram>& hold;
  prometheus::Family<prometheus::Gauge>& held;
  prometheus::Family<prometheus::Gauge>& waiting;
  prometheus::Family<prometheus::Counter>& lost;
  prometheus::Family<prometheus::Counter>& contended;
  prometheus::Family<prometheus::Histogram>& renewal;
  prometheus::Family<prometheus::Counter>& retries;
  prometheus::Histogram& renewed;
  prometheus::Histogram& renew_failed;
  prometheus::Counter& retried;
};

PrometheusMetrics::PrometheusMetrics(prometheus::Registry& registry, PrometheusOptions options)
    : impl_(std::make_unique<Impl>(registry, std::move(options))) {}

PrometheusMetrics::~PrometheusMetrics() = default;

void PrometheusMetrics::record(const LockEvent& event) noexcept {
  try {
    impl_->record(event, this);
  } catch (...) {
    // A metric must never fail a lock operation; prometheus-cpp throws only for bad labels.
  }
}

std::function<void(const LockEvent&)> PrometheusMetrics::handler() {
  return [this](const LockEvent& event) { record(event); };
}

}  // namespace dblock
