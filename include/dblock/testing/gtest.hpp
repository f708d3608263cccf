#pragma once
/// GoogleTest/GoogleMock helpers for dblock::testing (link GTest::gmock yourself): matchers for a
/// Lock and for TestStore::holder(), and assertions over what a TestStore saw.
///
///   EXPECT_THAT(lock, dblock::testing::IsLost());
///   EXPECT_THAT(lock, dblock::testing::StopRequested());
///   EXPECT_THAT(db.holder("job"), dblock::testing::HeldWithToken(lock.token()));
///   EXPECT_TRUE(dblock::testing::tokens_rise(db, "job"));
///   EXPECT_TRUE(dblock::testing::lost_once(db, "job"));
///
/// Each reads what it checks when called (thread-safe as the calls it makes).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dblock/lock.hpp>
#include <dblock/store.hpp>
#include <dblock/testing.hpp>

namespace dblock::testing {

/// A Lock that believes it no longer holds its name (Lock::lost()).
MATCHER(IsLost, negation ? "still believes it holds its lock" : "is lost (Lock::lost())") { return arg.lost(); }

/// A Lock whose stop token was requested (Lock::stop_token()).
MATCHER(StopRequested, negation ? "has no stop requested" : "has its stop token requested") {
  return arg.stop_token().stop_requested();
}

/// An optional<LockInfo> (TestStore::holder, Store::lock) of a live holder with this token.
MATCHER_P(HeldWithToken, token, "is held with token " + ::testing::PrintToString(token)) {
  if (!arg) {
    *result_listener << "nobody holds it";
    return false;
  }
  *result_listener << "owner " << arg->owner << ", token " << arg->token << ", " << arg->remaining.count()
                   << " ms left";
  return arg->state == LockState::held && arg->remaining.count() > 0 && arg->token == static_cast<std::int64_t>(token);
}

/// An optional<LockInfo> that no live holder stands behind: no row, or a row whose lease ended.
MATCHER(NotHeld, "is held by nobody") {
  if (!arg) return true;
  *result_listener << "owner " << arg->owner << ", token " << arg->token << ", " << arg->remaining.count()
                   << " ms left";
  return arg->state != LockState::held || arg->remaining.count() <= 0;
}

/// Every fresh grant of `name` so far drew a token greater than the one before it.
inline ::testing::AssertionResult tokens_rise(const TestStore& store, std::string_view name) {
  auto grants = store.grants(name);
  for (std::size_t i = 1; i < grants.size(); ++i)
    if (grants[i].token <= grants[i - 1].token)
      return ::testing::AssertionFailure() << "grant " << i << " of '" << name << "' has token " << grants[i].token
                                           << ", not above " << grants[i - 1].token;
  return ::testing::AssertionSuccess() << grants.size() << " grant(s) of '" << name << "', tokens rising";
}

/// `name` was reported lost exactly once (one on_lost call).
inline ::testing::AssertionResult lost_once(const TestStore& store, std::string_view name) {
  auto losses = store.losses(name);
  if (losses.size() == 1)
    return ::testing::AssertionSuccess() << "'" << name << "' lost once, token " << losses[0].token;
  return ::testing::AssertionFailure() << "'" << name << "' was reported lost " << losses.size() << " time(s)";
}

}  // namespace dblock::testing
