#include "backends/runtime_grants.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

#include "base/terminal_text.hpp"

namespace dblock::detail {

namespace {

/// What the runtime does with each of dblock's objects, by kind and name; the rights follow.
struct RuntimeUse {
  std::vector<std::string> written_tables;  // locks: SELECT, INSERT, UPDATE, DELETE
  std::vector<std::string> read_tables;     // the history: SELECT (the schema check, `migrate up|status`)
  std::vector<std::string> sequences;       // tokens drawn outside the functions
  std::vector<std::string> functions;
  std::vector<std::string> procedures;  // MySQL/MariaDB: fence_begin (0010)
};

RuntimeUse runtime_use(std::span<const CatalogObject> objects, std::string_view prefix) {
  RuntimeUse use;
  auto history = std::string(prefix) + "schema_history";
  auto add = [](std::vector<std::string>& to, const std::string& name) {
    if (std::find(to.begin(), to.end(), name) == to.end()) to.push_back(name);
  };
  for (auto& object : objects) {
    if (object.kind == "table") add(object.name == history ? use.read_tables : use.written_tables, object.name);
    if (object.kind == "sequence") add(use.sequences, object.name);
    if (object.kind == "function") add(use.functions, object.name);
    if (object.kind == "procedure") add(use.procedures, object.name);
  }
  return use;
}

void require_printable(std::string_view role, std::string_view what, std::size_t max_length) {
  if (role.empty()) throw InvalidArgument(fmt::format("--role needs the name of the {} to grant to", what));
  if (terminal_safe(role) != role || role.find_first_of("'\"`") != std::string_view::npos)
    throw InvalidArgument(
        fmt::format("--role '{}' holds a quote, a backslash or a control character: grant to such a "
                    "{} by hand",
                    terminal_safe(role), what));
  if (role.size() > max_length)
    throw InvalidArgument(
        fmt::format("--role '{}' is longer than the {} bytes a {} name may have", role, max_length, what));
}

std::string pg_ident(std::string_view name) { return fmt::format("\"{}\"", name); }
std::string my_ident(std::string_view name) {
  std::string out = "`";
  for (char c : name) out += c == '`' ? std::string("``") : std::string(1, c);
  return out + "`";
}

}  // namespace

std::string postgres_runtime_grants(std::string_view schema, std::string_view prefix,
                                    std::span<const CatalogObject> objects, std::string_view role) {
  require_printable(role, "role", 63);  // NAMEDATALEN - 1
  auto use = runtime_use(objects, prefix);
  auto to = pg_ident(role);
  auto qualified = [&](const std::string& name) { return fmt::format("{}.{}", pg_ident(schema), pg_ident(name)); };
  std::string out = fmt::format(
      "-- The rights a runtime role needs on dblock's objects in PostgreSQL schema \"{0}\" (prefix \"{1}\"): enough\n"
      "-- for the library in table and advisory mode, `dblock run`, `locks`, `release --force`, `reaper` and\n"
      "-- `dblock migrate up|status|verify` on an up-to-date schema. No CREATE anywhere: `migrate up` that has\n"
      "-- work to do needs the role that owns dblock's objects. Create the role first, e.g.\n"
      "--   CREATE ROLE {2} LOGIN PASSWORD '...';\n"
      "GRANT USAGE ON SCHEMA {3} TO {2};\n",
      schema, prefix, to, pg_ident(schema));
  for (auto& table : use.written_tables)
    out += fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {} TO {};\n", qualified(table), to);
  for (auto& table : use.read_tables) out += fmt::format("GRANT SELECT ON TABLE {} TO {};\n", qualified(table), to);
  for (auto& sequence : use.sequences)
    out += fmt::format("GRANT USAGE ON SEQUENCE {} TO {};\n", qualified(sequence), to);
  // EXECUTE is PUBLIC's by default; granted by name all the same, for databases that revoked it.
  for (auto& function : use.functions)
    out += fmt::format("GRANT EXECUTE ON FUNCTION {} TO {};\n", qualified(function), to);
  return out;
}

std::string mysql_runtime_grants(std::string_view database, std::string_view prefix,
                                 std::span<const CatalogObject> objects, std::string_view role) {
  auto at = role.rfind('@');
  auto user = role.substr(0, at);
  auto host = at == std::string_view::npos ? std::string_view("%") : role.substr(at + 1);
  require_printable(user, "user", 80);  // MariaDB's limit (MySQL 8: 32)
  require_printable(host, "host", 255);
  if (terminal_safe(database) != database)
    throw InvalidArgument(fmt::format("the database name '{}' holds a control character", terminal_safe(database)));
  auto use = runtime_use(objects, prefix);
  auto to = fmt::format("'{}'@'{}'", user, host);
  auto qualified = [&](const std::string& name) { return fmt::format("{}.{}", my_ident(database), my_ident(name)); };
  std::string out = fmt::format(
      "-- The rights a runtime user needs on dblock's objects in MySQL/MariaDB database `{0}` (prefix \"{1}\"):\n"
      "-- enough for the library in table and GET_LOCK mode, `dblock run`, `locks`, `release --force`, `reaper`\n"
      "-- and `dblock migrate up|status|verify` on an up-to-date schema. No CREATE anywhere: `migrate up` that has\n"
      "-- work to do needs the user that created dblock's objects (its functions run with their definer's\n"
      "-- rights). Create the user first, e.g.\n"
      "--   CREATE USER {2} IDENTIFIED BY '...';\n",
      database, prefix, to);
  for (auto& table : use.written_tables)
    out += fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {};\n", qualified(table), to);
  for (auto& table : use.read_tables) out += fmt::format("GRANT SELECT ON {} TO {};\n", qualified(table), to);
  // NEXTVAL needs SELECT and INSERT on the sequence (GET_LOCK mode draws tokens itself; the functions
  // run as their definer).
  for (auto& sequence : use.sequences)
    out += fmt::format("GRANT SELECT, INSERT ON {} TO {};\n", qualified(sequence), to);
  for (auto& function : use.functions)
    out += fmt::format("GRANT EXECUTE ON FUNCTION {} TO {};\n", qualified(function), to);
  for (auto& procedure : use.procedures)
    out += fmt::format("GRANT EXECUTE ON PROCEDURE {} TO {};\n", qualified(procedure), to);
  return out;
}

}  // namespace dblock::detail
