#include "core/owner_id.hpp"

#include <unistd.h>

#include <array>
#include <random>
#include <utility>

#include <fmt/format.h>

namespace dblock::detail {

namespace {

std::uint64_t random_u64() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

}  // namespace

std::string make_manager_owner_id(std::string_view tag) {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  std::string id = fmt::format("{}:{}:{:016x}", host.data(), getpid(), random_u64());
  if (!tag.empty()) id += fmt::format(":{}", tag);
  return id;
}

namespace {
thread_local std::uint64_t task_nonce = 0;  // ScopedOwnerNonce's; 0: none
}  // namespace

std::uint64_t this_thread_owner_nonce() {
  if (task_nonce != 0) return task_nonce;
  thread_local const std::uint64_t nonce = random_u64() | 1;  // never 0, which stands for "the manager"
  return nonce;
}

ScopedOwnerNonce::ScopedOwnerNonce(std::uint64_t nonce) : previous_(std::exchange(task_nonce, nonce)) {}
ScopedOwnerNonce::~ScopedOwnerNonce() { task_nonce = previous_; }

std::string thread_owner_id(std::string_view manager_owner, std::uint64_t nonce) {
  // By hand rather than with fmt: every acquisition of a per-thread owner builds it.
  constexpr std::string_view kDigits = "0123456789abcdef";
  std::string owner;
  owner.reserve(manager_owner.size() + 18);
  owner.append(manager_owner).append(":t");
  for (int shift = 60; shift >= 0; shift -= 4) owner += kDigits[(nonce >> shift) & 0xf];
  return owner;
}

}  // namespace dblock::detail
