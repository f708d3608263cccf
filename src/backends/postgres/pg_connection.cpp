#include "backends/postgres/pg_connection.hpp"

#include <poll.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backends/backend.hpp"
#include "core/uri.hpp"

namespace dblock::detail {

namespace {

void route_notice(void* logger, const char* message) {
  std::string_view text(message);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  static_cast<spdlog::logger*>(logger)->debug("server notice: {}", text);
}

std::string trimmed(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

}  // namespace

PgConnection::PgConnection(const std::string& uri, const std::string& redacted_uri,
                           std::chrono::milliseconds connect_timeout, std::chrono::milliseconds statement_timeout,
                           std::shared_ptr<spdlog::logger> logger)
    : logger_(std::move(logger)), redacted_uri_(redacted_uri), statement_timeout_(statement_timeout) {
  auto timeout_s = std::to_string(std::max<long long>(2, (connect_timeout.count() + 999) / 1000));
  // Ours first: later keywords (the URI) override earlier ones, so the user's settings win.
  std::array<const char*, 4> keys{"connect_timeout", "application_name", "dbname", nullptr};
  std::array<const char*, 4> values{timeout_s.c_str(), "dblock", uri.c_str(), nullptr};
  conn_.reset(PQconnectdbParams(keys.data(), values.data(), 1));
  if (!conn_) throw ConnectionError(fmt::format("cannot connect to {}: out of memory", redacted_uri_));
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    // libpq echoes parts of the connection string (e.g. a malformed %-escape in the password).
    auto message = redact_secrets(trimmed(PQerrorMessage(conn_.get())), uri);
    bool login = message.find("authentication failed") != std::string::npos ||
                 message.find("password") != std::string::npos;
    throw ConnectionError(fmt::format("cannot connect to {}: {}{}", redacted_uri_, message,
                                      login ? " (check the user name and password)" : ""),
                          login ? "28P01" : "08001");
  }
  PQsetNoticeProcessor(conn_.get(), route_notice, logger_.get());
  // Lock statements run autocommit at READ COMMITTED whatever the server's default is.
  exec("SET default_transaction_isolation = 'read committed'");
}

bool PgConnection::usable() const noexcept {
  return !abandoned_ && PQstatus(conn_.get()) == CONNECTION_OK && PQtransactionStatus(conn_.get()) == PQTRANS_IDLE;
}

PgResult PgConnection::await(bool sent, std::string_view what, std::chrono::milliseconds longer) {
  if (!sent) fail(nullptr, what);
  // Wait for the reply with a deadline: a stalled server or network must not hang the caller.
  auto allowed = statement_timeout_ + longer;
  auto deadline = std::chrono::steady_clock::now() + allowed;
  if (reply_by_ < deadline) {
    deadline = reply_by_;
    allowed = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  }
  PgResult last;
  PgResult first_error;
  while (true) {
    while (PQisBusy(conn_.get()) != 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        abandoned_ = true;  // the reply may still come: this session is never reused
        throw OutcomeUnknown(fmt::format("{}: no reply from {} within {}ms", what, redacted_uri_, allowed.count()),
                             "57014");
      }
      pollfd fd{PQsocket(conn_.get()), POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) fail(nullptr, what);
      if (PQconsumeInput(conn_.get()) == 0) fail(nullptr, what);
    }
    PGresult* result = PQgetResult(conn_.get());
    if (result == nullptr) break;
    auto status = PQresultStatus(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && !first_error) first_error.reset(result);
    else last.reset(result);
  }
  if (first_error) fail(first_error.get(), what);
  if (!last) fail(nullptr, what);
  return last;
}

void PgConnection::fail(const PGresult* result, std::string_view what) const {
  if (result == nullptr || PQstatus(conn_.get()) == CONNECTION_BAD) {
    throw OutcomeUnknown(fmt::format("{}: connection to {} broke: {}", what, redacted_uri_,
                                     trimmed(PQerrorMessage(conn_.get()))),
                         "08006");
  }
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string sqlstate = state != nullptr ? state : "";
  auto message = fmt::format("{}: {}", what, trimmed(PQresultErrorMessage(result)));
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03" || sqlstate == "26000")
    throw TransientError(message, sqlstate);
  if (sqlstate == "42P01" || sqlstate == "3F000" || sqlstate == "42883")
    throw SchemaError(SchemaError::Reason::missing,
                      fmt::format("dblock's tables are missing in {} ({}): run `dblock migrate up`", redacted_uri_,
                                  message.substr(0, message.find('\n'))));
  if (starts_with(sqlstate, "08") || starts_with(sqlstate, "57P")) throw ConnectionError(message, sqlstate);
  throw DatabaseError(message, sqlstate);
}

PgResult PgConnection::exec(std::string_view sql) {
  return await(PQsendQuery(conn_.get(), std::string(sql).c_str()) != 0, "statement failed");
}

namespace {
std::vector<const char*> values_of(std::span<const std::string> params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& param : params) values.push_back(param.c_str());
  return values;
}
}  // namespace

PgResult PgConnection::exec_params(const std::string& sql, std::span<const std::string> params) {
  auto values = values_of(params);
  return await(PQsendQueryParams(conn_.get(), sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                                 nullptr, nullptr, 0) != 0,
               "statement failed");
}

PgResult PgConnection::exec_prepared(const PgStatement& statement, std::span<const std::string> params,
                                     std::chrono::milliseconds longer) {
  std::array<const char*, 8> on_stack{};  // every statement of ours has fewer parameters
  std::vector<const char*> on_heap;
  std::span<const char*> values = std::span(on_stack).first(std::min(params.size(), on_stack.size()));
  if (params.size() > on_stack.size()) values = on_heap = std::vector<const char*>(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) values[i] = params[i].c_str();
  return exec_prepared(statement, std::span<const char* const>(values), longer);
}

PgResult PgConnection::exec_prepared(const PgStatement& statement, std::span<const char* const> values,
                                     std::chrono::milliseconds longer) {
  // The name from the id without a formatting library: this runs twice per lock cycle.
  std::array<char, 32> name{'d', 'b', 'l', 'o', 'c', 'k', '_'};
  *std::to_chars(name.data() + 7, name.data() + name.size() - 1, statement.id).ptr = '\0';
  if (statement.id >= prepared_.size()) prepared_.resize(statement.id + 1, false);
  if (!prepared_[statement.id]) {
    await(PQsendPrepare(conn_.get(), name.data(), statement.sql.c_str(), 0, nullptr) != 0, "prepare failed");
    prepared_[statement.id] = true;
  }
  try {
    return await(PQsendQueryPrepared(conn_.get(), name.data(), static_cast<int>(values.size()), values.data(),
                                     nullptr, nullptr, 0) != 0,
                 "statement failed", longer);
  } catch (const TransientError& e) {
    if (std::string_view(e.sqlstate()) == "26000") prepared_.assign(prepared_.size(), false);  // re-prepare
    throw;
  }
}

std::string pg_text_array(std::span<const std::string_view> items) {
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace dblock::detail
