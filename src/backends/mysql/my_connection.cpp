#include "backends/mysql/my_connection.hpp"

#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>
#include <mysql_driver.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "backends/backend_errors.hpp"
#include "base/uri.hpp"

namespace dblock::detail {

namespace {

// Client error codes (errmsg.h, not installed with Connector/C++) and the server errors we classify.
constexpr int kDeadlock = 1213;
constexpr int kLockWaitTimeout = 1205;
constexpr int kUserLockDeadlock = 3058;  // MySQL 8: a GET_LOCK wait that would close a cycle (MariaDB: 1213)
constexpr int kNoSuchTable = 1146;
constexpr int kNoSuchFunction = 1305;
constexpr int kNoSuchDatabase = 1049;
constexpr int kAccessDenied = 1045;
constexpr int kDatabaseAccessDenied = 1044;
constexpr int kTableAccessDenied = 1142;  // "INSERT command denied to user ... for table ..."
constexpr int kColumnAccessDenied = 1143;
constexpr int kRoutineAccessDenied = 1370;   // "execute command denied to user ... for routine ..."
constexpr int kSpecificAccessDenied = 1227;  // "you need (at least one of) the SUPER privilege(s)"
constexpr int kConnectionKilled = 1927;      // MariaDB: KILL CONNECTION of this session
constexpr int kServerShutdown = 1053;
constexpr int kServerGone = 2006;        // the session had already broken: the statement did not run
constexpr int kLostDuringQuery = 2013;   // broke (or timed out) while the statement ran: outcome unknown
constexpr int kFirstClientError = 2000;  // 2000-2999: the client library's own errors
constexpr int kWsrepNotReady = 1047;     // Galera: "WSREP has not yet prepared node for application use"

sql::mysql::MySQL_Driver& driver() {
  // Thread-safe static initialisation: the driver instance is created once, before any connect.
  static sql::mysql::MySQL_Driver* instance = sql::mysql::get_mysql_driver_instance();
  return *instance;
}

int whole_seconds(std::chrono::milliseconds duration) {
  return static_cast<int>(std::max<long long>(1, (duration.count() + 999) / 1000));
}

}  // namespace

std::optional<std::int64_t> MyRow::int64(std::size_t column) const {
  auto& cell = text(column);
  if (!cell) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(cell->data(), cell->data() + cell->size(), value);
  if (ec != std::errc() || end != cell->data() + cell->size())
    throw DatabaseError(fmt::format("expected an integer from the server, got '{}'", *cell));
  return value;
}

MyEndpoint parse_mysql_uri(std::string_view driver_uri, std::string_view redacted) {
  auto fail = [&](std::string_view why) {
    throw InvalidArgument(
        fmt::format("DSN '{}' is invalid: {} (expected mysql://user:password@host:port/database"
                    "[?socket=/path/to/mysqld.sock])",
                    redacted, why));
  };
  auto rest = driver_uri.substr(driver_uri.find("://") + 3);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 == rest.size()) fail("the database name is missing");
  MyEndpoint endpoint;
  endpoint.database = percent_decode_lenient(rest.substr(slash + 1));
  if (endpoint.database.find('/') != std::string::npos) fail("the database name contains '/'");
  auto authority = rest.substr(0, slash);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    auto credentials = authority.substr(0, at);
    authority = authority.substr(at + 1);
    auto colon = credentials.find(':');
    endpoint.user = percent_decode_lenient(credentials.substr(0, colon));
    if (colon != std::string_view::npos) endpoint.password = percent_decode_lenient(credentials.substr(colon + 1));
  }
  std::string socket;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = pair.find('=');
    if (pair.substr(0, eq) == "socket" && eq != std::string_view::npos)
      socket = percent_decode_lenient(pair.substr(eq + 1));
    else
      fail(fmt::format("unknown parameter '{}' (mysql accepts socket, prefix and pool)", pair.substr(0, eq)));
  }
  if (!socket.empty()) {
    endpoint.host_name = "unix://" + socket;
    return endpoint;
  }
  if (authority.empty()) fail("the host is missing");
  std::string_view host = authority, port = "3306";
  if (host.front() == '[') {  // [::1]:3306
    auto close = host.find(']');
    if (close == std::string_view::npos) fail("an IPv6 host lacks its ']'");
    if (close + 1 < host.size() && host[close + 1] == ':') port = host.substr(close + 2);
    host = host.substr(0, close + 1);
  } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  unsigned port_number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (ec != std::errc() || end != port.data() + port.size() || port_number == 0 || port_number > 65535)
    fail(fmt::format("port '{}' is not a number from 1 to 65535", port));
  endpoint.host_name = fmt::format("tcp://{}:{}", host, port_number);
  return endpoint;
}

