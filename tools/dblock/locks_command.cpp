#include "dblock/locks_command.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

namespace dblock::cli {

namespace {

std::string_view state_name(LockState state) {
  switch (state) {
    case LockState::revoked:
      return "revoked";
    case LockState::min_hold:
      return "min-hold";
    case LockState::delayed:
      return "delayed";
    default:
      return "held";
  }
}

/// The records of once-per-occurrence runs, escaped like lock rows (one row each).
void print_occurrences(const std::vector<OccurrenceInfo>& runs) {
  if (runs.empty()) return;
  fmt::print("{:<32} {:<28} {:<9} {:>8} {:>5} {:>10} {:>8}  {}\n", "OCCURRENCE OF", "KEY", "STATUS", "ATTEMPTS", "EXIT",
             "TOKEN", "AGE", "OWNER");
  for (auto& run : runs)
    fmt::print("{:<32} {:<28} {:<9} {:>8} {:>5} {:>10} {:>8}  {}\n", terminal_safe(run.name),
               terminal_safe(run.occurrence), occurrence_status_name(run.status), run.attempts,
               run.exit_code ? std::to_string(*run.exit_code) : std::string("-"), run.token, format_duration(run.age),
               terminal_safe(run.owner));
}

/// The fair queue's waiters, escaped like lock rows (one row each), in arrival order per name.
void print_waiters(const std::vector<WaiterInfo>& waiters) {
  if (waiters.empty()) return;
  fmt::print("{:<32} {:<9} {:>8} {:>10}  {}\n", "WAITING FOR", "KIND", "POSITION", "WAITED", "OWNER");
  for (auto& waiter : waiters)
    fmt::print("{:<32} {:<9} {:>8} {:>10}  {}\n", terminal_safe(waiter.name), holder_kind_name(waiter.kind),
               waiter.position, format_duration(waiter.waited), terminal_safe(waiter.owner));
}

}  // namespace

void print_locks(Store& store, bool json) {
  auto rows = store.locks();
  auto runs = occurrences(store);
  auto waiters = store.waiters();
  if (json) {
    fmt::print("[");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto& row = rows[i];
      fmt::print(
          "{}{{\"name\":{},\"owner\":{},\"kind\":\"{}\",\"state\":\"{}\",\"count\":{},\"token\":{},"
          "\"remaining_ms\":{},\"expired\":{}{}{}}}",
          i == 0 ? "" : ",", json_string(row.name), json_string(row.owner), holder_kind_name(row.kind),
          state_name(row.state), row.count, row.token, row.remaining.count(), row.remaining.count() <= 0,
          row.lock_delay.count() > 0 ? fmt::format(",\"lock_delay_ms\":{}", row.lock_delay.count()) : "",
          row.note.empty() ? "" : fmt::format(",\"note\":{}", json_string(row.note)));
    }
    // Occurrence records of once-per-occurrence runs, as entries of kind "occurrence".
    for (std::size_t i = 0; i < runs.size(); ++i) {
      auto& run = runs[i];
      fmt::print(
          "{}{{\"name\":{},\"kind\":\"occurrence\",\"occurrence\":{},\"owner\":{},\"token\":{},"
          "\"status\":\"{}\",\"attempts\":{},\"exit_code\":{},\"age_ms\":{}}}",
          rows.empty() && i == 0 ? "" : ",", json_string(run.name), json_string(run.occurrence), json_string(run.owner),
          run.token, occurrence_status_name(run.status), run.attempts,
          run.exit_code ? std::to_string(*run.exit_code) : std::string("null"), run.age.count());
    }
    // The fair queue's waiters, as entries of state "waiting".
    for (std::size_t i = 0; i < waiters.size(); ++i) {
      auto& waiter = waiters[i];
      fmt::print(
          "{}{{\"name\":{},\"owner\":{},\"kind\":\"{}\",\"state\":\"waiting\",\"position\":{},\"waited_ms\":{}}}",
          rows.empty() && runs.empty() && i == 0 ? "" : ",", json_string(waiter.name), json_string(waiter.owner),
          holder_kind_name(waiter.kind), waiter.position, waiter.waited.count());
    }
    fmt::print("]\n");
    return;
  }
  fmt::print("store: {}\n", terminal_safe(store.redacted_uri()));
  print_occurrences(runs);
  if (rows.empty()) {
    fmt::print("no locks\n");
    print_waiters(waiters);
    return;
  }
  // Holders' notes, when any holder has one, come last: after the owner, as NOTE.
  bool notes = std::ranges::any_of(rows, [](const LockInfo& row) { return !row.note.empty(); });
  fmt::print("{:<32} {:<9} {:<8} {:>6} {:>10} {:>10}  {}{}\n", "NAME", "KIND", "STATE", "COUNT", "TOKEN", "LEASE",
             "OWNER", notes ? "  NOTE" : "");
  for (auto& row : rows) {
    auto lease = row.remaining.count() > 0 ? format_duration(row.remaining) : std::string("expired");
    // Names, owners and notes come from the database: escaped, so that each lock is exactly one row.
    fmt::print("{:<32} {:<9} {:<8} {:>6} {:>10} {:>10}  {}{}\n", terminal_safe(row.name), holder_kind_name(row.kind),
               state_name(row.state), row.count, row.token, lease, terminal_safe(row.owner),
               row.note.empty() ? "" : "  " + terminal_safe(row.note));
  }
  print_waiters(waiters);
}

}  // namespace dblock::cli
