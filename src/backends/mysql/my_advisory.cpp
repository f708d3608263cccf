#include "backends/mysql/my_advisory.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "backends/mysql/my_database.hpp"

namespace dblock::detail {

namespace {

// A GET_LOCK wait must end before the client's read timeout (the statement timeout) gives up on
// the session.
constexpr std::chrono::milliseconds kReadTimeoutMargin{1000};
/// The largest wait_timeout MariaDB and MySQL accept (a year).
constexpr std::int64_t kLongestWaitTimeout = 31536000;

/// Pins a lease for GET_LOCK locks until destroyed; it then releases whatever is left on it
/// before the session goes back to the pool.
///
/// A cut connection: MariaDB's TCP keepalive settings are global only (hours by default), so the
/// server's end of a pinned session cut off from its owner would keep the owner's locks that long.
/// Instead the pinned session ends once silent for longer than its owner, while live, ever leaves
/// it (wait_timeout, per session, in whole seconds): the server then closes it and lets go of its
/// locks (doc/guarantees.md, "Cut"). One statement per pin, none per lock; the pool gets the
/// session back with the server's default, or not at all.
class MyNamedLockSession final : public AdvisorySession {
 public:
  MyNamedLockSession(SessionPool<MyConnection>::Lease lease, const MyNamedLockSql& sql, milliseconds silence)
      : lease_(std::move(lease)), sql_(sql) {
    try {
      lease_->execute(fmt::format("SET SESSION wait_timeout = {}", named_lock_wait_timeout(silence)));
    } catch (...) {
      lease_->abandon();  // its wait_timeout is unknown: never pooled
      throw;
    }
  }
  ~MyNamedLockSession() override {
    try {
      // Nothing of ours may stay locked on a session the pool hands to someone else, and a pooled
      // session idles as long as the server lets any other.
      if (grants_ != 0 || grant_in_doubt_) lease_->execute("DO RELEASE_ALL_LOCKS()");
      lease_->execute("SET SESSION wait_timeout = DEFAULT");
    } catch (...) {
      lease_->abandon();
    }
  }
  MyNamedLockSession(const MyNamedLockSession&) = delete;
  MyNamedLockSession& operator=(const MyNamedLockSession&) = delete;

  std::optional<std::int64_t> lock(const AdvisoryTarget& target, milliseconds wait) override {
    auto full = sql_.full_name(target.name);
    std::array<MyParam, 2> params{full, static_cast<double>(wait.count()) / 1e3};
    auto token = [&] {
      try {
        return first_int64(lease_->query(sql_.lock_for(full), params));
      } catch (...) {
        grant_in_doubt_ = true;  // as in PostgreSQL's session: it may have been granted before it failed
        throw;
      }
    }();
    if (token) ++grants_;
    return token;
  }

  bool unlock(const AdvisoryTarget& target) override {
    auto full = sql_.full_name(target.name);
    std::array<MyParam, 1> params{full};
    bool was_held = first_int64(lease_->query(sql_.unlock_for(full), params)) == 1;
    if (was_held) --grants_;
    return was_held;
  }

  void check_alive() override { lease_->query(sql_.ping, {}); }

  std::int64_t draw_token() override { return first_int64(lease_->query(sql_.draw, {})).value_or(0); }

 private:
  SessionPool<MyConnection>::Lease lease_;
  const MyNamedLockSql& sql_;
  std::int64_t grants_ = 0;      // server-side grants not yet released
  bool grant_in_doubt_ = false;  // a lock statement failed: it may have left a grant the count misses
};

/// The longest one GET_LOCK wait may last on sessions with this statement timeout: it must end
/// before the client's read timeout gives up on the session.
milliseconds longest_named_lock_wait(milliseconds statement_timeout) {
  return std::max(statement_timeout - kReadTimeoutMargin, statement_timeout / 2);
}

/// The InvalidArgument for what GET_LOCK cannot express.
void check_named_lock_target(const AdvisoryTarget& target) {
  if (target.shared)
    throw InvalidArgument(
        fmt::format("lock '{}': MySQL's GET_LOCK has no shared locks (LockOptions.shared needs "
                    "PostgreSQL)",
                    target.name.empty() ? target.key.to_string() : target.name));
  if (target.name.empty())
    throw InvalidArgument(
        fmt::format("{}: MySQL's GET_LOCK locks names, not integer keys: acquire by name "
                    "(AdvisoryKey needs PostgreSQL)",
                    target.key.to_string()));
}

class MyAdvisory final : public AdvisoryBackend {
 public:
  explicit MyAdvisory(MyDatabase& db) : db_(db) {}

  void check_advisory_target(const AdvisoryTarget& target) const override { check_named_lock_target(target); }
  milliseconds longest_server_wait() const override { return longest_named_lock_wait(db_.settings.statement_timeout); }
  std::unique_ptr<AdvisorySession> pin_advisory_session(milliseconds silence) override {
    return std::make_unique<MyNamedLockSession>(db_.pool.lease(), db_.named_lock_sql, silence);
  }
  void on_pool_dry(std::weak_ptr<const std::function<void()>> give_back) override {
    db_.pool.add_reclaimer(std::move(give_back));
  }

 private:
  MyDatabase& db_;
};

}  // namespace

std::int64_t named_lock_wait_timeout(milliseconds silence) {
  auto seconds = std::chrono::ceil<std::chrono::seconds>(silence).count();
  return std::clamp<std::int64_t>(seconds, 1, kLongestWaitTimeout);
}

std::unique_ptr<AdvisoryBackend> make_my_advisory(MyDatabase& database) {
  return std::make_unique<MyAdvisory>(database);
}

MyNamedLockSql::MyNamedLockSql(StatementIds& ids, std::string_view database, std::string_view prefix)
    : ping{ids, "ping", "SELECT 1"},
      // A NEXTVAL in a statement that writes: its commit makes a refill of the sequence's cache
      // durable, which a bare SELECT NEXTVAL's is not (migrations/mysql/0006).
      draw{ids, "draw token",
           fmt::format(
               "REPLACE INTO `{0}token_draws` (slot, token) VALUES (CONNECTION_ID() % 64, NEXTVAL(`{0}token_seq`)) "
               "RETURNING token",
               prefix)},
      lock_{ids, "GET_LOCK", "SELECT IF(GET_LOCK(?, ?) = 1, 0, NULL)"},
      lock_hashed_{ids, "GET_LOCK", "SELECT IF(GET_LOCK(SHA2(?, 256), ?) = 1, 0, NULL)"},
      unlock_{ids, "RELEASE_LOCK", "SELECT RELEASE_LOCK(?)"},
      unlock_hashed_{ids, "RELEASE_LOCK", "SELECT RELEASE_LOCK(SHA2(?, 256))"},
      namespace_(fmt::format("{}.{}:", database, prefix)) {}

bool MyNamedLockSql::hashed(std::string_view full_name) noexcept {
  auto continuation = [](char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; };
  auto characters = std::count_if(full_name.begin(), full_name.end(), [&](char byte) { return !continuation(byte); });
  return characters > 64 || full_name.size() > 192;
}

}  // namespace dblock::detail