MyConnection::MyConnection(const MyEndpoint& endpoint, std::string redacted_uri,
                           std::chrono::milliseconds connect_timeout, std::chrono::milliseconds statement_timeout)
    : redacted_uri_(std::move(redacted_uri)), statement_timeout_(statement_timeout) {
  sql::ConnectOptionsMap options;
  options["hostName"] = endpoint.host_name;
  options["userName"] = endpoint.user;
  options["password"] = endpoint.password;
  options["schema"] = endpoint.database;
  options["OPT_CONNECT_TIMEOUT"] = whole_seconds(connect_timeout);
  // The reply deadline: a stalled server or network fails the statement (2013) instead of hanging.
  options["OPT_READ_TIMEOUT"] = whole_seconds(statement_timeout);
  options["OPT_WRITE_TIMEOUT"] = whole_seconds(statement_timeout);
  // Never reconnect behind our back: a new session silently drops every GET_LOCK lock.
  options["OPT_RECONNECT"] = false;
  options["OPT_CHARSET_NAME"] = "utf8mb4";
  try {
    conn_.reset(driver().connect(options));
    // Lock statements run autocommit at READ COMMITTED, in UTC, whatever the server's defaults are.
    std::unique_ptr<sql::Statement> setup(conn_->createStatement());
    // (MariaDB 10.11 names the variable tx_isolation, MySQL 8 transaction_isolation: use the statement.)
    setup->execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    setup->execute("SET autocommit = 1, time_zone = '+00:00'");
  } catch (const sql::SQLException& e) {
    int code = e.getErrorCode();
    bool login = code == kAccessDenied || code == kDatabaseAccessDenied;
    std::string hint = login                     ? " (check the user name and password)"
                       : code == kNoSuchDatabase ? " (create the database first)"
                                                 : "";
    std::string message = e.what();
    for (std::size_t pos = 0;
         !endpoint.password.empty() && (pos = message.find(endpoint.password, pos)) != std::string::npos;)
      message.replace(pos, endpoint.password.size(), "***");  // never echo the password
    // Galera may abort a new session's set-up statements as a deadlock (seen under load while other
    // sessions ran DDL): nothing was asked of the locks, so the caller's transient-error policy may
    // simply try again, on a new session.
    if (code == kDeadlock || code == kLockWaitTimeout)
      throw TransientError(
          fmt::format("cannot open a session to {}: {} (MySQL error {})", redacted_uri_, message, code),
          code == kDeadlock ? "40001" : "HY000");
    throw ConnectionError(fmt::format("cannot connect to {}: {}{}", redacted_uri_, message, hint),
                          login ? "28000" : "08001");
  }
}

MyConnection::~MyConnection() = default;

template <class Fn>
auto MyConnection::guarded(std::string_view what, Fn&& fn) {
  if (broken_) throw ConnectionError(fmt::format("{}: the session to {} is broken", what, redacted_uri_), "08003");
  try {
    return fn();
  } catch (const sql::SQLException& e) {
    if (application_statement_) fail_application(e, what);
    fail(e, what);
  }
}

void MyConnection::fail_application(const sql::SQLException& error, std::string_view what) {
  int code = error.getErrorCode();
  // The errors fail() answers with advice about dblock's own objects or the server it needs.
  constexpr int kReadOnlyServer = 1290, kReadOnlyTransaction = 1792;
  constexpr int kAdvised[] = {kTableAccessDenied,    kColumnAccessDenied,   kRoutineAccessDenied,
                              kSpecificAccessDenied, kDatabaseAccessDenied, kNoSuchTable,
                              kNoSuchFunction,       kReadOnlyServer,       kReadOnlyTransaction};
  if (std::find(std::begin(kAdvised), std::end(kAdvised), code) == std::end(kAdvised)) fail(error, what);
  std::string state = error.getSQLStateCStr();
  throw DatabaseError(fmt::format("{}: {} (MySQL error {})", what, error.what(), code),
                      state.size() == 5 ? state : std::string_view{});
}

