// `dblock migrate up|status|verify|sql|grants|repair`: dblock's own tables.
#include <optional>
#include <string>

#include <fmt/format.h>
#include <dblock/migrate.hpp>

#include "dblock/commands/command.hpp"

namespace dblock::cli {
namespace {

class MigrateCommand final : public Command {
 public:
  explicit MigrateCommand(CLI::App& app) : Command(*app.add_subcommand("migrate", "Manage dblock's own tables")) {
    parser_->require_subcommand(1);
    up_ = parser_->add_subcommand("up", "Apply missing migrations (safe to run concurrently)");
    up_->add_option("--to", up_to_, "Stop after this version");
    status_ = parser_->add_subcommand("status", "List versions: applied, pending, drifted, failed, unknown-newer");
    verify_ = parser_->add_subcommand("verify", "Exit 78 on drift, failed records or a newer database");
    sql_ = parser_->add_subcommand("sql", "Print what `up` would run, for a DBA (needs no connection)");
    sql_->add_option("--from", sql_from_, "First version");
    sql_->add_option("--to", sql_to_, "Last version");
    grants_ = parser_->add_subcommand(
        "grants", "Print the GRANT statements a runtime role needs (no CREATE anywhere; needs no connection)");
    grants_->add_option("--role", grants_role_, "Role to grant to (MySQL: user or user@host, host % by default)")
        ->required();
    parser_->add_subcommand("repair", "Complete (MySQL) or clear failed migration records so `up` can go on");
  }

  [[nodiscard]] bool connects() const override { return !sql_->parsed() && !grants_->parsed(); }

  int run(const Invocation& invocation) override {
    if (sql_->parsed()) {
      fmt::print("{}", Migrator::sql(invocation.dsn, sql_from_, sql_to_));
      return 0;
    }
    if (grants_->parsed()) {
      fmt::print("{}", Migrator::grants(invocation.dsn, grants_role_));
      return 0;
    }
    // Not open_ready_store: migrating is this command's own work, reported as it goes.
    Migrator migrator(Store::open(invocation.dsn, {.logger = invocation.logger}));
    if (up_->parsed()) return up(migrator);
    if (status_->parsed() || verify_->parsed()) return check(migrator);
    auto cleared = migrator.repair();
    if (cleared.empty()) fmt::print("nothing to repair\n");
    for (int version : cleared)
      fmt::print("cleared the failed record of migration {:04d}; run `dblock migrate up`\n", version);
    return 0;
  }

 private:
  int up(Migrator& migrator) const {
    auto result = migrator.up(up_to_);
    if (result.applied.empty()) fmt::print("dblock schema is up to date (version {})\n", result.current_version);
    for (int version : result.applied) fmt::print("applied migration {:04d}\n", version);
    return 0;
  }

  int check(Migrator& migrator) const {
    auto statuses = migrator.status();
    if (status_->parsed()) {
      fmt::print("{:<8} {:<24} {:<14} {}\n", "VERSION", "NAME", "STATE", "CHECKSUM (recorded / shipped)");
      for (auto& row : statuses)
        fmt::print("{:<8} {:<24} {:<14} {} / {}\n", fmt::format("{:04d}", row.version), row.name, to_string(row.state),
                   row.recorded_checksum.empty() ? "-" : row.recorded_checksum.substr(0, 12),
                   row.shipped_checksum.empty() ? "-" : row.shipped_checksum.substr(0, 12));
    }
    migrator.verify();  // status exits 78 too when something needs an operator
    if (verify_->parsed()) fmt::print("dblock schema verified: no drift, no failed or unknown versions\n");
    return 0;
  }

  CLI::App* up_ = nullptr;
  CLI::App* status_ = nullptr;
  CLI::App* verify_ = nullptr;
  CLI::App* sql_ = nullptr;
  CLI::App* grants_ = nullptr;
  std::optional<int> up_to_, sql_from_, sql_to_;
  std::string grants_role_;
};

}  // namespace

std::unique_ptr<Command> add_migrate_command(CLI::App& app) { return std::make_unique<MigrateCommand>(app); }

}  // namespace dblock::cli
