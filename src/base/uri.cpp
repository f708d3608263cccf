#include "base/uri.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include <dblock/errors.hpp>

#include <fmt/format.h>
#include "base/validate.hpp"

namespace dblock::detail {

namespace {

std::string percent_decode(std::string_view text, std::string_view uri_for_errors) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size()) throw InvalidArgument(fmt::format("DSN '{}' has a truncated %-escape", uri_for_errors));
    auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (ec != std::errc() || end != text.data() + i + 3)
      throw InvalidArgument(fmt::format("DSN '{}' has an invalid %-escape", uri_for_errors));
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

}  // namespace

namespace {

void add_secret(std::vector<std::string>& secrets, std::string_view written) {
  if (written.empty()) return;
  secrets.emplace_back(written);
  auto decoded = percent_decode_lenient(written);
  if (decoded != written && !decoded.empty()) secrets.push_back(std::move(decoded));
}

}  // namespace

std::vector<std::string> uri_secrets(std::string_view uri) {
  std::vector<std::string> secrets;
  auto scheme_end = uri.find("://");
  std::size_t query_from = 0;
  if (scheme_end != std::string_view::npos) {
    auto authority_start = scheme_end + 3;
    auto at = uri.rfind('@');
    if (at != std::string_view::npos && at >= authority_start) {
      auto colon = uri.find(':', authority_start);
      if (colon != std::string_view::npos && colon < at) add_secret(secrets, uri.substr(colon + 1, at - colon - 1));
    }
    query_from = authority_start;
  }
  // Parameters: anywhere after the scheme (a value may hold '@', a password '?'), separated by
  // '?', '&' or (libpq keyword strings) spaces. Over-redacting is the safe side.
  for (std::size_t pos = query_from; pos < uri.size();) {
    auto start = uri.find_first_not_of("?& ", pos);
    if (start == std::string_view::npos) break;
    auto end = uri.find_first_of("& ", start);
    if (end == std::string_view::npos) end = uri.size();
    auto pair = uri.substr(start, end - start);
    auto question = pair.substr(0, pair.find('=')).rfind('?');  // the path before the query, not a '?' in a value
    if (question != std::string_view::npos) pair = pair.substr(question + 1);
    auto eq = pair.find('=');
    if (eq != std::string_view::npos) {
      auto key = percent_decode_lenient(pair.substr(0, eq));
      if (key == "password" || key == "sslpassword") add_secret(secrets, pair.substr(eq + 1));
    }
    pos = end;
  }
  // Longest first: a secret that contains another is replaced whole.
  std::sort(secrets.begin(), secrets.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return secrets;
}

std::string redact_secrets(std::string_view text, std::string_view uri) {
  std::string out(text);
  for (auto& secret : uri_secrets(uri))
    for (std::size_t pos = 0; (pos = out.find(secret, pos)) != std::string::npos;) {
      out.replace(pos, secret.size(), "***");
      pos += 3;
    }
  return out;
}

std::string redact_uri(std::string_view uri) { return redact_secrets(uri, uri); }

StoreUri parse_store_uri(std::string_view uri) {
  StoreUri parsed;
  parsed.redacted = redact_uri(uri);
  auto fail = [&](std::string_view why) {
    throw InvalidArgument(fmt::format("DSN '{}' is invalid: {}", parsed.redacted, why));
  };
  if (uri.empty()) fail("it is empty");
  if (uri.find('\0') != std::string_view::npos) fail("it contains a NUL byte");
  auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0)
    fail("expected scheme://..., e.g. postgresql://user:pw@host:5432/db or sqlite:///path/to/file.db");
  std::string_view scheme = uri.substr(0, scheme_end);
  if (scheme == "postgresql" || scheme == "postgres")
    parsed.dialect = Dialect::postgresql;
  else if (scheme == "sqlite" || scheme == "sqlite3")
    parsed.dialect = Dialect::sqlite;
  else if (scheme == "mysql" || scheme == "mariadb")
    parsed.dialect = Dialect::mysql;
  else
    fail(fmt::format("unknown scheme '{}' (supported: postgresql://, mysql://, sqlite://)", scheme));

  auto query_start = uri.find('?');
  std::string_view base = uri.substr(0, query_start);
  std::vector<std::string> kept;
  if (query_start != std::string_view::npos) {
    std::string_view query = uri.substr(query_start + 1);
    while (!query.empty()) {
      auto amp = query.find('&');
      std::string_view pair = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (pair.empty()) continue;
      auto eq = pair.find('=');
      if (eq == std::string_view::npos) fail(fmt::format("query parameter '{}' has no '='", pair));
      std::string_view key = pair.substr(0, eq);
      std::string value = percent_decode(pair.substr(eq + 1), parsed.redacted);
      if (key == "schema") {
        parsed.schema = value;
      } else if (key == "prefix") {
        parsed.prefix = value;
        parsed.prefix_given = true;
      } else if (key == "pool") {
        std::size_t pool = 0;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), pool);
        if (ec != std::errc() || end != value.data() + value.size() || pool == 0 || pool > 1000)
          fail(fmt::format("pool='{}' must be a whole number from 1 to 1000", value));
        parsed.pool_size = pool;
      } else if (key == "pool_mode") {
        if (parsed.dialect != Dialect::postgresql)
          fail("pool_mode= is for postgresql:// (a PgBouncer-style pooler in between)");
        if (value != "session" && value != "transaction")
          fail(fmt::format("pool_mode='{}' must be session or transaction (the pooler's pool_mode)", value));
        parsed.transaction_pooler = value == "transaction";
        parsed.session_pooler = value == "session";
      } else if (key == "writers") {
        if (parsed.dialect != Dialect::sqlite)
          fail("writers= is for sqlite:// (writers=queued: many threads on one file)");
        if (value != "queued" && value != "direct")
          fail(fmt::format("writers='{}' must be queued or direct (SQLite's own busy handler, the default)", value));
        parsed.queued_writers = value == "queued";
      } else if (key == "engine") {
        if (parsed.dialect != Dialect::mysql) fail("engine= is for mysql:// (engine=galera: a MariaDB Galera cluster)");
        if (value != "galera") fail(fmt::format("engine='{}' must be galera (a MariaDB Galera cluster)", value));
        parsed.galera = true;
      } else {
        kept.emplace_back(pair);
      }
    }
  }
  if (parsed.dialect == Dialect::sqlite) {
    // sqlite:///abs/path.db -> /abs/path.db; sqlite://relative.db -> relative.db
    parsed.driver_uri = percent_decode(base.substr(scheme_end + 3), parsed.redacted);
    if (parsed.driver_uri.empty()) fail("the database file path is missing");
    if (!kept.empty())
      fail(fmt::format("unknown parameter '{}' (sqlite accepts prefix, pool and writers)", kept.front()));
    return parsed;
  }
  parsed.driver_uri = std::string(base);
  for (std::size_t i = 0; i < kept.size(); ++i) parsed.driver_uri += (i == 0 ? "?" : "&") + kept[i];
  return parsed;
}

