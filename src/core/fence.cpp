// Fenced transactions on the store's own sessions (include/dblock/fence.hpp): the fence begins the
// transaction, the caller's work runs in it, and it commits only if the work returns.
#include <dblock/fence.hpp>

#include <algorithm>

#include <fmt/format.h>
#include <dblock/errors.hpp>
#include <dblock/lock_set.hpp>

#include "backends/fence_backend.hpp"
#include "base/holder_kind.hpp"
#include "base/terminal_text.hpp"
#include "base/validate.hpp"
#include "core/manager_base.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock {

FenceTarget::FenceTarget(const Lock& lock) : name(lock.name()), token(lock.token()) {
  // A permit or a reader fences its own membership, which its owner id and kind name.
  if (lock.held_ && lock.held_->kind != HolderKind::exclusive) {
    kind = lock.held_->kind;
    owner = lock.held_->owner;
  }
}

FenceTarget FenceTarget::member(std::string name, std::string owner, HolderKind kind, std::int64_t token) {
  if (kind == HolderKind::exclusive)
    throw InvalidArgument(
        fmt::format("FenceTarget::member of lock '{}': a member is a permit or a reader (kind permit "
                    "or shared), not exclusive",
                    detail::terminal_safe(name)));
  if (owner.empty())
    throw InvalidArgument(
        fmt::format("FenceTarget::member of lock '{}' needs the member's owner id", detail::terminal_safe(name)));
  FenceTarget target(std::move(name), token);
  target.kind = kind;
  target.owner = std::move(owner);
  return target;
}

FencedTransaction::FencedTransaction(detail::FencedSession& session, std::string name,
                                     std::chrono::steady_clock::time_point deadline)
    : session_(session), name_(std::move(name)), deadline_(deadline) {}

// The server ends a transaction idle past the lease left and cancels any one statement running
// that long, but a stream of short statements would go on: the client stops it at the lease's end.
void FencedTransaction::check_deadline() const {
  if (std::chrono::steady_clock::now() >= deadline_)
    throw LockLost(
        fmt::format("the fenced transaction on lock '{}' outlived the lease it had at the fence; rolled "
                    "back, nothing of it committed",
                    detail::terminal_safe(name_)));
}

FenceRows FencedTransaction::query(std::string_view sql, const std::vector<std::string>& params) {
  check_deadline();
  return session_.query(sql, params);
}

std::int64_t FencedTransaction::execute(std::string_view sql, const std::vector<std::string>& params) {
  check_deadline();
  return session_.execute(sql, params);
}

std::optional<std::chrono::milliseconds> FencedTransaction::lease_left() const noexcept {
  auto left = session_.lease_left_ms();
  if (left < 0) return std::nullopt;
  return std::chrono::milliseconds(left);
}

void Store::fenced(const FenceTarget& target, const std::function<void(FencedTransaction&)>& work) {
  fenced(std::vector<FenceTarget>{target}, work);
}

void Store::fenced(const LockSet& locks, const std::function<void(FencedTransaction&)>& work) {
  if (!locks.owns()) throw NotHeld("Store::fenced: the lock set holds no lock (released or moved from)");
  fenced(std::vector<FenceTarget>(locks.locks().begin(), locks.locks().end()), work);
}

void Store::fenced(const std::vector<FenceTarget>& targets, const std::function<void(FencedTransaction&)>& work) {
  if (targets.empty()) throw InvalidArgument("Store::fenced needs at least one lock to fence (got none)");
  std::vector<detail::FenceRef> refs;
  refs.reserve(targets.size());
  for (auto& target : targets) {
    detail::validate_lock_name(target.name);
    if (target.token <= 0)
      throw InvalidArgument(fmt::format("fence on lock '{}': token {} is not a fencing token (they start at 1)",
                                        detail::terminal_safe(target.name), target.token));
    refs.push_back({target.name, target.token, target.owner, detail::kind_text(target.kind)});
    if (target.kind == HolderKind::exclusive) refs.back().kind = {};
  }
  // Name order (bytes, as the lock table compares them): two transactions fencing overlapping sets
  // take their share locks in the same order.
  std::sort(refs.begin(), refs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < refs.size(); ++i)
    if (refs[i].name == refs[i - 1].name)
      throw InvalidArgument(
          fmt::format("Store::fenced: lock '{}' is named twice", detail::terminal_safe(refs[i].name)));
  if (!work) throw InvalidArgument("Store::fenced needs the work to run (got an empty function)");
  auto* fences = detail::StoreParts::backend(*this).fences().get_if();
  if (fences == nullptr)
    throw InvalidArgument(
        fmt::format("{}: this store has no fenced transactions (table-mode stores on PostgreSQL, "
                    "MySQL/MariaDB and SQLite have them)",
                    redacted_uri()));
  check_schema();
  auto sent = std::chrono::steady_clock::now();
  // Nothing commits before the work ran: a fence refused for a transient reason may be tried again.
  auto session = detail::retry_transient([&] { return fences->begin_fenced(refs); });
  auto left = session->lease_left_ms();
  auto deadline = left < 0 ? std::chrono::steady_clock::time_point::max() : sent + std::chrono::milliseconds(left);
  std::string names;
  for (auto& ref : refs) names += (names.empty() ? "" : "', '") + std::string(ref.name);
  FencedTransaction transaction(*session, std::move(names), deadline);
  work(transaction);  // a throw leaves `session` uncommitted: it rolls back as it goes
  transaction.check_deadline();
  session->commit();
}

}  // namespace dblock
