// The asio API (dblock/asio.hpp) on every backend and mode: the three completion forms, owners
// that are tasks rather than threads, thousands of waiting coroutines on two threads with
// exclusion intact, cancellation (per operation, by io_context::stop() and destruction) that leaves
// nothing held, the lost-lease notification, acquire_all and the election's campaign.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>

#include <gtest/gtest.h>
#include <dblock/asio.hpp>
#include <dblock/dblock.hpp>

#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
using dblock::test::eventually;

namespace {

/// Threads of this process now.
std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

/// Runs `io` on `threads` threads until it runs out of work (joined by the destructor).
class Runner {
 public:
  Runner(asio::io_context& io, int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([&io] { io.run(); });
  }
  void join() { threads_.clear(); }

 private:
  std::vector<std::jthread> threads_;
};

class AsyncLocks : public dblock::test::InstalledCaseTest {
 protected:
  [[nodiscard]] bool advisory() const { return GetParam().mode == dblock::LockMode::advisory; }

  std::unique_ptr<dblock::AsyncLockManager> async_manager(asio::io_context& io, dblock::ManagerOptions options = {},
                                                          dblock::AsyncOptions async = {}) {
    return std::make_unique<dblock::AsyncLockManager>(io.get_executor(), store_, in_mode(std::move(options)), async);
  }

  /// Whether another owner can take `name` now (and gives it back at once).
  bool free_for_others(const std::string& name) {
    auto other = manager();
    return other->try_acquire(name).has_value();
  }
  /// Nothing of `name` left on the server: no row (table mode), no advisory lock.
  bool nothing_held(const std::string& name) {
    if (advisory()) return !installation_->admin().advisory_held(name);
    return !store_->lock(name).has_value();
  }

  /// Ends the lock of `name` behind its holder's back.
  void break_lock(const std::string& name) {
    if (advisory())
      ASSERT_EQ(installation_->admin().kill_advisory_holder(name), 1);
    else
      ASSERT_TRUE(store_->force_release(name));
  }
};

TEST_P(AsyncLocks, CallbacksFuturesAndAwaitablesEachGetAGuard) {
  asio::io_context io;
  auto locks = async_manager(io);
  // A callback.
  std::optional<dblock::Lock> by_callback;
  std::exception_ptr callback_error;
  locks->async_acquire("forms/callback", 5s, [&](std::exception_ptr error, dblock::Lock lock) {
    callback_error = error;
    by_callback.emplace(std::move(lock));
  });
  io.run();
  io.restart();
  ASSERT_FALSE(callback_error);
  ASSERT_TRUE(by_callback && by_callback->owns());
  EXPECT_EQ(by_callback->name(), "forms/callback");
  EXPECT_GT(by_callback->token(), 0);
  EXPECT_FALSE(free_for_others("forms/callback"));

  // A future, awaited on another thread while the context runs.
  auto work = asio::make_work_guard(io);
  Runner runner(io, 1);
  auto future = locks->async_acquire("forms/future", 5s, asio::use_future);
  auto by_future = future.get();
  EXPECT_TRUE(by_future.owns());
  EXPECT_EQ(by_future.name(), "forms/future");
  auto tried = locks->async_try_acquire("forms/callback", asio::use_future).get();
  EXPECT_FALSE(tried) << "another task's try finds the name taken";
  // A timeout arrives as the exception of the future.
  EXPECT_THROW(locks->async_acquire("forms/future", 100ms, asio::use_future).get(), dblock::Timeout);
  locks->async_release(std::move(by_future), asio::use_future).get();
  EXPECT_TRUE(free_for_others("forms/future"));
  work.reset();
  runner.join();
  io.restart();

  // An awaitable.
  std::optional<dblock::Lock> by_coroutine;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        by_coroutine.emplace(co_await locks->async_acquire("forms/awaitable", 5s, asio::use_awaitable));
        auto again = co_await locks->async_try_acquire("forms/awaitable", asio::use_awaitable);
        EXPECT_FALSE(again);
        co_await locks->async_release(std::move(*by_coroutine), asio::use_awaitable);
      },
      [](std::exception_ptr error) { EXPECT_FALSE(error); });
  io.run();
  EXPECT_FALSE(by_coroutine->owns());
  EXPECT_TRUE(free_for_others("forms/awaitable"));
  by_callback->release();
  EXPECT_TRUE(nothing_held("forms/callback"));
}

