#include "support/admin.hpp"

#include <stdexcept>
#include <string_view>

#include <dblock/store.hpp>

#include "backends/backend.hpp"
#include "core/store_parts.hpp"
#include "support/servers.hpp"

namespace dblock::test {

bool is_built(std::string_view dialect) {
  if (dialect == "postgresql") return DBLOCK_TEST_WITH_POSTGRES != 0;
  if (dialect == "mysql") return DBLOCK_TEST_WITH_MYSQL != 0;
  return dialect == "sqlite";
}

void Admin::insert_expired(const std::string& stem, int count) {
  auto store = Store::open(store_dsn_);
  detail::StoreParts::backend(*store).bench().get().seed_expired(stem, static_cast<std::size_t>(count));
}

namespace {

std::unique_ptr<Admin> make_dialect_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                          const std::string& prefix, bool client_found_rows) {
#if DBLOCK_TEST_WITH_POSTGRES
  if (dialect == "postgresql") return make_postgres_admin(dsn, schema, prefix);
#endif
#if DBLOCK_TEST_WITH_MYSQL
  if (dialect == "mysql") return make_mysql_admin(dsn, prefix, client_found_rows);
#endif
  (void)schema;
  (void)client_found_rows;
  if (dialect == "sqlite") {  // the file's path: the URI without its scheme and dblock's parameters
    auto path = dsn.substr(std::string("sqlite://").size());
    return make_sqlite_admin(path.substr(0, path.find('?')), prefix);
  }
  throw std::runtime_error("no test admin for dialect " + dialect + " in this build");
}

}  // namespace

std::unique_ptr<Admin> make_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                  const std::string& prefix, bool client_found_rows) {
  auto admin = make_dialect_admin(dialect, dsn, schema, prefix, client_found_rows);
  admin->store_dsn_ = with_params(dsn, "prefix=" + prefix + (dialect == "postgresql" ? "&schema=" + schema : ""));
  return admin;
}

}  // namespace dblock::test
