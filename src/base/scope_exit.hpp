#pragma once
// Runs a function when the scope ends, however it ends (return, exception). The function must
// not throw.

#include <utility>

namespace dblock::detail {

template <class Fn>
class ScopeExit {
 public:
  explicit ScopeExit(Fn fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  Fn fn_;
};

}  // namespace dblock::detail