// A note's text may be gone once the operation has started (a temporary, here): the operation keeps
// its own copy, and LockOptions, trivially destructible, is safe as a temporary inside co_await.
TEST_P(AsyncLocks, ANoteIsKeptByTheOperationAndShownBesideItsHolder) {
  asio::io_context io;
  auto locks = async_manager(io);
  if (advisory()) {  // notes are kept in the lock table
    std::exception_ptr refused;
    locks->async_acquire("noted/async", 5s, dblock::TaskOwner(), {.note = "n"},
                         [&](std::exception_ptr error, dblock::Lock) { refused = error; });
    io.run();
    ASSERT_TRUE(refused);
    EXPECT_THROW(std::rethrow_exception(refused), dblock::InvalidArgument);
    return;
  }
  std::optional<dblock::Lock> held;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        held.emplace(co_await locks->async_acquire("noted/async", 5s, dblock::TaskOwner(),
                                                   {.note = std::string("an async holder's note")},
                                                   asio::use_awaitable));
      },
      [](std::exception_ptr error) { EXPECT_FALSE(error); });
  io.run();
  ASSERT_TRUE(held && held->owns());
  EXPECT_EQ(store_->lock("noted/async")->note, "an async holder's note");
  held->release();
}

TEST_P(AsyncLocks, TheOwnerIsTheTaskNotTheThread) {
  // Two coroutines on one thread: two owners.
  asio::io_context io;
  auto locks = async_manager(io);
  dblock::TaskOwner first, second;
  EXPECT_NE(locks->owner_id(first), locks->owner_id(second));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto held = co_await locks->async_acquire("owner/x", 5s, first, {}, asio::use_awaitable);
        auto other = co_await locks->async_try_acquire("owner/x", second, {}, asio::use_awaitable);
        EXPECT_FALSE(other) << "a second task on the same thread is another owner";
        // Re-entry is explicit: the same TaskOwner again.
        auto inner = co_await locks->async_acquire("owner/x", 1s, first, {}, asio::use_awaitable);
        EXPECT_EQ(inner.count(), 2);
        EXPECT_EQ(inner.token(), held.token());
      },
      [](std::exception_ptr error) { EXPECT_FALSE(error); });
  io.run();
  EXPECT_TRUE(eventually([&] { return nothing_held("owner/x"); }));

  // One task on two threads (two contexts, one thread each): one owner.
  asio::io_context a, b;
  auto on_a = async_manager(a);
  std::thread::id thread_a, thread_b;
  std::atomic<bool> a_done{false};
  std::optional<dblock::Lock> outer;
  asio::co_spawn(
      a,
      [&]() -> asio::awaitable<void> {
        outer.emplace(co_await on_a->async_acquire("owner/y", 5s, first, {}, asio::use_awaitable));
        thread_a = std::this_thread::get_id();
        a_done = true;
      },
      asio::detached);
  // Thread a stays until b's is done, so that their ids differ.
  std::promise<void> b_done;
  std::thread runs_a([&, done = b_done.get_future()] {
    a.run();
    done.wait();
  });
  ASSERT_TRUE(eventually([&] { return a_done.load(); }));
  ASSERT_TRUE(outer && outer->owns());
  std::optional<dblock::Lock> inner;
  asio::co_spawn(
      b,
      [&]() -> asio::awaitable<void> {
        inner.emplace(
            co_await on_a->async_acquire("owner/y", 1s, first, {}, asio::bind_executor(b, asio::use_awaitable)));
        thread_b = std::this_thread::get_id();
      },
      asio::detached);
  std::thread([&] { b.run(); }).join();
  b_done.set_value();
  runs_a.join();
  EXPECT_NE(thread_a, thread_b);
  ASSERT_TRUE(inner && inner->owns()) << "the task re-entered its own lock from another thread";
  EXPECT_EQ(inner->count(), 2);
  inner->release();
  EXPECT_FALSE(free_for_others("owner/y"));
  outer->release();
  EXPECT_TRUE(free_for_others("owner/y"));
}

