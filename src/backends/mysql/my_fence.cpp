#include "backends/mysql/my_fence.hpp"

#include <array>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// The fence function's documented error: SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 32001.
constexpr std::string_view kFenceRefused = "(MySQL error 32001)";
// Callers' statements are prepared once per session like dblock's own, each under the id of its
// text; so many distinct texts per store at most, or every session's cache would keep growing.
constexpr std::size_t kCallerStatements = 60;

class MyFences;

class MyFencedSession final : public FencedSession {
 public:
  MyFencedSession(MyFences& fences, SessionPool<MyConnection>::Lease session, std::int64_t left_ms)
      : fences_(fences), session_(std::move(session)), left_ms_(left_ms) {}
  ~MyFencedSession() override {
    if (!done_) rollback();
  }
  MyFencedSession(const MyFencedSession&) = delete;
  MyFencedSession& operator=(const MyFencedSession&) = delete;

  std::int64_t lease_left_ms() const noexcept override { return left_ms_; }
  FenceRows query(std::string_view sql, std::span<const std::string> params) override;
  std::int64_t execute(std::string_view sql, std::span<const std::string> params) override;

  void commit() override {
    if (stop_.stopped()) {
      rollback();
      throw FailedStatementStop::failed();
    }
    done_ = true;
    session_->execute("COMMIT");
  }

  void rollback() noexcept override {
    done_ = true;
    if (!session_->usable()) return;  // a broken session is dropped, and the server rolls back
    try {
      session_->execute("ROLLBACK");
    } catch (...) {
      session_->abandon();
    }
  }

 private:
  MyFences& fences_;
  SessionPool<MyConnection>::Lease session_;
  std::int64_t left_ms_;
  bool done_ = false;
  FailedStatementStop stop_;
};

class MyFences final : public FenceBackend {
 public:
  MyFences(SessionPool<MyConnection>& pool, StatementIds& ids, std::string_view prefix, std::string_view redacted)
      : pool_(pool),
        ids_(ids),
        fence_{ids, "fence", fill("SELECT `{prefix}fence`(?, ?)", {{"{prefix}", prefix}})},
        begin_{ids, "fence_begin", fill("CALL `{prefix}fence_begin`(?, ?)", {{"{prefix}", prefix}})},
        member_{ids, "fence_member", fill("SELECT `{prefix}fence_member`(?, ?, ?, ?)", {{"{prefix}", prefix}})},
        redacted_(redacted) {}

  std::unique_ptr<FencedSession> begin_fenced(std::span<const FenceRef> targets) override {
    auto session = pool_.lease();
    std::size_t at = 0;
    try {
      // fence_begin (0010) starts the transaction and fences the first target in one round trip.
      std::int64_t least_us = std::numeric_limits<std::int64_t>::max();
      std::size_t least_at = 0;
      if (targets.front().member()) session->execute("START TRANSACTION");
      for (; at < targets.size(); ++at) {
        auto left_us = fence(*session, targets[at], at == 0);
        if (left_us < least_us) least_us = left_us, least_at = at;
      }
      // Each fence sets the session's idle_transaction_timeout to its own lease left: the
      // smallest must come last, so fence that target once more (it holds its share lock already).
      if (least_at + 1 != targets.size()) (void)fence(*session, targets[at = least_at], false);
      return std::make_unique<MyFencedSession>(*this, std::move(session), (least_us + 999) / 1000);
    } catch (const Error& e) {
      if (session->usable()) {
        try {
          session->execute("ROLLBACK");
        } catch (...) {
          session->abandon();
        }
      }
      if (std::string_view(e.what()).find(kFenceRefused) != std::string_view::npos)
        throw LockLost(fence_refused_message(targets[at], redacted_));
      throw;
    }
  }

  /// The statement for `sql`, under the id of its text.
  MyStatement statement(std::string_view sql) {
    std::lock_guard lock(mutex_);
    auto known = callers_.find(sql);
    if (known == callers_.end()) {
      if (callers_.size() >= kCallerStatements)
        throw InvalidArgument(
            fmt::format("fenced transactions of one MySQL store ran {} distinct statement texts already: "
                        "pass values as parameters rather than in the text",
                        kCallerStatements));
      known =
          callers_.emplace(std::string(sql), MyStatement(ids_, "statement in a fenced transaction", std::string(sql)))
              .first;
    }
    return known->second;
  }

 private:
  /// One fence, its lease left (µs); `first` of a plain lock also starts the transaction.
  std::int64_t fence(MyConnection& session, const FenceRef& target, bool first) {
    if (target.member()) {
      std::array<MyParam, 4> params{target.name, target.owner, target.kind, target.token};
      return first_int64(session.query(member_, params)).value_or(0);
    }
    std::array<MyParam, 2> params{target.name, target.token};
    return first_int64(first ? session.call(begin_, params) : session.query(fence_, params)).value_or(0);
  }

  SessionPool<MyConnection>& pool_;
  StatementIds& ids_;
  MyStatement fence_, begin_, member_;
  std::string redacted_;
  std::mutex mutex_;
  std::map<std::string, MyStatement, std::less<>> callers_;  // the texts run in fenced transactions
};

std::vector<MyParam> params_of(std::span<const std::string> params) { return {params.begin(), params.end()}; }

FenceRows MyFencedSession::query(std::string_view sql, std::span<const std::string> params) {
  auto statement = fences_.statement(sql);
  auto values = params_of(params);
  auto application = session_->application_statements();
  MyRows rows = stop_.run([&] { return session_->query(statement, values); });
  FenceRows out;
  for (auto& row : rows) {
    auto& cells = out.emplace_back();
    for (std::size_t column = 0; column < row.size(); ++column) cells.push_back(row.text(column));
  }
  return out;
}

std::int64_t MyFencedSession::execute(std::string_view sql, std::span<const std::string> params) {
  auto statement = fences_.statement(sql);
  auto values = params_of(params);
  auto application = session_->application_statements();
  return static_cast<std::int64_t>(stop_.run([&] { return session_->update(statement, values); }));
}

}  // namespace

std::unique_ptr<FenceBackend> make_my_fences(SessionPool<MyConnection>& pool, StatementIds& ids,
                                             std::string_view prefix, std::string_view redacted_uri) {
  return std::make_unique<MyFences>(pool, ids, prefix, redacted_uri);
}

}  // namespace dblock::detail
