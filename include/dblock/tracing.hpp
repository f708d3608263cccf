#pragma once
/// Tracing hooks: spans for acquire (its wait included), renewal, release and loss, made from a
/// LockManager's events (ManagerOptions::on_event) and handed to a Tracer the application
/// implements over its tracing library (OpenTelemetry, ...). dblock depends on none.
///
/// Spans (doc/metrics.md, "Tracing", lists every attribute):
///   dblock.acquire  from the call to the grant, timeout or error: its wait
///   dblock.renew    one renewal statement for every lock the manager holds
///   dblock.release  the release statement of one level
///   dblock.lost     zero-length, status error: a held lock found lost
/// Attributes follow OpenTelemetry's database-client conventions where they apply
/// (db.system.name, db.operation.name, db.namespace, server.address, server.port, error.type),
/// and dblock.* otherwise. Span times are given explicitly: the events arrive when an operation
/// ended, so each span starts in the past.
///
/// Example:
///   dblock::LockTracing tracing(std::make_shared<MyOtelTracer>(), dblock::TracingOptions::of(*store));
///   dblock::LockManager locks(store, {.on_event = tracing.handler()});

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include <dblock/options.hpp>

#include <dblock/export.hpp>

namespace dblock {

class Store;

using SpanAttribute = std::variant<std::int64_t, double, bool, std::string>;

/// One span; ended exactly once, by end(). Implementations need not be thread-safe: a span is
/// used by one thread from start to end.
class Span {
 public:
  virtual ~Span() = default;
  virtual void set_attribute(std::string_view key, SpanAttribute value) = 0;
  /// Status error with a description (OpenTelemetry's StatusCode::kError).
  virtual void set_error(std::string_view description) = 0;
  virtual void end(std::chrono::system_clock::time_point at) = 0;
};

/// Makes spans (kind: client). Called from the threads that cause the events (the caller of
/// acquire/release, the manager's watchdog); must be thread-safe and must not throw.
class Tracer {
 public:
  virtual ~Tracer() = default;
  [[nodiscard]] virtual std::unique_ptr<Span> start_span(std::string_view name,
                                                         std::chrono::system_clock::time_point start) = 0;
};

struct TracingOptions {
  /// db.system.name: "postgresql", "mysql" (MariaDB too), "sqlite". Empty: not set.
  std::string db_system;
  /// db.namespace, server.address, server.port of the store. Empty / 0: not set.
  std::string db_namespace;
  std::string server_address;
  int server_port = 0;
  /// Whether spans carry the lock name (dblock.lock.name). Names are fine as span attributes
  /// (not metric labels), but may say more than a trace backend should keep. Default: yes.
  bool lock_names = true;
  /// Zero-length spans for contended tries and statement retries too. Default: no (noisy).
  bool contention_spans = false;

  /// The store's db.system.name, db.namespace and server address, from its (redacted) URI.
  [[nodiscard]] DBLOCK_EXPORT static TracingOptions of(const Store& store);
};

/// Turns LockEvents into spans. Thread-safe.
class DBLOCK_EXPORT LockTracing {
 public:
  explicit LockTracing(std::shared_ptr<Tracer> tracer, TracingOptions options = {});
  /// Records one event as a span (or nothing, for kinds without one). Never throws.
  void record(const LockEvent& event) noexcept;
  /// An on_event handler that calls record(); it shares the tracer, so it may outlive this object.
  [[nodiscard]] std::function<void(const LockEvent&)> handler() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace dblock
