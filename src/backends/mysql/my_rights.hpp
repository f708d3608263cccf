#pragma once
// Which of the rights `migrate up` needs a MySQL/MariaDB account lacks, read from SHOW GRANTS: the
// one statement that lists the privileges of the account, of its enabled role and (MariaDB 10.11)
// of PUBLIC, wildcard database grants included. information_schema leaves out role privileges.

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dblock::detail {

/// What one run of `migrate up` is about to do in the URI's database.
struct MyMigrationNeeds {
  std::vector<std::string> create_tables;     // tables and sequences that do not exist yet: CREATE
  std::vector<std::string> create_routines;   // functions that do not exist yet: CREATE ROUTINE
  std::vector<std::string> replace_routines;  // functions created OR REPLACEd: ALTER ROUTINE
  std::vector<std::string> alter_tables;      // tables given columns by ALTER TABLE: ALTER
  std::string history;                        // the history table, written: SELECT, INSERT, UPDATE
};

/// The missing rights, each as `PRIVILEGE on `db`.`object`` (or `on `db`.*`), in the order of
/// `needs`. Empty when nothing is missing, and also when the rows do not show every privilege the
/// session may have (a granted role whose own grants are not listed, as MySQL 8 shows them only
/// with USING): then nothing is refused on a guess.
[[nodiscard]] std::vector<std::string> missing_mysql_migration_rights(std::span<const std::string> show_grants,
                                                                      std::string_view database,
                                                                      const MyMigrationNeeds& needs);

}  // namespace dblock::detail