StoreUri resolve_store_uri(std::string_view uri, const StoreOptions& options) {
  auto parsed = parse_store_uri(uri);
  if (!options.schema.empty()) parsed.schema = options.schema;
  if (!options.prefix.empty()) {
    parsed.prefix = options.prefix;
    parsed.prefix_given = true;
  }
  if (options.pool_size != 0) parsed.pool_size = options.pool_size;
  // MySQL's schema is the database the URI's path names (its backend reads it from there).
  if (parsed.dialect == Dialect::mysql && !parsed.schema.empty())
    throw InvalidArgument(
        fmt::format("DSN '{}': MySQL has no schemas apart from databases (got schema={}); name the "
                    "database in the URI path, mysql://user:pw@host:3306/DATABASE",
                    parsed.redacted, parsed.schema));
  if (parsed.dialect == Dialect::sqlite && !parsed.schema.empty() && parsed.schema != "main")
    throw InvalidArgument(
        fmt::format("DSN '{}': SQLite has no schemas (got schema={}); use prefix= to keep "
                    "installations apart",
                    parsed.redacted, parsed.schema));
  if (parsed.dialect != Dialect::mysql) {
    if (parsed.schema.empty()) parsed.schema = parsed.dialect == Dialect::sqlite ? "main" : "public";
    validate_identifier("schema", parsed.schema, 63, false);
  }
  if (!parsed.prefix_given) parsed.prefix = "dblock_";
  if (parsed.pool_size == 0) parsed.pool_size = 8;
  validate_identifier("table prefix", parsed.prefix, 40, true);
  return parsed;
}

std::string percent_decode_lenient(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned value = 0;
    if (text[i] == '%' && i + 2 < text.size()) {
      auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
      if (ec == std::errc() && end == text.data() + i + 3) {
        out += static_cast<char>(value);
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

}  // namespace dblock::detail
