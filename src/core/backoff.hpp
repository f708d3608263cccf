#pragma once
// Jittered exponential backoff; pure logic with an injectable random source for unit tests.

#include <algorithm>
#include <chrono>
#include <random>

namespace dblock::detail {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, double factor, std::chrono::milliseconds max, std::uint64_t seed)
      : next_(std::max<std::chrono::milliseconds::rep>(initial.count(), 1)),
        factor_(std::max(factor, 1.0)),
        max_(std::max(max.count(), next_)),
        random_(seed) {}

  /// The next delay: uniform in [d/2, d] where d grows by `factor` per call up to `max`.
  std::chrono::milliseconds next() {
    auto current = next_;
    next_ = std::min<std::chrono::milliseconds::rep>(
        max_, static_cast<std::chrono::milliseconds::rep>(static_cast<double>(next_) * factor_) + 1);
    std::uniform_int_distribution<std::chrono::milliseconds::rep> jitter(current / 2, current);
    return std::chrono::milliseconds(std::max<std::chrono::milliseconds::rep>(jitter(random_), 1));
  }

 private:
  std::chrono::milliseconds::rep next_;
  double factor_;
  std::chrono::milliseconds::rep max_;
  std::mt19937_64 random_;
};

}  // namespace dblock::detail
