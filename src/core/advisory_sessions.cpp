// AdvisoryCore's pinned sessions: one per owner, kept while the owner holds locks and lingering
// after, given back when the pool runs dry, detached when broken or overdue.
#include "core/advisory_core.hpp"

#include <mutex>

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

}  // namespace dblock::detail
