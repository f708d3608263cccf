#include "backends/mysql/my_fence.hpp"

#include <array>
#include <map>
#include <mutex>

#include <dblock/errors.hpp>
#include <fmt/format.h>

#include "base/sql_template.hpp"

namespace dblock::detail {

namespace {

// The fence function's documented error: SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 32001.
constexpr std::string_view kFenceRefused = "(MySQL error 32001)";
// Callers' statements are prepared once per session like dblock's own, each under an id of its
// own text (the range ends below 192).
constexpr std::size_t kCallerStatements = 63;

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
};

class MyFences final : public FenceBackend {
 public:
  MyFences(SessionPool<MyConnection>& pool, std::string_view prefix, std::string_view redacted)
      : pool_(pool),
        fence_{kFenceStatementIds, "fence", fill("SELECT `{prefix}fence`(?, ?)", {{"{prefix}", prefix}})},
        redacted_(redacted) {}

  std::unique_ptr<FencedSession> begin_fenced(std::string_view name, std::int64_t token) override {
    auto session = pool_.lease();
    session->execute("START TRANSACTION");
    std::array<MyParam, 2> params{name, token};
    try {
      auto left_us = first_int64(session->query(fence_, params)).value_or(0);
      return std::make_unique<MyFencedSession>(*this, std::move(session), (left_us + 999) / 1000);
    } catch (const Error& e) {
      if (session->usable()) {
        try {
          session->execute("ROLLBACK");
        } catch (...) {
          session->abandon();
        }
      }
      if (std::string_view(e.what()).find(kFenceRefused) != std::string_view::npos)
        throw LockLost(fence_refused_message(name, token, redacted_));
      throw;
    }
  }

  /// The statement for `sql`, under an id of its own text.
  MyStatement statement(std::string_view sql) {
    std::lock_guard lock(mutex_);
    auto known = ids_.find(sql);
    if (known != ids_.end()) return {known->second, "statement in a fenced transaction", std::string(sql)};
    if (ids_.size() >= kCallerStatements)
      throw InvalidArgument(fmt::format("fenced transactions of one MySQL store ran {} distinct statement texts already: "
                                        "pass values as parameters rather than in the text",
                                        kCallerStatements));
    auto id = kFenceStatementIds + 1 + ids_.size();
    ids_.emplace(std::string(sql), id);
    return {id, "statement in a fenced transaction", std::string(sql)};
  }

 private:
  SessionPool<MyConnection>& pool_;
  MyStatement fence_;
  std::string redacted_;
  std::mutex mutex_;
  std::map<std::string, std::size_t, std::less<>> ids_;
};

std::vector<MyParam> params_of(std::span<const std::string> params) {
  return {params.begin(), params.end()};
}

FenceRows MyFencedSession::query(std::string_view sql, std::span<const std::string> params) {
  auto statement = fences_.statement(sql);
  auto values = params_of(params);
  MyRows rows = session_->query(statement, values);
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
  return static_cast<std::int64_t>(session_->update(statement, values));
}

}  // namespace

std::unique_ptr<FenceBackend> make_my_fences(SessionPool<MyConnection>& pool, std::string_view prefix,
                                             std::string_view redacted_uri) {
  return std::make_unique<MyFences>(pool, prefix, redacted_uri);
}

}  // namespace dblock::detail
