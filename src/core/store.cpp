#include <dblock/migrate.hpp>
#include <dblock/store.hpp>

#include <cstdint>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend_factory.hpp"
#include "backends/lock_backend.hpp"
#include "base/uri.hpp"
#include "base/validate.hpp"
#include "core/backoff.hpp"
#include "core/manual_clock.hpp"
#include "core/release_hub.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock {

struct Store::Impl {
  detail::StoreUri uri;
  std::shared_ptr<spdlog::logger> logger;
  std::unique_ptr<detail::Backend> backend;
  detail::LockBackend* locks = nullptr;  // backend's lock role, picked once
  std::chrono::milliseconds connect_timeout{0};

  std::mutex mutex;
  bool schema_checked = false;
  std::unique_ptr<detail::ReleaseHub> hub;           // created by the first waiter
  std::shared_ptr<detail::ManualClock> local_clock;  // dblock::testing only
  std::function<void(const LockEvent&)> event_tap;   // dblock::testing only
};

namespace detail {

Backend& StoreParts::backend(Store& store) { return *store.impl_->backend; }
const StoreUri& StoreParts::uri(const Store& store) { return store.impl_->uri; }
const std::shared_ptr<spdlog::logger>& StoreParts::logger(const Store& store) { return store.impl_->logger; }
std::chrono::milliseconds StoreParts::connect_timeout(const Store& store) { return store.impl_->connect_timeout; }

ReleaseHub& StoreParts::release_hub(Store& store) {
  auto& impl = *store.impl_;
  std::lock_guard lock(impl.mutex);
  if (!impl.hub) impl.hub = std::make_unique<ReleaseHub>(impl.backend->notifications().get_if(), impl.logger);
  return *impl.hub;
}

void StoreParts::schema_changed(Store& store) {
  std::lock_guard lock(store.impl_->mutex);
  store.impl_->schema_checked = false;
}

const std::shared_ptr<ManualClock>& StoreParts::local_clock(const Store& store) { return store.impl_->local_clock; }
const std::function<void(const LockEvent&)>& StoreParts::event_tap(const Store& store) {
  return store.impl_->event_tap;
}

std::shared_ptr<Store> StoreParts::over(std::unique_ptr<Backend> backend, std::shared_ptr<spdlog::logger> logger) {
  auto impl = std::make_unique<Store::Impl>();
  impl->logger = std::move(logger);
  impl->backend = std::move(backend);
  impl->locks = &impl->backend->locks();
  impl->connect_timeout = std::chrono::milliseconds(1000);
  impl->schema_checked = true;
  return std::shared_ptr<Store>(new Store(std::move(impl)));
}

}  // namespace detail

