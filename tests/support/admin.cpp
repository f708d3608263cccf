#include "support/admin.hpp"

#include <stdexcept>

namespace dblock::test {

std::unique_ptr<Admin> make_admin(const std::string& dialect, const std::string& dsn, const std::string& schema,
                                  const std::string& prefix, bool client_found_rows) {
#if DBLOCK_TEST_WITH_POSTGRES
  if (dialect == "postgresql") return make_postgres_admin(dsn, schema, prefix);
#endif
#if DBLOCK_TEST_WITH_MYSQL
  if (dialect == "mysql") return make_mysql_admin(dsn, prefix, client_found_rows);
#endif
  (void)schema;
  (void)client_found_rows;
  if (dialect == "sqlite") return make_sqlite_admin(dsn.substr(std::string("sqlite://").size()), prefix);
  throw std::runtime_error("no test admin for dialect " + dialect + " in this build");
}

}  // namespace dblock::test
