#pragma once
// The fair queue's rules over the script's lock table (migration 0017's wait_turn and
// release_handing_off, the waiter's look and leave), and the queue role that sends them: with a
// stepper, every statement that writes ("take_turn", "leave", "release_handing_off") waits for the
// test to decide when it runs and what becomes of its reply; the look reads at once.
//
// One liberty: a name whose row an application's fenced transaction holds is never free to a turn
// here. On PostgreSQL a turn that finds such a row expired waits for the fence to end and then takes
// it; here it stays queued and takes it at a later turn, which is the same grant later.

#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "support/lock_script.hpp"

namespace dblock_test {

using dblock::detail::Turn;
using dblock::detail::WaiterLook;

namespace queue_rules {

inline std::chrono::milliseconds left_until(Clock::time_point end, Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(end - now);
}

/// The first waiter of `name` whose waiter lease is live: its seq, or 0. REQUIRES: script.mutex held.
inline std::int64_t first_live(Script& script, const std::string& name, Clock::time_point now) {
  auto queue = script.waiters.find(name);
  if (queue == script.waiters.end()) return 0;
  for (auto& [seq, waiter] : queue->second) {
    if (waiter.expires > now) return seq;
    ++script.dead_waiters_skipped;
  }
  return 0;
}

/// Whether `name` has a live row (a holder's, a group's or a revoked one). REQUIRES: script.mutex held.
inline bool held(Script& script, const std::string& name, Clock::time_point now) {
  auto row = script.rows.find(name);
  return (row != script.rows.end() && row->second.expires > now) || script.fenced.contains(name);
}

inline void erase_waiters_of(Script& script, const std::string& name, const std::string& owner) {
  if (auto queue = script.waiters.find(name); queue != script.waiters.end())
    std::erase_if(queue->second, [&](const auto& entry) { return entry.second.owner == owner; });
}

inline Turn take_turn(Script& script, const std::string& name, const std::string& owner, std::chrono::milliseconds ttl,
                      std::chrono::milliseconds waiter_ttl, std::int64_t seq) {
  std::lock_guard lock(script.mutex);
  auto now = Clock::now();
  auto& queue = script.waiters[name];
  if (seq > 0) {
    auto mine = queue.find(seq);
    if (mine == queue.end() || mine->second.owner != owner) {
      auto row = script.rows.find(name);
      if (row == script.rows.end() || row->second.owner != owner || row->second.expires <= now) return {};
      return {0, Grant{row->second.count, row->second.token}, left_until(row->second.expires, now)};
    }
    mine->second.expires = std::max(mine->second.expires, now + waiter_ttl);
  }
  auto first = first_live(script, name, now);
  if ((first == 0 || first == seq) && !held(script, name, now)) {
    script.rows[name] = Script::Row{owner, 1, ++script.next_token, now + ttl};
    erase_waiters_of(script, name, owner);
    if (seq > 0) ++script.turns_granted;
    return {0, Grant{1, script.next_token}, ttl};
  }
  if (seq == 0) {
    erase_waiters_of(script, name, owner);
    seq = ++script.next_waiter_seq;
    queue[seq] = Script::Waiter{owner, ttl, now + waiter_ttl};
    ++script.waiters_queued;
  }
  auto row = script.rows.find(name);
  auto left = row == script.rows.end() ? std::chrono::milliseconds(0)
                                       : std::max(left_until(row->second.expires, now), std::chrono::milliseconds(0));
  return {seq, std::nullopt, left};
}

inline WaiterLook look(Script& script, const std::string& name, const std::string& owner, std::int64_t seq) {
  script.read_rows();
  std::lock_guard lock(script.mutex);
  auto now = Clock::now();
  WaiterLook look;
  auto queue = script.waiters.find(name);
  look.queued = queue != script.waiters.end() && queue->second.contains(seq) && queue->second.at(seq).owner == owner;
  if (auto row = script.rows.find(name); row != script.rows.end()) {
    look.holder_left = left_until(row->second.expires, now);
    if (row->second.owner == owner && row->second.expires > now) {
      look.grant = Grant{row->second.count, row->second.token};
      look.grant_left = left_until(row->second.expires, now);
    }
  }
  return look;
}

inline bool leave(Script& script, const std::string& name, const std::string& owner, std::int64_t seq) {
  std::lock_guard lock(script.mutex);
  auto queue = script.waiters.find(name);
  if (queue != script.waiters.end()) {
    auto mine = queue->second.find(seq);
    if (mine != queue->second.end() && mine->second.owner == owner) {
      queue->second.erase(mine);
      return true;
    }
  }
  auto row = script.rows.find(name);
  if (row != script.rows.end() && row->second.owner == owner && row->second.expires > Clock::now())
    ++script.leaves_after_grant;
  return false;
}

inline std::optional<std::int64_t> release_handing_off(Script& script, const std::string& name,
                                                       const std::string& owner, std::int64_t token,
                                                       const std::string& successor) {
  std::lock_guard lock(script.mutex);
  auto row = script.rows.find(name);
  if (row == script.rows.end() || row->second.owner != owner || row->second.token != token) return std::nullopt;
  script.rows.erase(row);
  auto now = Clock::now();
  auto first = first_live(script, name, now);
  if (first == 0) {
    script.notice_release(name);
    return 0;
  }
  auto& queue = script.waiters[name];
  // The named successor, when it waits live, goes ahead of earlier waiters (migration 0019).
  for (auto& [seq, waiter] : queue)
    if (!successor.empty() && waiter.owner == successor && waiter.expires > now) {
      first = seq;
      ++script.named_handoffs;
      break;
    }
  auto waiter = queue.at(first);
  queue.erase(first);
  script.rows[name] = Script::Row{waiter.owner, 1, ++script.next_token, now + waiter.ttl};
  ++script.handoffs;
  script.notice_release(name, dblock::detail::HandedGrant{waiter.owner, first, script.next_token});
  return 0;
}

}  // namespace queue_rules

/// The queue role over the script.
class ScriptedQueue final : public dblock::detail::QueueBackend {
 public:
  explicit ScriptedQueue(std::shared_ptr<Script> script) : script_(std::move(script)) {}

