#pragma once
// The one retry policy: run a statement again only on errors the backend classified as transient
// (deadlock, serialization failure, busy database), a few times with a short growing pause; never
// on anything else (usage errors, unknown outcomes, broken connections).

#include <chrono>
#include <thread>

#include "backends/backend.hpp"

namespace dblock::detail {

inline constexpr int kTransientAttempts = 5;

template <class Fn>
auto retry_transient(Fn&& statement) {
  for (int attempt = 1;; ++attempt) {
    try {
      return statement();
    } catch (const TransientError&) {
      if (attempt == kTransientAttempts) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
    }
  }
}

}  // namespace dblock::detail
