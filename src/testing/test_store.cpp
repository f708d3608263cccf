// dblock::testing: the SQLite backend on a private file, with the test's clocks and faults (the
// seams of backends/backend_seams.hpp and core/manual_clock.hpp), above the core like the CLI.

#include <dblock/testing.hpp>

#include <dblock/errors.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/migrate.hpp>

#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): mkdtemp

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "backends/backend_seams.hpp"
#include "backends/test_control_backend.hpp"
#include "core/manual_clock.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"
#include "testing/fault_hook.hpp"

namespace dblock::testing {

namespace {

using std::chrono::milliseconds;

/// The database's clock: the local clock's moves, from the system clock's time at the start.
class TestDatabaseClock final : public detail::DatabaseClock {
 public:
  TestDatabaseClock(std::shared_ptr<detail::ManualClock> local, std::chrono::steady_clock::time_point local_start,
                    std::int64_t start_ms)
      : local_(std::move(local)), local_start_(local_start), start_ms_(start_ms) {}
  [[nodiscard]] std::int64_t now_ms() const noexcept override {
    return start_ms_ + std::chrono::duration_cast<milliseconds>(local_->now() - local_start_).count();
  }

 private:
  std::shared_ptr<detail::ManualClock> local_;
  std::chrono::steady_clock::time_point local_start_;
  std::int64_t start_ms_;
};

/// A fresh private directory under TMPDIR (or /tmp).
std::filesystem::path make_private_directory() {
  std::error_code error;
  auto base = std::filesystem::temp_directory_path(error);
  if (error) base = "/tmp";
  std::string pattern = (base / "dblock-testing-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    throw ConnectionError(fmt::format("dblock::testing: cannot make a temporary directory like {}: {}", pattern,
                                      std::generic_category().message(errno)));
  return pattern;
}

}  // namespace

/// What the store's event tap records; shared with the tap, which a manager outliving the
/// TestStore may still call.
struct Recorder {
  std::shared_ptr<detail::ManualClock> clock;
  std::chrono::steady_clock::time_point start;
  std::mutex mutex;
  std::vector<Event> events;  // guarded by mutex

  [[nodiscard]] milliseconds elapsed() const { return std::chrono::duration_cast<milliseconds>(clock->now() - start); }
  void record(const LockEvent& event) {
    Event copy{event.kind, std::string(event.name), event.token, event.count, elapsed()};
    std::lock_guard lock(mutex);
    events.push_back(std::move(copy));
  }
};

struct TestStore::Impl {
  TestStoreOptions options;
  std::filesystem::path directory;
  std::chrono::steady_clock::time_point local_start;
  std::int64_t database_start_ms = 0;
  std::shared_ptr<detail::ManualClock> clock;
  std::shared_ptr<FaultHook> hook;
  std::shared_ptr<Store> store;
  detail::TestControlBackend* control = nullptr;

  std::shared_ptr<Recorder> recorder;

  std::mutex intruder_mutex;
  std::unique_ptr<LockManager> intruder;  // made by the first steal(); guarded by intruder_mutex

  [[nodiscard]] milliseconds elapsed() const { return recorder->elapsed(); }

  void settle() const {
    if (!clock->settle(options.settle_limit))
      throw std::runtime_error(fmt::format(
          "dblock::testing: the managers' threads did not settle within {} ms of real time (does an on_lost or "
          "on_event callback block, or was the store's clock moved from one of its own threads?)",
          options.settle_limit.count()));
  }

  /// The watchdogs renew at once, and the test waits for them (and what they report).
  void renew_now() const {
    settle();
    clock->poke();
    settle();
  }
};

TestStore::TestStore(TestStoreOptions options) : impl_(std::make_unique<Impl>()) {
  auto& impl = *impl_;
  impl.options = std::move(options);
  if (impl.options.settle_limit.count() <= 0) throw InvalidArgument("TestStoreOptions.settle_limit must be positive");
  impl.directory = make_private_directory();
  impl.local_start = std::chrono::steady_clock::now();
  impl.database_start_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  impl.clock = std::make_shared<detail::ManualClock>(impl.local_start);
  impl.hook = std::make_shared<FaultHook>(impl.clock);
  impl.clock->set_retire_hook([hook = std::weak_ptr<FaultHook>(impl.hook)] {
    if (auto alive = hook.lock()) alive->wake_stalls();
  });
  impl.recorder = std::make_shared<Recorder>();
  impl.recorder->clock = impl.clock;
  impl.recorder->start = impl.local_start;
  detail::TestSeams seams;
  seams.database_clock = std::make_shared<TestDatabaseClock>(impl.clock, impl.local_start, impl.database_start_ms);
  seams.hook = impl.hook;
  seams.local_clock = impl.clock;
  seams.event_tap = [recorder = impl.recorder](const LockEvent& event) { recorder->record(event); };
  StoreOptions store_options;
  store_options.pool_size = impl.options.pool_size;
  store_options.logger = impl.options.logger;
  try {
    impl.store = detail::StoreParts::open_for_testing("sqlite://" + (impl.directory / "locks.db").string(),
                                                      std::move(store_options), std::move(seams));
    impl.control = &detail::StoreParts::backend(*impl.store).test_control().get();
    (void)migrate(*impl.store);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(impl.directory, ignored);
    throw;
  }
}

