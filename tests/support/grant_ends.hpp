#pragma once
// The event hook's account of grants, as the Prometheus adapter keeps dblock_held_locks and the
// hold histogram: a grant starts with the `acquired` event of count 1 and ends with the `released`
// event of its last level (count 0) or with `lost`. Each grant must end exactly once, whatever
// ends it; a second end drives the gauge below zero for good and counts the hold twice.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include <dblock/options.hpp>

namespace dblock_test {

class GrantEnds {
 public:
  /// The on_event hook of the manager numbered `manager` (grants are told apart by manager, name and token).
  std::function<void(const dblock::LockEvent&)> hook(std::size_t manager) {
    return [this, manager](const dblock::LockEvent& event) { record(manager, event); };
  }

  /// What dblock_held_locks would show: grants started less grants ended.
  [[nodiscard]] std::int64_t held() const {
    std::lock_guard lock(mutex_);
    std::int64_t held = 0;
    for (const auto& [key, grant] : grants_) held += grant.started - grant.released - grant.lost;
    return held;
  }

  /// Ends reported for grants of `name` (released and lost), over every manager and token.
  [[nodiscard]] int ends_of(const std::string& name) const {
    std::lock_guard lock(mutex_);
    int ends = 0;
    for (const auto& [key, grant] : grants_)
      if (std::get<1>(key) == name) ends += grant.released + grant.lost;
    return ends;
  }

  /// The grants that did not end exactly once per start (the first few), described; empty when none.
  [[nodiscard]] std::string unbalanced() const {
    constexpr int kShown = 5;
    std::lock_guard lock(mutex_);
    std::string found;
    int count = 0;
    for (const auto& [key, grant] : grants_) {
      if (grant.started == grant.released + grant.lost) continue;
      if (++count > kShown) continue;
      found += fmt::format(
          "{}the grant of '{}' (token {}, manager {}) started {} time(s) and ended {} time(s): {} "
          "released, {} lost",
          found.empty() ? "" : "; ", std::get<1>(key), std::get<2>(key), std::get<0>(key), grant.started,
          grant.released + grant.lost, grant.released, grant.lost);
    }
    if (count > kShown) found += fmt::format("; and {} more", count - kShown);
    return found;
  }

 private:
  struct Grant {
    int started = 0, released = 0, lost = 0;
  };

  void record(std::size_t manager, const dblock::LockEvent& event) {
    bool starts = event.kind == dblock::LockEventKind::acquired && event.count == 1;
    bool released = event.kind == dblock::LockEventKind::released && event.count <= 0;
    bool lost = event.kind == dblock::LockEventKind::lost;
    if (!starts && !released && !lost) return;
    std::lock_guard lock(mutex_);
    auto& grant = grants_[{manager, std::string(event.name), event.token}];
    // Counted, not checked here: a loss found by the deadline timer may be reported before the
    // acquiring thread reports the grant.
    if (starts) ++grant.started;
    if (released) ++grant.released;
    if (lost) ++grant.lost;
  }

  mutable std::mutex mutex_;
  std::map<std::tuple<std::size_t, std::string, std::int64_t>, Grant> grants_;
};

}  // namespace dblock_test