void MyConnection::fail(const sql::SQLException& error, std::string_view what) {
  int code = error.getErrorCode();
  std::string state = error.getSQLStateCStr();
  auto message = fmt::format("{}: {} (MySQL error {})", what, error.what(), code);
  if (code == kLockWaitTimeout) throw LockWaitTimedOut(message, "HY000");
  if (code == kDeadlock || code == kUserLockDeadlock) throw TransientError(message, "40001");
  if (code == kLostDuringQuery) {
    broken_ = true;
    throw OutcomeUnknown(fmt::format("{} on {}", message, redacted_uri_), "08006");
  }
  if (code == kWsrepNotReady) {
    // Out of the primary component (a partition, lost quorum) or still joining: the node refuses
    // every statement, so it grants nothing. Another session, perhaps to another node, may work.
    broken_ = true;
    throw ConnectionError(fmt::format("{}: {} is a Galera node outside the cluster's primary component (it lost quorum "
                                      "or is still joining) and serves nothing: {} (MySQL error {})",
                                      what, redacted_uri_, error.what(), code),
                          "08006");
  }
  if (code >= kFirstClientError || code == kConnectionKilled || code == kServerShutdown || code == kServerGone) {
    broken_ = true;
    throw ConnectionError(fmt::format("{} on {}", message, redacted_uri_), "08006");
  }
  if (code == 1290 || code == 1792)  // ER_OPTION_PREVENTS_STATEMENT, ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    throw DatabaseError(fmt::format("{} is read-only (read_only or super_read_only is on, or a read-only "
                                    "transaction): dblock needs the writable server (the primary): {}",
                                    redacted_uri_, message),
                        "25006");
  if (code == kTableAccessDenied || code == kColumnAccessDenied || code == kRoutineAccessDenied ||
      code == kSpecificAccessDenied || code == kDatabaseAccessDenied)
    throw PermissionDenied(
        fmt::format("the user dblock connects to {} as lacks a right: {} (`dblock migrate grants "
                    "--role NAME` prints the grants a runtime user needs)",
                    redacted_uri_, message));
  if (code == kNoSuchTable || code == kNoSuchFunction)
    throw SchemaError(
        SchemaError::Reason::missing,
        fmt::format("dblock's tables are missing in {} ({}): run `dblock migrate up`", redacted_uri_, error.what()));
  throw DatabaseError(message, state.size() == 5 ? state : std::string_view{});
}

sql::PreparedStatement& MyConnection::prepared(const MyStatement& statement, std::span<const MyParam> params) {
  if (prepared_.size() <= statement.id) {
    prepared_.resize(statement.id + 1);
    prepared_sql_.resize(statement.id + 1);
  }
  auto& slot = prepared_[statement.id];
  if (!slot) {
    slot.reset(conn_->prepareStatement(statement.sql));
    prepared_sql_[statement.id] = statement.sql;
  } else if (prepared_sql_[statement.id] != statement.sql) {
    // Cannot happen while every id comes from the backend's StatementIds: the assertion that two
    // registries never number statements on one session (it would run the wrong one).
    throw std::logic_error(fmt::format("prepared-statement id {} ({}) is taken by other SQL on this session",
                                       statement.id, statement.name));
  }
  for (unsigned i = 0; i < params.size(); ++i) {
    std::visit(
        [&](auto value) {
          using T = decltype(value);
          if constexpr (std::is_same_v<T, std::string_view>)
            slot->setString(i + 1, std::string(value));
          else if constexpr (std::is_same_v<T, std::int64_t>)
            slot->setInt64(i + 1, value);
          else
            slot->setDouble(i + 1, value);
        },
        params[i]);
  }
  return *slot;
}

MyRows MyConnection::query(const MyStatement& statement, std::span<const MyParam> params) {
  return guarded(statement.name, [&] {
    std::unique_ptr<sql::ResultSet> result(prepared(statement, params).executeQuery());
    auto columns = result->getMetaData()->getColumnCount();
    MyRows rows;
    while (result->next()) {
      std::vector<std::optional<std::string>> cells;
      cells.reserve(columns);
      for (unsigned column = 1; column <= columns; ++column)
        cells.push_back(result->isNull(column) ? std::nullopt
                                               : std::optional<std::string>(result->getString(column).asStdString()));
      rows.emplace_back(std::move(cells));
    }
    return rows;
  });
}

MyRows MyConnection::call(const MyStatement& statement, std::span<const MyParam> params) {
  return guarded(statement.name, [&] {
    auto& prepared_call = prepared(statement, params);
    MyRows rows;
    {
      std::unique_ptr<sql::ResultSet> result(prepared_call.executeQuery());
      auto columns = result->getMetaData()->getColumnCount();
      while (result->next()) {
        std::vector<std::optional<std::string>> cells;
        cells.reserve(columns);
        for (unsigned column = 1; column <= columns; ++column)
          cells.push_back(result->isNull(column) ? std::nullopt
                                                 : std::optional<std::string>(result->getString(column).asStdString()));
        rows.emplace_back(std::move(cells));
      }
    }
    while (prepared_call.getMoreResults()) {
    }
    return rows;
  });
}

std::uint64_t MyConnection::update(const MyStatement& statement, std::span<const MyParam> params) {
  return guarded(statement.name,
                 [&] { return static_cast<std::uint64_t>(prepared(statement, params).executeUpdate()); });
}

void MyConnection::execute(const std::string& sql) {
  guarded(sql.substr(0, 60), [&] {
    std::unique_ptr<sql::Statement> statement(conn_->createStatement());
    statement->execute(sql);
  });
}

}  // namespace dblock::detail