  Turn take_turn(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl,
                 std::chrono::milliseconds waiter_ttl, std::int64_t seq) override {
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), ttl, waiter_ttl, seq] {
      return queue_rules::take_turn(*s, n, o, ttl, waiter_ttl, seq);
    };
    if (!script_->stepper) return apply();
    return run_stepped<Turn>(*script_, "take_turn", owner, {std::string(name)}, {seq}, apply);
  }
  WaiterLook look(std::string_view name, std::string_view owner, std::int64_t seq) override {
    return queue_rules::look(*script_, std::string(name), std::string(owner), seq);
  }
  bool leave(std::string_view name, std::string_view owner, std::int64_t seq) override {
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), seq] {
      return queue_rules::leave(*s, n, o, seq);
    };
    if (!script_->stepper) return apply();
    return run_stepped<bool>(*script_, "leave", owner, {std::string(name)}, {seq}, apply);
  }
  std::optional<std::int64_t> release_handing_off(std::string_view name, std::string_view owner, std::int64_t token,
                                                  std::string_view successor) override {
    ++script_->releases;
    auto apply = [s = script_, n = std::string(name), o = std::string(owner), token, to = std::string(successor)] {
      return queue_rules::release_handing_off(*s, n, o, token, to);
    };
    if (!script_->stepper) return apply();
    return run_stepped<std::optional<std::int64_t>>(*script_, "release_handing_off", owner, {std::string(name)},
                                                    {token}, apply);
  }
  std::size_t reap_waiters(std::size_t) override {
    std::lock_guard lock(script_->mutex);
    return script_->reap_waiters(Clock::now());
  }
  std::size_t waiter_rows(std::string_view name) override {
    std::lock_guard lock(script_->mutex);
    auto queue = script_->waiters.find(std::string(name));
    return queue == script_->waiters.end() ? 0 : queue->second.size();
  }
  std::int64_t place(std::string_view name, std::int64_t seq) override {
    std::lock_guard lock(script_->mutex);
    auto now = Clock::now();
    auto queue = script_->waiters.find(std::string(name));
    if (queue == script_->waiters.end()) return 0;
    auto mine = queue->second.find(seq);
    if (mine == queue->second.end() || mine->second.expires <= now) return 0;
    return std::count_if(queue->second.begin(), std::next(mine),
                         [&](const auto& entry) { return entry.second.expires > now; });
  }
  std::vector<dblock::WaiterInfo> list_waiters(std::size_t limit) override {
    std::lock_guard lock(script_->mutex);
    auto now = Clock::now();
    std::vector<dblock::WaiterInfo> listed;
    for (auto& [name, queue] : script_->waiters) {
      std::int64_t position = 0;
      for (auto& [seq, waiter] : queue)
        if (waiter.expires > now && listed.size() < limit)
          listed.push_back(dblock::WaiterInfo{name, waiter.owner, dblock::HolderKind::exclusive, ++position,
                                              std::chrono::milliseconds(0)});
    }
    return listed;
  }
  /// The script's seq is drawn from one counter for every name: it orders the edges by arrival.
  std::vector<dblock::detail::WaitEdge> wait_edges(std::size_t limit) override {
    std::lock_guard lock(script_->mutex);
    auto now = Clock::now();
    std::vector<dblock::detail::WaitEdge> edges;
    for (auto& [name, queue] : script_->waiters) {
      auto row = script_->rows.find(name);
      if (row == script_->rows.end() || row->second.expires <= now) continue;
      for (auto& [seq, waiter] : queue)
        if (waiter.expires > now) edges.push_back({waiter.owner, name, row->second.owner, seq});
    }
    std::sort(edges.begin(), edges.end(), [](auto& a, auto& b) { return a.queued_order < b.queued_order; });
    if (edges.size() > limit) edges.resize(limit);
    return edges;
  }

 private:
  std::shared_ptr<Script> script_;
};

}  // namespace dblock_test
