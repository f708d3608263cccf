#pragma once
// The test-control role (dblock::testing only): what a test does to a lease that no client of the
// database could, as domain operations. Present only on an SQLite store opened with a test clock.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dblock::detail {

class TestControlBackend {
 public:
  virtual ~TestControlBackend() = default;

  struct EndedLease {
    std::int64_t token = 0;
    std::chrono::milliseconds lock_delay{0};  // the row's lock-delay before end_lease
  };
  /// Ends the live lease of an exclusive holder of `name` now by the database's clock, and keeps
  /// the name unavailable until the row's expiry as it was (its lease and lock-delay): its holder's
  /// renewals fail from now on, and nobody else can take it yet. Empty when no live exclusive
  /// holder (a group, a revoked or minimum-hold row, none) was there.
  virtual std::optional<EndedLease> end_lease(std::string_view name) = 0;
  /// After end_lease, once the holder was told: the name is free `lock_delay` from now (the
  /// product's lock-delay after a lease that ended), if the row of `token` is still there with its
  /// lease ended. Returns whether it was.
  virtual bool free_after(std::string_view name, std::int64_t token, std::chrono::milliseconds lock_delay) = 0;
};

}  // namespace dblock::detail
