#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>

#include "base/dialect.hpp"

namespace dblock::detail {

/// A store URI split into what dblock uses itself and what goes to the driver.
struct StoreUri {
  Dialect dialect = Dialect::sqlite;  // from the scheme (postgres:// and mariadb:// included)
  std::string driver_uri;             // the URI without dblock's own query parameters
  std::string redacted;               // the URI with passwords replaced by ***: safe to print
  std::string schema;                 // empty when not given; always empty for MySQL (the database is the schema)
  std::string prefix;                 // empty when not given
  bool prefix_given = false;
  std::size_t pool_size = 0;  // 0 when not given
  /// `pool_mode=transaction` (PostgreSQL): a pooler in transaction mode sits in between, so no
  /// statement may rely on session state (see PgConnection).
  bool transaction_pooler = false;
  /// `pool_mode=session` (PostgreSQL): a pooler that keeps one server process per client session
  /// sits in between; its login reports a pid of its own, which advisory mode then does not expect.
  bool session_pooler = false;
  /// `engine=galera` (MySQL): the database is a MariaDB Galera cluster. Needed only where there is
  /// no connection (`migrate sql`, `migrate grants`); at connect the engine is detected, and a URI
  /// that says otherwise is refused.
  bool galera = false;
  /// `writers=queued` (SQLite): this store's writes queue in the process before SQLite's busy
  /// handler, and concurrent acquisitions and releases are combined (sqlite_writers.hpp).
  bool queued_writers = false;
};

/// @throws InvalidArgument naming the (redacted) URI and the problem.
[[nodiscard]] StoreUri parse_store_uri(std::string_view uri);
/// parse_store_uri plus the options' overrides and the defaults (schema public/main, prefix
/// dblock_, pool 8), validated. @throws InvalidArgument.
[[nodiscard]] StoreUri resolve_store_uri(std::string_view uri, const StoreOptions& options);

/// The one redaction rule. The secrets of a URI are the password of its user-info (everything
/// between the first ':' after "://" and the *last* '@', so a password may hold '/', '?', '@', '#'
/// or a malformed %-escape) and the values of `password` and `sslpassword` query parameters (keys
/// compared after %-decoding), each both as written and %-decoded.
[[nodiscard]] std::vector<std::string> uri_secrets(std::string_view uri);
/// `text` with every secret of `uri` replaced by ***: for any message that may echo the URI or
/// a part of it (a driver's connection error does).
[[nodiscard]] std::string redact_secrets(std::string_view text, std::string_view uri);
/// %-decoding that never fails: a malformed escape stays as written (user names, passwords and
/// database names as drivers take them).
[[nodiscard]] std::string percent_decode_lenient(std::string_view text);
/// The URI itself, redacted: safe to print.
[[nodiscard]] std::string redact_uri(std::string_view uri);

}  // namespace dblock::detail
