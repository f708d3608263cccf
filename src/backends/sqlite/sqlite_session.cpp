#include "backends/sqlite/sqlite_session.hpp"

namespace dblock::detail {

[[noreturn]] void rethrow_translated(std::string_view what, std::string_view path, StatementAuthor author) {
  try {
    throw;
  } catch (const soci::sqlite3_soci_error& e) {
    std::string_view detail = e.what();
    detail = detail.substr(0, detail.find(" while preparing"));  // SOCI appends the whole statement
    auto message = fmt::format("{} on sqlite://{}: {}", what, path, detail);
    // Compare primary codes: extended ones such as SQLITE_BUSY_SNAPSHOT (517) are busy too.
    int primary = e.result() & 0xff;
    if (primary == kSqliteBusy || primary == kSqliteLocked) throw TransientError(message);
    if (author == StatementAuthor::dblock && std::string_view(e.what()).find("no such table") != std::string_view::npos)
      throw SchemaError(SchemaError::Reason::missing,
                        fmt::format("dblock's tables are missing in sqlite://{}: run `dblock migrate up`", path));
    throw DatabaseError(message);
  } catch (const soci::soci_error& e) {
    std::string_view detail = e.what();
    throw DatabaseError(fmt::format("{} on sqlite://{}: {}", what, path, detail.substr(0, detail.find(" while "))));
  }
}

bool execute_single(soci::statement& statement) {
  bool got = statement.execute(true);
  if (got) {
    [[maybe_unused]] bool more = statement.fetch();
  }
  return got;
}

}  // namespace dblock::detail