TestStore::~TestStore() {
  auto& impl = *impl_;
  impl.hook->release_all(true);
  {
    std::lock_guard lock(impl.intruder_mutex);
    impl.intruder.reset();
  }
  impl.store.reset();
  std::error_code ignored;
  std::filesystem::remove_all(impl.directory, ignored);
}

const std::shared_ptr<Store>& TestStore::store() const noexcept { return impl_->store; }

void TestStore::advance(std::chrono::milliseconds by) {
  if (by.count() < 0) throw InvalidArgument(fmt::format("TestStore::advance: {} ms is negative", by.count()));
  auto& impl = *impl_;
  auto target = impl.clock->now() + by;
  // Each step ends where a watchdog or timer waits for: a renewal due at 10 s runs at 10 s, before
  // a deadline at 29.7 s. A step is at least 1 ns, so this ends.
  for (;;) {
    impl.settle();
    auto now = impl.clock->now();
    if (now >= target) break;
    auto next = std::min(target, impl.clock->next_due());
    impl.clock->advance(std::max(next - now, std::chrono::steady_clock::duration(1)));
  }
  impl.settle();
}

void TestStore::settle() { impl_->settle(); }

std::chrono::steady_clock::time_point TestStore::local_now() const { return impl_->clock->now(); }

std::chrono::system_clock::time_point TestStore::database_now() const {
  return std::chrono::system_clock::time_point(milliseconds(impl_->database_start_ms) + impl_->elapsed());
}

std::chrono::milliseconds TestStore::elapsed() const { return impl_->elapsed(); }

bool TestStore::expire(std::string_view name) {
  auto& impl = *impl_;
  auto ended = detail::retry_transient([&] { return impl.control->end_lease(name); });
  if (!ended) return false;
  impl.renew_now();
  // Told (no renewal is stalled: every watchdog ran its round): free after the lock-delay. Else
  // the row keeps its expiry, which no local deadline of its holder outlasts.
  if (!impl.clock->any_parked())
    (void)detail::retry_transient([&] { return impl.control->free_after(name, ended->token, ended->lock_delay); });
  return true;
}

std::optional<LockInfo> TestStore::revoke(std::string_view name) {
  auto revoked = impl_->store->revoke(name);
  if (revoked) impl_->renew_now();
  return revoked;
}

std::optional<LockInfo> TestStore::request_release(std::string_view name) {
  auto asked = impl_->store->request_release(name);
  if (asked) impl_->renew_now();
  return asked;
}

Lock TestStore::steal(std::string_view name, LockOptions options) {
  auto& impl = *impl_;
  std::lock_guard lock(impl.intruder_mutex);
  // No other acquirer gets in between the holder's loss and the intruder's grant (a campaign
  // thread woken by the loss would take the name back).
  impl.hook->begin_hand_over();
  struct EndHandOver {
    FaultHook& hook;
    ~EndHandOver() { hook.end_hand_over(); }
  } end_hand_over{*impl.hook};
  (void)expire(name);
  if (!impl.intruder) {
    ManagerOptions intruder_options;
    intruder_options.owner_tag = "dblock-testing-intruder";
    intruder_options.owner_scope = OwnerScope::manager;
    impl.intruder = std::make_unique<LockManager>(impl.store, intruder_options);
  }
  auto taken = impl.intruder->try_acquire(name, options);
  if (!taken) {
    auto row = impl.store->lock(name);
    throw std::logic_error(fmt::format(
        "dblock::testing: '{}' cannot be stolen yet: it is unavailable for {} ms more (a lock-delay, a revoked "
        "row, or a holder whose stalled renewal cannot be told): advance() past it first",
        name, row ? row->remaining.count() : 0));
  }
  impl.settle();
  return std::move(*taken);
}

void TestStore::inject(Statements which, Fault fault, int times) { impl_->hook->add(which, fault, times); }

void TestStore::clear_faults() { impl_->hook->clear(); }

void TestStore::unstall() {
  impl_->hook->release_all(false);
  impl_->settle();
}

int TestStore::stalled() const { return impl_->hook->stalled(); }

std::optional<LockInfo> TestStore::holder(std::string_view name) { return impl_->store->lock(name); }

std::vector<Event> TestStore::events(std::string_view name) const {
  auto& recorder = *impl_->recorder;
  std::lock_guard lock(recorder.mutex);
  if (name.empty()) return recorder.events;
  std::vector<Event> chosen;
  std::ranges::copy_if(recorder.events, std::back_inserter(chosen), [&](const Event& e) { return e.name == name; });
  return chosen;
}

std::vector<Event> TestStore::grants(std::string_view name) const {
  auto all = events(name);
  std::erase_if(all, [](const Event& e) { return e.kind != LockEventKind::acquired || e.count != 1; });
  return all;
}

std::vector<Event> TestStore::losses(std::string_view name) const {
  auto all = events(name);
  std::erase_if(all, [](const Event& e) { return e.kind != LockEventKind::lost; });
  return all;
}

void TestStore::clear_events() {
  std::lock_guard lock(impl_->recorder->mutex);
  impl_->recorder->events.clear();
}

}  // namespace dblock::testing
