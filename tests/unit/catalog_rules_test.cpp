// Each dialect's catalog rules (src/backends/<p>/<p>_migration.cpp), reached as `migrate verify` and
// `migrate up` reach them: through the URI's migration dialect. One rule per dialect that the shared
// reader (schema_objects) would get wrong without it, plus the grants each dialect renders.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <dblock/options.hpp>

#include "backends/backend_factory.hpp"
#include "backends/schema_objects.hpp"
#include "base/uri.hpp"

using namespace dblock::detail;

namespace {

std::unique_ptr<MigrationDialect> dialect_of(std::string_view uri) {
  return make_migration_dialect(resolve_store_uri(uri, dblock::StoreOptions{}));
}

const CatalogObject* find(const std::vector<CatalogObject>& objects, std::string_view kind, std::string_view name) {
  auto at = std::find_if(objects.begin(), objects.end(), [&](auto& o) { return o.kind == kind && o.name == name; });
  return at == objects.end() ? nullptr : &*at;
}

}  // namespace

// A rowid table's primary key may hold NULL: a declared `INTEGER PRIMARY KEY` column is not "not null".
TEST(CatalogRules, SqlitePrimaryKeyDoesNotImplyNotNull) {
  auto dialect = dialect_of("sqlite:///tmp/catalog_rules_test.db?prefix=p_");
  auto& rules = dialect->catalog_rules();
  auto objects =
      objects_created_by("CREATE TABLE \"p_t\" (\n  id INTEGER PRIMARY KEY,\n  n TEXT NOT NULL\n);\n", rules);
  auto* table = find(objects, "table", "p_t");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->column_types, (std::vector<std::string>{"integer", "text not null"}));
  EXPECT_EQ(find(objects, "index", "p_t_pkey"), nullptr) << "SQLite lists no implicit primary-key index";
  EXPECT_NE(dialect->runtime_grants({}, "web").find("SQLite has no roles"), std::string::npos);
}

#if DBLOCK_TEST_WITH_POSTGRES
// PostgreSQL: the implicit index is `<table>_pkey`, aliases are spelled as the catalog does, the
// "default" collation is not shown, and a body is what sits between the $fn$ markers.
TEST(CatalogRules, PostgresPrimaryKeyIndexAliasesAndDollarQuotedBodies) {
  auto dialect = dialect_of("postgresql://h/db?schema=s&prefix=p_");
  auto& rules = dialect->catalog_rules();
  auto objects = objects_created_by(
      "CREATE TABLE \"s\".\"p_t\" (\n  id bigint PRIMARY KEY,\n  at timestamptz\n);\n"
      "CREATE OR REPLACE FUNCTION \"s\".\"p_f\"() RETURNS int LANGUAGE sql AS $fn$ SELECT 1 $fn$;\n",
      rules);
  auto* index = find(objects, "index", "p_t_pkey");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->columns, std::vector<std::string>{"id"});
  auto* table = find(objects, "table", "p_t");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->column_types, (std::vector<std::string>{"bigint not null", "timestamp with time zone"}));
  auto* function = find(objects, "function", "p_f");
  ASSERT_NE(function, nullptr);
  EXPECT_EQ(function->definition, " SELECT 1 ");
  EXPECT_EQ(canonical_column_type(rules, "text collate default"), "text");
  EXPECT_NE(dialect->runtime_grants({}, "web").find("GRANT USAGE ON SCHEMA \"s\" TO \"web\";"), std::string::npos);
}
#endif

#if DBLOCK_TEST_WITH_MYSQL
// MySQL/MariaDB: routine names fold case, integer display widths are dropped, the implicit index
// is `PRIMARY`, and index names are the table's own (never a foreign-object clash).
TEST(CatalogRules, MysqlRoutineNamesFoldCaseAndDisplayWidthsDrop) {
  auto dialect = dialect_of("mysql://h/app?prefix=p_");
  auto& rules = dialect->catalog_rules();
  EXPECT_TRUE(rules.same_name({"function", "p_Acquire", "", {}, ""}, {"function", "p_acquire", "", {}, ""}));
  EXPECT_FALSE(rules.same_name({"table", "p_Locks", "", {}, ""}, {"table", "p_locks", "", {}, ""}));
  EXPECT_TRUE(rules.takes_name("p_locks", "P_LOCKS"));
  EXPECT_TRUE(rules.index_names_are_per_table());
  EXPECT_EQ(column_type(rules, "INT(11)", true, ""), "int not null");
  EXPECT_EQ(column_type(rules, "BOOLEAN", false, "utf8mb4_bin"), "tinyint collate utf8mb4_bin");
  auto objects = objects_created_by("CREATE TABLE `p_t` (\n  id BIGINT NOT NULL,\n  PRIMARY KEY (id)\n);\n", rules);
  EXPECT_NE(find(objects, "index", "PRIMARY"), nullptr);
  EXPECT_NE(dialect->runtime_grants({}, "web").find("'web'@'%'"), std::string::npos);
}
#endif