TEST_P(AsyncLocks, ThousandsOfWaitingCoroutinesOnTwoThreadsKeepExclusion) {
  // Fewer on the polling backends, which take a statement per poll; still far more than threads.
  // Advisory mode pins a session per owner that holds or tries (doc/async.md): fewer owners there.
  const int waiters = advisory() ? 400 : 2000;
  constexpr int kNames = 10;
  asio::io_context io;
  // Advisory mode: every lock held pins one of the store's sessions (doc/async.md), so the pool has
  // room for one per name beside the statement threads'.
  auto store = advisory() ? dblock::Store::open(installation_->dsn("pool=16")) : store_;
  auto locks = std::make_unique<dblock::AsyncLockManager>(io.get_executor(), store, in_mode(),
                                                          dblock::AsyncOptions{.threads = 2});
  std::array<std::atomic<int>, kNames> inside{};
  std::atomic<int> overlaps{0}, granted{0}, failed{0};
  std::atomic<std::size_t> most_threads{0};
  auto threads_before = thread_count();
  for (int i = 0; i < waiters; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          auto slot = i % kNames;
          auto lock = co_await locks->async_acquire("many/" + std::to_string(slot), 60s, asio::use_awaitable);
          if (inside[slot].fetch_add(1) != 0) ++overlaps;
          most_threads = std::max(most_threads.load(), thread_count());
          if (lock.lost()) ++overlaps;
          inside[slot].fetch_sub(1);
          ++granted;
          co_await locks->async_release(std::move(lock), asio::use_awaitable);
        },
        [&](std::exception_ptr error) {
          if (error) ++failed;
        });
  }
  auto started = std::chrono::steady_clock::now();
  Runner runner(io, 2);
  runner.join();
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(granted.load(), waiters);
  EXPECT_LT(took, 60s);
  // Two runners, the statement threads, the listener and the manager's watchdog and timer: a
  // thread per waiter would be thousands.
  EXPECT_LT(most_threads.load(), threads_before + 12) << "waiting must not cost threads";
  for (int slot = 0; slot < kNames; ++slot) EXPECT_TRUE(nothing_held("many/" + std::to_string(slot)));
}

TEST_P(AsyncLocks, CancellingAWaitLeavesNothingHeld) {
  auto holder = manager();
  auto held = holder->acquire("cancel/wait", 5s);
  asio::io_context io;
  auto locks = async_manager(io);
  asio::cancellation_signal cancel;
  std::exception_ptr outcome;
  bool completed = false;
  locks->async_acquire("cancel/wait", 30s,
                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr error, dblock::Lock lock) {
                         completed = true;
                         outcome = error;
                         EXPECT_FALSE(lock.owns());
                       }));
  asio::steady_timer later(io, 150ms);
  later.async_wait([&](std::error_code) { cancel.emit(asio::cancellation_type::terminal); });
  auto started = std::chrono::steady_clock::now();
  io.run();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "cancellation ends the wait at once";
  ASSERT_TRUE(completed);
  ASSERT_TRUE(outcome);
  try {
    std::rethrow_exception(outcome);
  } catch (const asio::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::operation_aborted);
  }
  held.release();
  EXPECT_TRUE(free_for_others("cancel/wait"));
  EXPECT_TRUE(nothing_held("cancel/wait"));
}

TEST_P(AsyncLocks, AGrantThatLandsAfterCancellationIsReleased) {
  asio::io_context io;
  auto locks = async_manager(io);
  int aborted = 0, completed = 0;
  // Cancelled while the first statement is in flight (it is sent at once): the grants that land
  // after the cancellation must be given back. (One that lands before it completes the operation,
  // as asio has it: the cancellation then comes too late and the guard is delivered.)
  for (int i = 0; i < 20; ++i) {
    asio::cancellation_signal cancel;
    locks->async_acquire("cancel/statement", 5s,
                         asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr error, dblock::Lock lock) {
                           ++completed;
                           if (error) ++aborted;
                           EXPECT_EQ(lock.owns(), !error);
                         }));
    cancel.emit(asio::cancellation_type::terminal);
    io.run();
    io.restart();
  }
  EXPECT_EQ(completed, 20);
  EXPECT_GT(aborted, 0);
  // Every try still runs; wait for them all before looking.
  EXPECT_TRUE(eventually([&] { return locks->stats().acquired + locks->stats().contended >= 20; }));
  EXPECT_TRUE(eventually([&] { return nothing_held("cancel/statement"); }));
  EXPECT_GT(locks->stats().acquired, 0u) << "some grants landed after their cancellation, and were given back";
  EXPECT_TRUE(free_for_others("cancel/statement"));
}

