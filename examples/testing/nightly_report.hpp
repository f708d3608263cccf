#pragma once
// The code under test in nightly_report_test.cpp: a report every host fires from its timer, which
// must run once per day across the fleet (an occurrence, doc/semantics.md "Occurrences").

#include <chrono>
#include <functional>
#include <memory>

#include <dblock/dblock.hpp>

/// Runs `report` if this is the first firing of today's occurrence; returns whether it ran.
inline bool run_nightly_report(const std::shared_ptr<dblock::Store>& store, dblock::LockManager& locks,
                               const std::function<bool()>& report) {
  auto lock = locks.try_acquire("nightly-report");
  if (!lock) return false;  // another host runs it right now
  auto run = dblock::Occurrence::claim(store, *lock, {.period = std::chrono::hours(24)});
  if (!run.claimed()) return false;  // today's has run already
  run.finish(report() ? 0 : 1);
  return true;
}
