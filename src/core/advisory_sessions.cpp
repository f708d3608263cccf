// AdvisoryCore's pinned sessions: one per owner, kept while the owner holds locks and lingering
// after, given back when the pool runs dry, detached when broken or overdue; the watchdog that
// checks the idle ones, and what a lock's deadline passing does to its session.
#include "core/advisory_core.hpp"

#include <mutex>

#include <fmt/format.h>

namespace dblock::detail {

void AdvisoryCore::drop_if_overdue(const std::shared_ptr<Pinned>& pinned) {
  {
    std::lock_guard lock(mutex_);
    if (!pinned->overdue) return;
    pinned->overdue = false;
  }
  // Its locks were reported lost and taken out when their deadline passed: the server must not
  // keep holding them on a session this owner goes on using.
  pinned->session.reset();
}

void AdvisoryCore::prove_alive(const std::shared_ptr<Pinned>& pinned, SteadyClock::time_point sent) {
  auto now = SteadyClock::now();
  std::lock_guard lock(mutex_);
  for (auto& [key, held] : pinned->held) held->extend(lease_deadline(sent, held->ttl.load()), now);
}

std::shared_ptr<AdvisoryCore::Pinned> AdvisoryCore::pin() {
  auto owner_key = owner_key_for_this_thread();
  std::lock_guard lock(mutex_);
  auto& pinned = pinned_[owner_key];
  if (!pinned) pinned = std::make_shared<Pinned>(owner_for_this_thread());
  ++pinned->users;
  pinned->used_since_check = true;
  return pinned;
}

void AdvisoryCore::unpin(const std::shared_ptr<Pinned>& pinned) {
  std::lock_guard lock(mutex_);
  --pinned->users;  // the session lingers: see Pinned
}

void AdvisoryCore::give_back_idle_sessions(const std::vector<std::shared_ptr<Pinned>>& owners) {
  std::vector<std::unique_ptr<AdvisorySession>> idle;
  for (auto& pinned : owners) {
    // try_lock: another thread may be inside `use` of an owner. This thread may be too (a lease
    // that found the pool dry): the recursive mutex then lets it in, and its own owner's users,
    // which count the acquisition it is in, keep that session.
    std::unique_lock use(pinned->use, std::try_to_lock);
    if (!use.owns_lock()) continue;
    std::lock_guard lock(mutex_);
    if (pinned->users == 0 && pinned->session) idle.push_back(std::move(pinned->session));
  }
  // `idle` goes out of scope here, outside the locks: each session back to the pool.
}

std::vector<std::shared_ptr<AdvisoryCore::AdvisoryHeld>> AdvisoryCore::detach_session(
    const std::shared_ptr<Pinned>& pinned) {
  pinned->session.reset();  // broken or untrustworthy: the pool drops it
  std::vector<std::shared_ptr<AdvisoryHeld>> gone;
  std::lock_guard lock(mutex_);
  for (auto& [key, held] : pinned->held) gone.push_back(held);
  pinned->users -= gone.size();
  pinned->held.clear();
  return gone;
}

std::vector<std::shared_ptr<HeldLock>> AdvisoryCore::held_snapshot() {
  std::vector<std::shared_ptr<HeldLock>> snapshot;
  std::lock_guard lock(mutex_);
  for (auto& [owner, pinned] : pinned_)
    for (auto& [key, held] : pinned->held) snapshot.push_back(held);
  return snapshot;
}

void AdvisoryCore::deadline_passed(const std::shared_ptr<HeldLock>& held_base) {
  auto held = std::static_pointer_cast<AdvisoryHeld>(held_base);
  std::vector<std::shared_ptr<AdvisoryHeld>> gone;
  {
    std::lock_guard lock(mutex_);
    auto& pinned = *held->pinned;
    auto it = pinned.held.find(key_of(held->target));
    if (it == pinned.held.end() || it->second != held) return;  // released meanwhile
    // The session gave no sign of life for a whole TTL: none of its locks can be trusted, and
    // the session is dropped by the next one to use it.
    pinned.overdue = true;
    for (auto& [key, on_session] : pinned.held) gone.push_back(on_session);
    pinned.users -= gone.size();
    pinned.held.clear();
  }
  report_all_lost(gone, "its connection gave no sign of life before the local deadline");
}

bool AdvisoryCore::registered(const AdvisoryHeld& held) const {
  auto it = held.pinned->held.find(key_of(held.target));
  return it != held.pinned->held.end() && it->second.get() == &held;
}

void AdvisoryCore::report_all_lost(const std::vector<std::shared_ptr<AdvisoryHeld>>& gone, std::string_view why) {
  for (auto& held : gone) report_lost(*held, why);
}

bool AdvisoryCore::watchdog_cycle() {
  std::vector<std::shared_ptr<Pinned>> snapshot, unused;
  {
    std::lock_guard lock(mutex_);
    std::erase_if(pinned_, [&](const auto& entry) {
      auto& pinned = entry.second;
      bool forgotten = pinned->users == 0 && !pinned->used_since_check;
      pinned->used_since_check = false;
      if (forgotten) unused.push_back(pinned);
      return forgotten;
    });
    for (auto& [owner, pinned] : pinned_) snapshot.push_back(pinned);
  }
  give_back_idle_sessions(unused);
  for (auto& pinned : snapshot) {
    std::vector<std::shared_ptr<AdvisoryHeld>> gone;
    std::string why;
    {
      // A session busy with a statement proves itself alive when that returns; only idle ones
      // are checked.
      std::unique_lock use(pinned->use, std::try_to_lock);
      if (!use.owns_lock()) continue;
      drop_if_overdue(pinned);
      if (!pinned->session) continue;
      auto sent = SteadyClock::now();
      try {
        pinned->session->check_alive();
        prove_alive(pinned, sent);
        continue;
      } catch (const Error& e) {
        why = fmt::format("the connection holding it broke: {}", e.what());
        gone = detach_session(pinned);
      }
    }
    report_all_lost(gone, why);
  }
  return true;
}

}  // namespace dblock::detail
