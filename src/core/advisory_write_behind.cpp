// AdvisoryCore's releases written behind (ManagerOptions::write_behind_releases): a last release
// queues its unlock on the owner's session and returns. The next statement on that session sends
// it first; the owner's next try carries it in the same statement; the writer thread sends what
// nobody else came to send.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/advisory_core.hpp"
#include "core/store_parts.hpp"

namespace dblock::detail {

namespace {

/// How long the writer leaves a queued unlock to the owner's next try. An owner that comes
/// straight back (a loop of short critical sections) takes its session within microseconds and
/// saves the round trip; without this the writer, woken by the release, often takes the session
/// first and the owner waits behind its lone unlock. Another process waits at most this much
/// longer for the name (doc/performance.md, "Releases written behind").
constexpr std::chrono::microseconds kOwnersTurn{200};
/// How soon the writer looks again at a session that was busy with another statement: that one
/// may have started before the unlock was queued, and so not carry it.
constexpr std::chrono::milliseconds kBusyRetry{1};

}  // namespace

AdvisoryCore::~AdvisoryCore() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    writer_stopping_ = true;
  }
  wake_writer_.notify_all();
  writer_.join();
}

bool AdvisoryCore::queue_unlock(const std::shared_ptr<AdvisoryHeld>& held) {
  auto& pinned = held->pinned;
  if (pinned->pending.empty()) pinned->pending_since = SteadyClock::now();
  pinned->pending.push_back(held);
  unanswered_.emplace_back(held->target.key, pinned.get());
  if (pinned->queued) return false;
  pinned->queued = true;
  to_write_.push_back(pinned);
  return true;
}

std::shared_ptr<AdvisoryCore::AdvisoryHeld> AdvisoryCore::send_pending(const std::shared_ptr<Pinned>& pinned,
                                                                       bool keep_last) {
  std::vector<std::shared_ptr<AdvisoryHeld>> unlocks;
  std::shared_ptr<AdvisoryHeld> kept;
  {
    std::lock_guard lock(mutex_);
    if (pinned->pending.empty()) return nullptr;
    unlocks.swap(pinned->pending);
    if (keep_last) {
      kept = std::move(unlocks.back());
      unlocks.pop_back();
    }
  }
  // A pending unlock implies a live session: dropping it makes them moot (pending_moot).
  std::size_t sent = 0;
  try {
    for (; sent < unlocks.size(); ++sent) {
      bool was_held = pinned->session->unlock(unlocks[sent]->target);
      answered(pinned, unlocks[sent], was_held);
    }
    return kept;
  } catch (const std::exception& e) {
    // Whatever failed, the server may still hold them: the session goes, and every lock on it.
    for (; sent < unlocks.size(); ++sent) answered(pinned, unlocks[sent], true);
    if (kept) answered(pinned, kept, true);
    {
      // The report waits for the deadline timer's thread, but the belief must end before the
      // connection closes and the server lets the locks go: their local deadlines end now.
      auto now = SteadyClock::now().time_since_epoch().count();
      std::lock_guard lock(mutex_);
      for (auto& [key, held] : pinned->held) held->local_deadline.store(std::min(held->local_deadline.load(), now));
    }
    auto gone = detach_session(pinned);
    for (auto& held : gone)
      report_lost_later(
          held, fmt::format("sending a release written behind failed, so its connection was given up: {}", e.what()));
    return nullptr;
  }
}

void AdvisoryCore::answered(const std::shared_ptr<Pinned>& pinned, const std::shared_ptr<AdvisoryHeld>& released,
                            bool was_held) {
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    stopping = writer_stopping_;
    auto it = std::find(unanswered_.begin(), unanswered_.end(),
                        std::pair<AdvisoryKey, const Pinned*>{released->target.key, pinned.get()});
    if (it != unanswered_.end()) unanswered_.erase(it);
    --pinned->users;  // the release's pin, kept until now
  }
  unlocks_answered_.notify_all();
  if (!was_held) {
    if (stopping) {  // the writer's last round: the deadline timer has stopped already
      logger_->warn("lock '{}': its release, written behind, found the server no longer held it", released->name);
      return;
    }
    report_lost_later(released, "its release, written behind, found the server no longer held it");
  }
}

void AdvisoryCore::pending_moot(const std::shared_ptr<Pinned>& pinned) {
  std::vector<std::shared_ptr<AdvisoryHeld>> moot;
  {
    std::lock_guard lock(mutex_);
    moot.swap(pinned->pending);
  }
  for (auto& released : moot) answered(pinned, released, true);
}

void AdvisoryCore::wait_for_unlocks(const AdvisoryKey& key, const Pinned* mine) {
  std::unique_lock lock(mutex_);
  auto others_out = [&] {
    return std::any_of(unanswered_.begin(), unanswered_.end(),
                       [&](const auto& entry) { return entry.first == key && entry.second != mine; });
  };
  if (unanswered_.empty() || !others_out()) return;
  auto limit = StoreParts::connect_timeout(*store_);
  if (!unlocks_answered_.wait_for(lock, limit, [&] { return !others_out(); }))
    throw ConnectionError(fmt::format(
        "the release of this lock written behind by this manager was still out after {} ms (the database is slow or "
        "unreachable); nothing was sent",
        limit.count()));
}

void AdvisoryCore::write_unlocks() {
  // Each owner with unlocks stays on to_write_ until they are sent (by anyone): the writer wakes
  // when its turn comes, not at every release.
  std::vector<std::shared_ptr<Pinned>> due;
  std::unique_lock lock(mutex_);
  while (true) {
    bool stopping = writer_stopping_;
    auto now = SteadyClock::now();
    auto next = SteadyClock::time_point::max();
    std::erase_if(to_write_, [&](const std::shared_ptr<Pinned>& pinned) {
      if (pinned->pending.empty()) {  // sent by whoever used the session
        pinned->queued = false;
        return true;
      }
      auto turn = pinned->pending_since + kOwnersTurn;
      if (stopping || turn <= now)
        due.push_back(pinned);
      else
        next = std::min(next, turn);
      return false;
    });
    if (stopping && to_write_.empty()) return;
    if (due.empty()) {
      if (next == SteadyClock::time_point::max())
        wake_writer_.wait(lock);
      else
        wake_writer_.wait_until(lock, next);
      continue;
    }
    lock.unlock();
    bool busy = false;
    for (auto& pinned : due) {
      // A session busy with a statement sends its unlocks before its next one: the writer only
      // comes back to it in case that one started before they were queued.
      std::unique_lock use(pinned->use, std::defer_lock);
      if (stopping)
        use.lock();
      else if (!use.try_lock()) {
        busy = true;
        continue;
      }
      drop_if_overdue(pinned);
      (void)send_pending(pinned, false);
    }
    due.clear();
    lock.lock();
    if (busy && !writer_stopping_) wake_writer_.wait_for(lock, kBusyRetry);
  }
}

}  // namespace dblock::detail
