// dblock::testing with the asio API: a lost lease reaches asio work through async_wait_lost, whose
// handler cancels what is bound to a cancellation slot, and Lock::stop_token() as for the
// synchronous API.

#include <dblock/asio.hpp>
#include <dblock/testing.hpp>

#include <chrono>
#include <optional>

#include <gtest/gtest.h>
#include <asio.hpp>

namespace {

using namespace std::chrono_literals;

TEST(TestingKitAsio, ALossReachesTheWorkBoundToACancellationSlot) {
  dblock::testing::TestStore db;
  asio::io_context io;
  dblock::AsyncLockManager locks(io.get_executor(), db.store());
  std::optional<dblock::Lock> held;
  locks.async_acquire("job", 0ms, [&](std::exception_ptr error, dblock::Lock lock) {
    if (!error) held = std::move(lock);
  });
  // Each wait below is for a completion the code under test delivers, bounded (real time).
  auto until = std::chrono::steady_clock::now() + 30s;
  while (!held && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
  ASSERT_TRUE(held);
  io.restart();  // it ran out of work after the acquisition: a stopped context runs nothing more

  asio::cancellation_signal cancel_work;
  asio::steady_timer work(io, 1h);  // the task's work: a long wait, cancellable through the slot
  std::optional<std::error_code> work_ended, lost;
  work.async_wait(asio::bind_cancellation_slot(cancel_work.slot(), [&](std::error_code code) { work_ended = code; }));
  locks.async_wait_lost(*held, [&](std::error_code code) {
    lost = code;
    cancel_work.emit(asio::cancellation_type::terminal);
  });

  ASSERT_TRUE(db.expire("job"));
  EXPECT_TRUE(held->lost());
  EXPECT_EQ(db.losses("job").size(), 1U);
  while ((!lost || !work_ended) && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
  ASSERT_TRUE(lost) << "async_wait_lost completed";
  EXPECT_FALSE(*lost) << "completes with no error once the lock is lost";
  ASSERT_TRUE(work_ended) << "the work bound to the slot was cancelled";
  EXPECT_EQ(*work_ended, asio::error::operation_aborted);
  EXPECT_TRUE(held->stop_token().stop_requested());
  EXPECT_TRUE(held->lost());
}

}  // namespace
