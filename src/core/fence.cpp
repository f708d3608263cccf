// Fenced transactions on the store's own sessions (include/dblock/fence.hpp): the fence begins the
// transaction, the caller's work runs in it, and it commits only if the work returns.
#include <dblock/fence.hpp>

#include <dblock/errors.hpp>
#include <fmt/format.h>

#include "base/terminal_text.hpp"
#include "base/validate.hpp"
#include "core/retry.hpp"
#include "core/store_parts.hpp"

namespace dblock {

FenceTarget::FenceTarget(const Lock& lock) : name(lock.name()), token(lock.token()) {}

FencedTransaction::FencedTransaction(detail::FencedSession& session, std::string name,
                                     std::chrono::steady_clock::time_point deadline)
    : session_(session), name_(std::move(name)), deadline_(deadline) {}

// The server ends a transaction idle past the lease left and cancels any one statement running
// that long, but a stream of short statements would go on: the client stops it at the lease's end.
void FencedTransaction::check_deadline() const {
  if (std::chrono::steady_clock::now() >= deadline_)
    throw LockLost(fmt::format("the fenced transaction on lock '{}' outlived the lease it had at the fence; rolled "
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
  detail::validate_lock_name(target.name);
  if (target.token <= 0)
    throw InvalidArgument(fmt::format("fence on lock '{}': token {} is not a fencing token (they start at 1)",
                                      detail::terminal_safe(target.name), target.token));
  if (!work) throw InvalidArgument("Store::fenced needs the work to run (got an empty function)");
  auto& backend = detail::StoreParts::backend(*this);
  auto* fences = backend.fences();
  if (fences == nullptr)
    throw InvalidArgument(fmt::format("{}: this store has no fenced transactions (table-mode stores on PostgreSQL, "
                                      "MySQL/MariaDB and SQLite have them)",
                                      redacted_uri()));
  check_schema();
  auto sent = std::chrono::steady_clock::now();
  // Nothing commits before the work ran: a fence refused for a transient reason may be tried again.
  auto session = detail::retry_transient([&] { return fences->begin_fenced(target.name, target.token); });
  auto left = session->lease_left_ms();
  auto deadline = left < 0 ? std::chrono::steady_clock::time_point::max() : sent + std::chrono::milliseconds(left);
  FencedTransaction transaction(*session, target.name, deadline);
  work(transaction);  // a throw leaves `session` uncommitted: it rolls back as it goes
  transaction.check_deadline();
  session->commit();
}

}  // namespace dblock
