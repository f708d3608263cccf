// One subcommand of the CLI. Each adds its own options to the parser from its own file and, once
// the command line is parsed and it was chosen, checks them and runs; main() keeps only what every
// subcommand shares: the global options, the DSN and the logger, and the exit code of an error.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/logger.h>
#include <CLI/CLI.hpp>
#include <dblock/store.hpp>

#include "dblock/logging.hpp"

namespace dblock::cli {

/// What main() resolved from the global options, for the chosen subcommand.
struct Invocation {
  std::string dsn;
  std::shared_ptr<spdlog::logger> logger;
  const Stderr* out = nullptr;
};

class Command {
 public:
  explicit Command(CLI::App& parser) : parser_(&parser) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  /// Whether the command line chose this subcommand.
  [[nodiscard]] bool chosen() const { return parser_->parsed(); }
  /// False for what needs only the default store's dialect, no connection (`migrate sql`): the
  /// embedded default's file is then neither created nor checked.
  [[nodiscard]] virtual bool connects() const { return true; }
  /// The log level when --log-level is not given.
  [[nodiscard]] virtual std::string_view default_log_level() const { return "warn"; }
  /// Checks the options and runs; returns the process exit code. Throws dblock::Error, which main()
  /// maps to an exit code, and StoreRefused.
  virtual int run(const Invocation& invocation) = 0;

 protected:
  CLI::App* parser_;
};

/// The store of a command that works on the lock table. The embedded default (SQLite) needs no
/// set-up step: its file gets dblock's tables here, on first use.
[[nodiscard]] std::shared_ptr<Store> open_ready_store(const Invocation& invocation, StoreOptions options = {});
/// As open_ready_store, and the schema checked to be the one this build expects (exit 78 if not).
[[nodiscard]] std::shared_ptr<Store> open_checked_store(const Invocation& invocation);

// In the order `dblock --help` lists them.
std::unique_ptr<Command> add_migrate_command(CLI::App& app);
std::unique_ptr<Command> add_run_command(CLI::App& app);
std::unique_ptr<Command> add_locks_command(CLI::App& app);
std::unique_ptr<Command> add_leader_command(CLI::App& app);
std::unique_ptr<Command> add_release_command(CLI::App& app);
std::unique_ptr<Command> add_reaper_command(CLI::App& app);
std::unique_ptr<Command> add_bench_command(CLI::App& app);

}  // namespace dblock::cli
