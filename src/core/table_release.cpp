// TableCore's releases: one level or the last, alone, combined or written behind; a lost reply
// resolved by reading the row; a revoked lock's release is its acknowledgement.
#include "core/table_core.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/scope_exit.hpp"
#include "base/validate.hpp"

namespace dblock::detail {

void TableCore::write_released(const std::vector<std::shared_ptr<HeldLock>>& batch) {
  std::vector<bool> deleted(batch.size(), true);
  try {
    if (batch.size() == 1) {
      deleted[0] = locks_.release_last(batch[0]->name, batch[0]->owner, batch[0]->token).has_value();
    } else {
      std::vector<ReleaseRequest> requests;
      requests.reserve(batch.size());
      for (const auto& held : batch) requests.push_back(ReleaseRequest{held->name, held->owner, held->token});
      deleted = locks_.release_last_many(requests);
    }
    for (std::size_t i = 0; i < batch.size(); ++i) count_statement_share(batch.size());
  } catch (const OutcomeUnknown& e) {
    // The batch may still land after anything sent now: never sent again. Each row is read, as a
    // single release's lost reply is; a row still ours is remembered as unsettled, and one whose
    // read fails too is remembered all the same (its DELETE may land under a later grant's reply).
    logger_->warn("{} release(s) written behind lost their reply ({}); reading the rows to resolve them", batch.size(),
                  e.what());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      try {
        deleted[i] = resolve_unknown_release(*batch[i], 1).has_value();
      } catch (const std::exception& again) {
        remember_unsettled(*batch[i]);
        logger_->warn("the release of '{}' written behind stays unresolved (its row lapses with its lease): {}",
                      batch[i]->name, again.what());
      }
    }
  } catch (const std::exception& e) {
    // Nothing of it landed (a transient error, no session): each again, alone, by a release's rules.
    logger_->warn("{} release(s) written behind failed ({}); releasing each again", batch.size(), e.what());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      try {
        deleted[i] = release_once(*batch[i], 1, std::chrono::milliseconds(0), Combine::alone).has_value();
      } catch (const std::exception& again) {
        logger_->warn("the release of '{}' written behind failed (its row lapses with its lease): {}", batch[i]->name,
                      again.what());
      }
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (!deleted[i]) settle_not_ours(batch[i], true);
}

bool TableCore::settle_not_ours(const std::shared_ptr<HeldLock>& held, bool written_behind) {
  // The holder's last release is its acknowledgement of a revocation: it no longer believes it
  // holds the lock, so the name need not wait for the revoked lease to end.
  bool acknowledged = acknowledge_revocation(*held);
  // Its caller was told how the grant ended when the release was queued (release()): a loss found
  // now would be a second end of it, so it only goes to the log.
  if (written_behind)
    logger_->warn(
        "the release of lock '{}' (token {}), written behind once its caller had been told how the grant "
        "ended, found it {}",
        held->name, held->token.load(),
        acknowledged ? "revoked (the name is free now)" : "gone: its lease had ended or it was taken over");
  return acknowledged;
}

std::optional<std::int64_t> TableCore::release_once(const HeldLock& held, std::int64_t depth_before,
                                                    std::chrono::milliseconds min_hold, Combine first_try) {
  try {
    int tries = 0;
    return with_release_retries([&] {
      if (held.kind != HolderKind::exclusive)
        return groups_->release_member(held.name, held.owner, held.kind, held.token);
      // Within its minimum hold the row stays, held by nobody, until grant + min_hold; one extra
      // statement only for locks that ask for a minimum hold and outlive it.
      if (depth_before <= 1 && min_hold.count() > 0 &&
          locks_.release_keeping(held.name, held.owner, held.token, min_hold))
        return std::optional<std::int64_t>(0);
      if (depth_before <= 1 && queue_ != nullptr)
        return queue_->release_handing_off(held.name, held.owner, held.token, held.hand_to);
      if (depth_before <= 1 && releases_) {
        std::size_t carried = 1;
        bool deleted = releases_->submit(ReleaseRequest{held.name, held.owner, held.token},
                                         tries++ == 0 ? first_try : Combine::alone, carried);
        count_statement_share(carried);
        return deleted ? std::optional<std::int64_t>(0) : std::nullopt;
      }
      if (depth_before <= 1) return locks_.release_last(held.name, held.owner, held.token);
      return locks_.release(held.name, held.owner, held.token);
    });
  } catch (const OutcomeUnknown& e) {
    // A membership is done locally; one that did not land lapses with its lease, unrenewed.
    if (held.kind != HolderKind::exclusive) return std::max<std::int64_t>(depth_before - 1, 0);
    // Never release again: the abandoned statement may still run, and two decrements would
    // delete the row under an outer guard. If it never runs, the row keeps one level more than
    // we hold and lapses with its lease once we stop renewing it.
    logger_->warn("release of '{}' lost its reply ({}); reading the row to resolve it", held.name, e.what());
    try {
      return resolve_unknown_release(held, depth_before);
    } catch (...) {
      remember_unsettled(held);  // unread: its statement may still land all the same
      throw;
    }
  }
}

std::optional<std::int64_t> TableCore::resolve_unknown_release(const HeldLock& held, std::int64_t depth_before) {
  auto row = with_read_retries([&] { return locks_.read(held.name); });
  // Revoked from this grant: the release cannot have deleted it and never will (the owner is
  // marked), so it is settled as a release that found it revoked: acknowledged, reported lost.
  if (row && revoked_from(*row, held.owner, held.token)) return std::nullopt;
  bool still_ours = row && row->owner == held.owner && row->token == held.token;
  if (still_ours) remember_unsettled(held);
  if (still_ours) return std::min(row->count, depth_before - 1);
  return depth_before <= 1 ? std::optional<std::int64_t>(0) : std::nullopt;
}

bool TableCore::acknowledge_revocation(const HeldLock& held) {
  try {
    return with_release_retries([&] { return locks_.acknowledge_revoked(held.name, held.owner, held.token); });
  } catch (const std::exception& e) {
    // The revoked row then lapses with its lease: later, never unsafely.
    logger_->warn("letting go of the revoked lock '{}' failed (it lapses with its lease): {}", held.name, e.what());
    return false;
  }
}

void TableCore::prepare_hand_over(HeldLock& held, std::string_view successor) {
  if (queue_ == nullptr || held.kind != HolderKind::exclusive)
    ManagerBase::prepare_hand_over(held, successor);  // throws: nothing to hand over to
  validate_owner_id(successor, "the successor's owner id");
  std::lock_guard lock(mutex_);
  if (held.depth != 1 || held.min_hold.count() > 0)
    throw InvalidArgument(
        fmt::format("lock '{}' can be handed over only by its last level and without a minimum hold "
                    "({} level(s) held)",
                    held.name, held.depth));
  held.hand_to = successor;
}

void TableCore::release(const std::shared_ptr<HeldLock>& held) {
  std::optional<std::int64_t> remaining;
  bool acknowledged = false;
  bool written_behind = false;
  bool released_behind = false;  // written behind, and this release ends the grant as released
  std::exception_ptr failed;     // the statement's error, for the caller once the end is reported
  std::int64_t depth_before = 0;
  auto sent = SteadyClock::now();
  {
    auto pass = gates_.enter(Key{held->owner, held->name, held->kind});
    std::chrono::milliseconds min_hold{0};
    {
      // Forget first: whatever the database says, this guard no longer holds the lock, and a row
      // we fail to release must not be renewed forever.
      std::lock_guard lock(mutex_);
      depth_before = held->depth;
      min_hold = held->min_hold;
      if (--held->depth <= 0) {
        forget(held);
        if (auto it = unreleased_.find({held->name, held->token}); it != unreleased_.end()) unreleased_.erase(it);
      }
    }
    sent = SteadyClock::now();
    bool last_plain = held->kind == HolderKind::exclusive && depth_before <= 1;
    // Queued while the pass is held: a re-entry of this owner waits for it (acquire_once).
    // What the manager knows is all a release written behind can report, and it claims the grant's
    // end before the writer can send it: what its statement finds later is no second end.
    if (written_behind_ && last_plain && min_hold.count() == 0)
      written_behind = written_behind_->admit(
          held, [&]() noexcept { released_behind = held->believed_held(local_now()) && held->claim_end(); });
    if (!written_behind) {
      ScopeExit sent_own([&]() noexcept {
        if (written_behind_ && last_plain && min_hold.count() == 0) written_behind_->sent();
      });
      try {
        remaining = release_once(*held, depth_before, min_hold);
        // An inner level's release is no acknowledgement: an outer guard may still believe it
        // until its next renewal.
        if (!remaining && last_plain) acknowledged = settle_not_ours(held, false);
      } catch (...) {
        failed = std::current_exception();
      }
    }
  }
  if (written_behind) {
    count_written_behind();
    if (!released_behind)
      throw_lost_on_release(*held,
                            "it had been reported lost or its local deadline had passed (the release was "
                            "written behind)");
    emit_released(*held, 0, sent);
    return;
  }
  if (failed) {
    report_failed_release(*held, std::max<std::int64_t>(depth_before - 1, 0), sent);
    std::rethrow_exception(failed);
  }
  if (acknowledged) throw_lost_on_release(*held, "it was revoked (dblock release --force); the name is free now");
  if (!remaining) throw_lost_on_release(*held, "its lease ended or another owner took it over");
  // The row was still ours and is released now, but the holder was already told it lost it.
  if (held->lost.load()) throw_lost_on_release(*held, "it had been reported lost (its local deadline passed)");
  // The levels this manager's guards still hold, as in advisory mode: a membership's row may count
  // more (a level whose reply was lost lapses with its lease), but the grant ends with its last guard.
  report_released(*held, std::max<std::int64_t>(depth_before - 1, 0), sent);
}

}  // namespace dblock::detail
