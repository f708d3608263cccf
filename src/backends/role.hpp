#pragma once
// A role a backend hands out (backend.hpp), or its absence with the reason the caller is told: a
// database without advisory locks says why, rather than answering a flag and throwing later.

#include <string>
#include <utility>

#include <dblock/errors.hpp>

namespace dblock::detail {

template <class T>
class Role {
 public:
  [[nodiscard]] static Role of(T& role) noexcept { return Role(&role, {}); }
  [[nodiscard]] static Role absent(std::string why) { return Role(nullptr, std::move(why)); }

  /// Whether the backend has this role.
  explicit operator bool() const noexcept { return role_ != nullptr; }
  /// @throws InvalidArgument(why_absent()) when absent.
  T& get() const {
    if (role_ == nullptr) throw InvalidArgument(why_);
    return *role_;
  }
  T* operator->() const { return &get(); }
  /// The role, or nullptr when absent (for clients that work without it).
  [[nodiscard]] T* get_if() const noexcept { return role_; }
  /// Empty when present.
  [[nodiscard]] const std::string& why_absent() const noexcept { return why_; }

 private:
  Role(T* role, std::string why) : role_(role), why_(std::move(why)) {}

  T* role_;
  std::string why_;
};

}  // namespace dblock::detail
