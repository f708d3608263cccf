// LockTracing: spans made from LockEvents after the fact. Every event arrives when its operation
// has ended and carries how long it took, so a span is started at (now - duration) and ended now;
// no state is kept between events, and a span never outlives the call that records it.

#include <dblock/tracing.hpp>

#include <algorithm>
#include <charconv>

#include <dblock/store.hpp>

namespace dblock {

namespace {

using Clock = std::chrono::system_clock;

std::string_view operation_of(LockEventKind kind) {
  switch (kind) {
    case LockEventKind::acquired:
    case LockEventKind::timeout:
    case LockEventKind::failed:
      return "acquire";
    case LockEventKind::renewed:
    case LockEventKind::renew_failed:
      return "renew";
    case LockEventKind::released:
      return "release";
    case LockEventKind::lost:
      return "lost";
    case LockEventKind::contended:
      return "contended";
    case LockEventKind::retried:
      return "retry";
    case LockEventKind::waiting:
      break;
  }
  return {};
}

}  // namespace

TracingOptions TracingOptions::of(const Store& store) {
  TracingOptions options;
  options.db_system = std::string(store.dialect());
  // scheme://user:***@host:port/database?params, the first host of a list; sqlite://path
  std::string_view uri = store.redacted_uri();
  auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos || options.db_system == "sqlite") return options;
  auto rest = uri.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find('?'));
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) options.db_namespace = std::string(rest.substr(slash + 1));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  authority = authority.substr(0, authority.find(','));
  if (auto colon = authority.rfind(':');
      colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    int port = 0;
    std::from_chars(authority.data() + colon + 1, authority.data() + authority.size(), port);
    options.server_port = port;
    authority = authority.substr(0, colon);
  }
  options.server_address = std::string(authority);
  return options;
}

struct LockTracing::Shared {
  std::shared_ptr<Tracer> tracer;
  TracingOptions options;

  void record(const LockEvent& event) {
    auto operation = operation_of(event.kind);
    if (operation.empty()) return;
    bool noise = event.kind == LockEventKind::contended || event.kind == LockEventKind::retried;
    if (noise && !options.contention_spans) return;
    auto now = Clock::now();
    auto took = std::chrono::duration_cast<Clock::duration>(event.latency);
    // An acquisition lasts its wait, or its one statement when it did not wait.
    if (operation == "acquire")
      took = std::max(std::chrono::duration_cast<Clock::duration>(event.waited),
                      std::chrono::duration_cast<Clock::duration>(event.latency));
    if (event.kind == LockEventKind::lost) took = {};
    auto span = tracer->start_span(std::string("dblock.") + std::string(operation), now - took);
    if (!span) return;
    if (!options.db_system.empty()) span->set_attribute("db.system.name", options.db_system);
    if (!options.db_namespace.empty()) span->set_attribute("db.namespace", options.db_namespace);
    if (!options.server_address.empty()) span->set_attribute("server.address", options.server_address);
    if (options.server_port != 0) span->set_attribute("server.port", std::int64_t{options.server_port});
    span->set_attribute("db.operation.name", std::string(operation));
    if (options.lock_names && !event.name.empty()) span->set_attribute("dblock.lock.name", std::string(event.name));
    switch (event.kind) {
      case LockEventKind::acquired:
        span->set_attribute("dblock.lock.token", event.token);
        span->set_attribute("dblock.lock.depth", event.count);
        span->set_attribute("dblock.acquire.outcome", std::string("acquired"));
        break;
      case LockEventKind::timeout:
        span->set_attribute("dblock.acquire.outcome", std::string("timeout"));
        span->set_attribute("error.type", std::string("timeout"));
        span->set_error("the lock was not granted in time");
        break;
      case LockEventKind::failed:
        span->set_attribute("dblock.acquire.outcome", std::string("failed"));
        span->set_attribute("error.type", std::string("dblock.error"));
        span->set_error("acquire failed while waiting");
        break;
      case LockEventKind::renewed:
        span->set_attribute("dblock.renew.locks", event.count);
        break;
      case LockEventKind::renew_failed:
        span->set_attribute("dblock.renew.locks", event.count);
        span->set_attribute("error.type", std::string("dblock.renew_failed"));
        span->set_error("the renewal statement failed; it is retried before the leases end");
        break;
      case LockEventKind::released:
        span->set_attribute("dblock.lock.token", event.token);
        span->set_attribute("dblock.lock.depth", event.count);
        if (event.count <= 0) span->set_attribute("dblock.lock.held_ms", std::int64_t{event.held.count() / 1000});
        break;
      case LockEventKind::lost:
        span->set_attribute("dblock.lock.token", event.token);
        span->set_attribute("dblock.lock.held_ms", std::int64_t{event.held.count() / 1000});
        span->set_attribute("error.type", std::string("dblock.lock_lost"));
        span->set_error("the lock was lost while held");
        break;
      default:
        break;
    }
    span->end(now);
  }
};

LockTracing::LockTracing(std::shared_ptr<Tracer> tracer, TracingOptions options)
    : shared_(std::make_shared<Shared>(Shared{std::move(tracer), std::move(options)})) {}

void LockTracing::record(const LockEvent& event) noexcept {
  if (!shared_->tracer) return;
  try {
    shared_->record(event);
  } catch (...) {
    // A tracer must never fail a lock operation.
  }
}

std::function<void(const LockEvent&)> LockTracing::handler() const {
  return [shared = shared_](const LockEvent& event) {
    if (!shared->tracer) return;
    try {
      shared->record(event);
    } catch (...) {
    }
  };
}

}  // namespace dblock
