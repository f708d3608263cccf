// All-or-nothing acquisition of several names (LockManager::acquire_all, try_acquire_all) and
// the LockSet guard. Every caller takes names in one global order, sorted by their bytes, so two
// sets that overlap can never wait for each other in a cycle.

#include <dblock/errors.hpp>
#include <dblock/lock_manager.hpp>
#include <dblock/lock_set.hpp>

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "base/scope_exit.hpp"
#include "base/terminal_text.hpp"
#include "base/validate.hpp"
#include "core/manager_base.hpp"

namespace dblock {

namespace {

/// The names sorted by their bytes and each once, all checked before anything is sent.
std::vector<std::string> in_acquisition_order(const std::vector<std::string>& names) {
  if (names.empty()) throw InvalidArgument("acquire_all needs at least one name");
  for (const auto& name : names) detail::validate_lock_name(name);
  std::vector<std::string> ordered(names);
  std::sort(ordered.begin(), ordered.end());
  ordered.erase(std::unique(ordered.begin(), ordered.end()), ordered.end());
  return ordered;
}

}  // namespace

LockSet& LockSet::operator=(LockSet&& other) noexcept {
  if (this != &other) {
    release_quietly();
    locks_ = std::move(other.locks_);
  }
  return *this;
}

LockSet::~LockSet() { release_quietly(); }

void LockSet::release_quietly() noexcept {
  // Each Lock's destructor releases it and logs a failure; the last taken goes first.
  while (!locks_.empty()) locks_.pop_back();
}

const Lock& LockSet::at(std::string_view name) const {
  auto found = std::find_if(locks_.begin(), locks_.end(), [&](const Lock& lock) { return lock.name() == name; });
  if (found == locks_.end())
    throw InvalidArgument(fmt::format("this lock set holds no lock named '{}'", detail::terminal_safe(name)));
  return *found;
}

bool LockSet::lost() const {
  return std::any_of(locks_.begin(), locks_.end(), [](const Lock& lock) { return lock.lost(); });
}

std::chrono::steady_clock::time_point LockSet::local_deadline() const {
  auto earliest = std::chrono::steady_clock::time_point::max();
  for (const auto& lock : locks_) earliest = std::min(earliest, lock.local_deadline());
  return earliest;
}

void LockSet::release() {
  if (locks_.empty()) throw NotHeld("this LockSet was released or moved from");
  std::exception_ptr first_error;
  while (!locks_.empty()) {
    Lock last = std::move(locks_.back());
    locks_.pop_back();
    try {
      last.release();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

std::optional<LockSet> LockManager::try_acquire_all(const std::vector<std::string>& names, LockOptions options) {
  auto ordered = in_acquisition_order(names);
  LockSet taken({});  // gives back what it holds if we return empty or throw
  taken.locks_.reserve(ordered.size());
  bool complete = false;
  detail::ScopeExit free_at_once([&] {  // a failure holds nothing: what it took is free at once
    if (!complete)
      for (auto& lock : taken.locks_) core_->forgo_min_hold(lock);
  });
  for (const auto& name : ordered) {
    auto lock = core_->try_acquire(name, options);
    if (!lock) return std::nullopt;
    taken.locks_.push_back(std::move(*lock));
  }
  complete = true;
  return taken;
}

LockSet LockManager::acquire_all(const std::vector<std::string>& names, std::chrono::milliseconds timeout,
                                 LockOptions options) {
  if (timeout.count() < 0) throw InvalidArgument(fmt::format("timeout {}ms is negative", timeout.count()));
  auto ordered = in_acquisition_order(names);
  auto deadline = std::chrono::steady_clock::now() + std::min(timeout, wait_forever);
  LockSet taken({});
  taken.locks_.reserve(ordered.size());
  bool complete = false;
  detail::ScopeExit free_at_once([&] {  // a failure holds nothing: what it took is free at once
    if (!complete)
      for (auto& lock : taken.locks_) core_->forgo_min_hold(lock);
  });
  for (const auto& name : ordered) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    taken.locks_.push_back(core_->acquire(name, std::max(left, std::chrono::milliseconds(0)), options));
  }
  complete = true;
  return taken;
}

}  // namespace dblock