TEST_P(AsyncLocks, AnAwaitableRacedAgainstATimerIsCancelledCleanly) {
  using namespace asio::experimental::awaitable_operators;
  auto holder = manager();
  auto held = holder->acquire("cancel/race", 5s);
  asio::io_context io;
  auto locks = async_manager(io);
  bool timer_won = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
        auto winner = co_await (locks->async_acquire("cancel/race", 30s, asio::use_awaitable) ||
                                timer.async_wait(asio::use_awaitable));
        timer_won = winner.index() == 1;
      },
      [](std::exception_ptr error) { EXPECT_FALSE(error); });
  io.run();
  EXPECT_TRUE(timer_won);
  held.release();
  EXPECT_TRUE(free_for_others("cancel/race"));
}

TEST_P(AsyncLocks, StoppingAndDestroyingTheContextLeavesNothingHeldAndNoSessionBroken) {
  auto holder = manager();
  auto held = holder->acquire("stop/wait", 5s);
  auto locks_io = std::make_unique<asio::io_context>();
  auto locks = async_manager(*locks_io);
  std::atomic<int> resumed{0};
  // One waits for a busy name; a hundred ask for free names, their statements in flight or their
  // grants queued in a context that is stopped and never run again.
  asio::co_spawn(
      *locks_io,
      [&]() -> asio::awaitable<void> {
        auto lock = co_await locks->async_acquire("stop/wait", 30s, asio::use_awaitable);
        ++resumed;
      },
      asio::detached);
  for (int i = 0; i < 100; ++i)
    asio::co_spawn(
        *locks_io,
        [&, i]() -> asio::awaitable<void> {
          auto lock = co_await locks->async_acquire("stop/free" + std::to_string(i % 5), 30s, asio::use_awaitable);
          ++resumed;
          co_await asio::steady_timer(co_await asio::this_coro::executor, 1h).async_wait(asio::use_awaitable);
        },
        asio::detached);
  std::jthread running([&] { locks_io->run(); });
  // Stopped while grants are arriving, statements are in flight and one waits.
  EXPECT_TRUE(eventually([&] { return resumed.load() >= 5; }));
  locks_io->stop();
  running.join();
  held.release();  // the waiter would now be granted, into a stopped context
  std::this_thread::yield();
  locks_io.reset();  // destroys every coroutine and what was about to be delivered to it
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(eventually([&] { return nothing_held("stop/free" + std::to_string(i)); })) << i;
  EXPECT_TRUE(eventually([&] { return nothing_held("stop/wait"); }));
  // The manager and its sessions still serve.
  asio::io_context again;
  auto fresh = async_manager(again);
  auto future = fresh->async_acquire("stop/wait", 5s, asio::use_future);
  again.run();
  EXPECT_TRUE(future.get().owns());
  EXPECT_TRUE(holder->acquire("stop/free0", 5s).owns());
  locks.reset();
}

TEST_P(AsyncLocks, ALostLeaseIsDeliveredToTheTask) {
  asio::io_context io;
  auto locks = async_manager(io, {.default_ttl = 600ms});
  std::optional<dblock::Lock> lock;
  std::optional<std::error_code> lost;
  std::atomic<bool> lost_seen{false}, waiting{false};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        lock.emplace(co_await locks->async_acquire("lost/x", 5s, asio::use_awaitable));
        locks->async_wait_lost(*lock, [&](std::error_code code) {
          lost = code;
          lost_seen = true;
        });
        waiting = true;
      },
      asio::detached);
  // The wait keeps the context's run() going until the loss: run it on a thread of its own.
  Runner runner(io, 1);
  ASSERT_TRUE(eventually([&] { return waiting.load(); }));
  EXPECT_FALSE(lost_seen.load()) << "not lost yet";
  break_lock("lost/x");
  EXPECT_TRUE(eventually([&] { return lost_seen.load(); }, 10s));
  if (!lost_seen) io.stop();  // the wait never ended: do not hang on it
  runner.join();
  ASSERT_TRUE(lost);
  EXPECT_FALSE(*lost);
  EXPECT_TRUE(lock->lost());

  // A wait that is cancelled completes with operation_aborted.
  io.restart();
  auto other = locks->async_acquire("lost/y", 5s, asio::use_future);
  io.run();
  io.restart();
  auto held = other.get();
  asio::cancellation_signal cancel;
  std::optional<std::error_code> waited;
  locks->async_wait_lost(held,
                         asio::bind_cancellation_slot(cancel.slot(), [&](std::error_code code) { waited = code; }));
  cancel.emit(asio::cancellation_type::terminal);
  io.run();
  ASSERT_TRUE(waited);
  EXPECT_EQ(*waited, asio::error::operation_aborted);
}