namespace {

std::shared_ptr<spdlog::logger> silent_logger() {
  // Not registered in spdlog's registry: the library never touches the application's loggers.
  auto logger = std::make_shared<spdlog::logger>("dblock");
  logger->set_level(spdlog::level::off);
  return logger;
}

/// A backend may find the database busy at open (SQLite: two openers of a new file racing to
/// switch it to WAL): it is opened again, backing off, until the connect timeout.
std::unique_ptr<detail::Backend> open_backend(const detail::StoreUri& uri, const detail::BackendSettings& settings) {
  auto deadline = std::chrono::steady_clock::now() + settings.connect_timeout;
  auto seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  detail::Backoff backoff(std::chrono::milliseconds(1), 2.0, std::chrono::milliseconds(50), seed);
  for (;;) {
    try {
      return detail::make_backend(uri, settings);
    } catch (const detail::TransientError&) {
      auto pause = backoff.next();
      if (std::chrono::steady_clock::now() + pause > deadline) throw;
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

std::shared_ptr<Store> Store::open(std::string_view uri, StoreOptions options) {
  return detail::StoreParts::open_for_testing(uri, std::move(options), {});
}

std::shared_ptr<Store> detail::StoreParts::open_for_testing(std::string_view uri, StoreOptions options,
                                                            TestSeams seams) {
  auto impl = std::make_unique<Store::Impl>();
  impl->uri = detail::resolve_store_uri(uri, options);
  auto& parsed = impl->uri;
  if (options.connect_timeout.count() <= 0)
    throw InvalidArgument(fmt::format("connect_timeout {}ms must be positive", options.connect_timeout.count()));
  impl->connect_timeout = options.connect_timeout;
  impl->logger = options.logger ? options.logger : silent_logger();
  if (options.statement_timeout.count() <= 0)
    throw InvalidArgument(fmt::format("statement_timeout {}ms must be positive", options.statement_timeout.count()));
  impl->backend = open_backend(parsed, {impl->connect_timeout, options.statement_timeout, impl->logger,
                                        std::move(seams.database_clock), std::move(seams.hook)});
  impl->locks = &impl->backend->locks();
  impl->local_clock = std::move(seams.local_clock);
  impl->event_tap = std::move(seams.event_tap);
  impl->logger->debug("opened store {}", parsed.redacted);
  return std::shared_ptr<Store>(new Store(std::move(impl)));
}

std::string_view Store::dialect() const noexcept { return detail::to_string(impl_->backend->dialect()); }
const std::string& Store::redacted_uri() const noexcept { return impl_->uri.redacted; }

void Store::check_schema() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->schema_checked) return;
  }
  // A read: a transient error (a lock-wait timeout while other schemas' DDL runs on Galera) is
  // asked again, as a lost reply is.
  int found = detail::retry_transient(
      [&] { return detail::repeat_if_reply_lost([&] { return impl_->locks->schema_version(); }); });
  int known = latest_schema_version();
  if (found < known)
    throw SchemaError(SchemaError::Reason::outdated,
                      fmt::format("dblock schema in {} is at version {}, this build needs {}: run `dblock migrate up`",
                                  impl_->uri.redacted, found, known));
  if (found > known)
    throw SchemaError(SchemaError::Reason::newer,
                      fmt::format("dblock schema in {} is at version {}, newer than this build understands ({}): "
                                  "upgrade dblock",
                                  impl_->uri.redacted, found, known));
  std::lock_guard lock(impl_->mutex);
  impl_->schema_checked = true;
}

namespace {

/// A row as an operator sees it: a revoked or minimum-hold owner is shown as the holder it stands
/// for. The backend's `remaining` is until the name is free (lock-delay included): a held row
/// shows its lease, a row whose lease ended within its lock-delay is shown delayed.
LockInfo presented(LockInfo row) {
  for (auto [marker, state] :
       {std::pair{detail::kRevokedOwner, LockState::revoked}, std::pair{detail::kMinHoldOwner, LockState::min_hold}})
    if (row.owner.starts_with(marker)) {
      row.owner.erase(0, marker.size());
      row.state = state;
      break;
    }
  if (row.state == LockState::held && row.lock_delay.count() > 0) {
    if (row.remaining > row.lock_delay)
      row.remaining -= row.lock_delay;
    else if (row.remaining.count() > 0)
      row.state = LockState::delayed;
  }
  return row;
}

}  // namespace

std::vector<LockInfo> Store::locks() {
  auto rows = detail::repeat_if_reply_lost([&] { return impl_->locks->list(); });
  for (auto& row : rows) row = presented(std::move(row));
  return rows;
}
std::vector<LockInfo> Store::locks(std::size_t limit) {
  auto rows = detail::repeat_if_reply_lost([&] { return impl_->locks->list_first(limit); });
  for (auto& row : rows) row = presented(std::move(row));
  return rows;
}

std::optional<LockInfo> Store::lock(std::string_view name) {
  detail::validate_lock_name(name);
  auto row = detail::repeat_if_reply_lost([&] { return impl_->locks->read(name); });
  if (!row) return std::nullopt;
  return presented(std::move(*row));
}

std::vector<WaiterInfo> Store::waiters() { return waiters(static_cast<std::size_t>(INT64_MAX)); }
std::vector<WaiterInfo> Store::waiters(std::size_t limit) {
  auto* queue = impl_->backend->queue().get_if();
  if (queue == nullptr) return {};  // a backend without the queue has no waiter rows
  return detail::repeat_if_reply_lost([&] { return queue->list_waiters(limit); });
}

LockCensus Store::census() {
  return detail::repeat_if_reply_lost([&] { return impl_->locks->census(); });
}

std::optional<LockInfo> Store::revoke(std::string_view name) {
  detail::validate_lock_name(name);
  bool revoked = true;
  try {
    revoked = detail::retry_transient([&] { return impl_->locks->revoke(name); });
  } catch (const detail::OutcomeUnknown&) {
    // It may have landed or not (never run twice: a second run would not match): the row says.
  }
  auto row = detail::repeat_if_reply_lost([&] { return impl_->locks->read(name); });
  if (!revoked || !row || !row->owner.starts_with(detail::kRevokedOwner) || row->remaining.count() <= 0) {
    impl_->logger->warn("revoking lock '{}': no live lock to revoke", name);
    return std::nullopt;
  }
  auto info = presented(std::move(*row));
  impl_->logger->warn("revoked lock '{}' (token {}); free in {} ms at the latest", name, info.token,
                      info.remaining.count());
  return info;
}

std::optional<LockInfo> Store::request_release(std::string_view name) {
  detail::validate_lock_name(name);
  // Asking twice is asking once: a request whose reply was lost is sent again.
  bool asked = detail::retry_read([&] { return impl_->locks->ask_release(name); });
  if (!asked) {
    impl_->logger->info("asking the holder of lock '{}' to let go: no live exclusive holder", name);
    return std::nullopt;
  }
  auto row = detail::repeat_if_reply_lost([&] { return impl_->locks->read(name); });
  // Released (or lost) between the ask and this read: the ask was answered already.
  LockInfo info = row ? presented(std::move(*row)) : LockInfo{std::string(name)};
  impl_->logger->info("asked the holder of lock '{}' (token {}) to let go", name, info.token);
  return info;
}

bool Store::force_release(std::string_view name) {
  detail::validate_lock_name(name);
  bool existed = impl_->locks->force_release(name);
  impl_->logger->warn("force-released lock '{}' ({})", name, existed ? "row deleted" : "no such lock");
  return existed;
}

}  // namespace dblock
