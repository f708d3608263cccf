// dblock::testing with the asio API: a lost lease reaches asio work through async_wait_lost, whose
// handler cancels what is bound to a cancellation slot, and Lock::stop_token() as for the
// synchronous API.

#include <dblock/asio.hpp>
#include <dblock/testing.hpp>

#include <chrono>
#include <optional>

#include <asio.hpp>
#include <gtest/gtest.h>

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
  while (!held) io.run_one();  // the acquisition's completion

  asio::cancellation_signal cancel_work;
  asio::steady_timer work(io, 1h);  // the task's work: a long wait, cancellable through the slot
  std::optional<std::error_code> work_ended, lost;
  work.async_wait(asio::bind_cancellation_slot(cancel_work.slot(), [&](std::error_code code) { work_ended = code; }));
  locks.async_wait_lost(*held, [&](std::error_code code) {
    lost = code;
    cancel_work.emit(asio::cancellation_type::terminal);
  });

  ASSERT_TRUE(db.expire("job"));
  while (!lost || !work_ended) io.run_one();
  EXPECT_FALSE(*lost) << "completes with no error once the lock is lost";
  EXPECT_EQ(*work_ended, asio::error::operation_aborted);
  EXPECT_TRUE(held->stop_token().stop_requested());
  EXPECT_TRUE(held->lost());
}

}  // namespace