TEST_P(AsyncLocks, AcquireAllHoldsEveryNameOrNone) {
  auto holder = manager();
  auto busy = holder->acquire("all/b", 5s);
  asio::io_context io;
  auto locks = async_manager(io);
  auto failed = locks->async_acquire_all({"all/c", "all/a", "all/b"}, 200ms, asio::use_future);
  io.run();
  io.restart();
  EXPECT_THROW(failed.get(), dblock::Timeout);
  EXPECT_TRUE(free_for_others("all/a")) << "what was taken before the busy name was given back";
  busy.release();
  auto set = locks->async_acquire_all({"all/c", "all/a", "all/b", "all/a"}, 5s, asio::use_future);
  io.run();
  auto held = set.get();
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held.locks()[0].name(), "all/a");
  EXPECT_FALSE(free_for_others("all/c"));
  held.release();
  EXPECT_TRUE(free_for_others("all/c"));
}

TEST_P(AsyncLocks, CampaignersTakeTurnsAndAGuardDroppedOnAnyThreadReleases) {
  asio::io_context io;
  auto locks = async_manager(io);
  dblock::TaskOwner a, b;
  std::atomic<int> elected{0};
  std::optional<dblock::Lock> term_a, term_b;
  locks->async_campaign("leader", a, [&](std::exception_ptr error, dblock::Lock term) {
    EXPECT_FALSE(error);
    ++elected;
    term_a.emplace(std::move(term));
  });
  io.run();
  io.restart();
  ASSERT_EQ(elected.load(), 1);
  locks->async_campaign("leader", b, [&](std::exception_ptr error, dblock::Lock term) {
    EXPECT_FALSE(error);
    ++elected;
    term_b.emplace(std::move(term));
  });
  auto work = asio::make_work_guard(io);
  Runner runner(io, 1);
  // Term a ends by its guard going on a thread of its own.
  std::thread([term = std::move(*term_a)]() mutable { auto dropped = std::move(term); }).join();
  EXPECT_TRUE(eventually([&] { return elected.load() == 2; }, 10s));
  work.reset();
  runner.join();
  ASSERT_TRUE(term_b && term_b->owns());
  EXPECT_GT(term_b->token(), 0);
}

TEST_P(AsyncLocks, TheExampleServerTakesALockPerRequest) {
  // The example runs in table mode whatever this case's mode: in the advisory cases it serves the
  // same database's lock table, so the example is tested once more there, never skipped.
  dblock::test::ChildProcess server({DBLOCK_ASIO_EXAMPLE_PATH, installation_->dsn(), "0"});
  // Its first line, once written (or all it wrote, had it ended first).
  std::string banner;
  eventually(
      [&] {
        auto text = server.output();
        banner = text.substr(0, text.find('\n'));
        return text.find('\n') != std::string::npos || !dblock::test::process_alive(server.pid());
      },
      30s);
  ASSERT_EQ(banner.rfind("listening on 127.0.0.1:", 0), 0u) << banner;
  auto port = static_cast<unsigned short>(std::stoi(banner.substr(banner.rfind(':') + 1)));
  // Two clients ask for one name at once: both are served, one after the other, with rising tokens.
  auto ask = [port](const std::string& request) {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    socket.connect({asio::ip::address_v4::loopback(), port});
    asio::write(socket, asio::buffer(request));
    std::string reply;
    asio::read_until(socket, asio::dynamic_buffer(reply), '\n');
    return reply;
  };
  auto first = std::async(std::launch::async, ask, "LOCK example/x 200\n");
  auto second = std::async(std::launch::async, ask, "LOCK example/x 10\n");
  auto a = first.get(), b = second.get();
  server.signal(SIGTERM);
  auto ended = server.finish();
  EXPECT_TRUE(ended.signal == 0 && ended.exit_code == 0) << ended.exit_code << ": " << ended.output;
  ASSERT_EQ(a.rfind("OK example/x ", 0), 0u) << a;
  ASSERT_EQ(b.rfind("OK example/x ", 0), 0u) << b;
  EXPECT_NE(std::stoll(a.substr(13)), std::stoll(b.substr(13)));
  EXPECT_TRUE(nothing_held("example/x"));
}

INSTANTIATE_TEST_SUITE_P(Backends, AsyncLocks,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kPostgresAdvisory,
                                                                  dblock::test::kMysqlTable, dblock::test::kSqlite})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
