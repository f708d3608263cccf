// dblock: the command-line tool. Its subcommands (migrate, run, locks, leader, release, reaper,
// bench) each add their options and run from their own file in commands/; this file holds the
// global options, the DSN every subcommand uses, and the exit code of an error.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <dblock/dblock.hpp>

#include "dblock/commands/command.hpp"
#include "dblock/default_store.hpp"
#include "dblock/exit_codes.hpp"
#include "dblock/logging.hpp"

namespace {

using namespace dblock;

int exit_code_for(const Error& error) {
  switch (error.category()) {
    case ErrorCategory::invalid_argument:
      return cli::kUsage;
    case ErrorCategory::connection:
      return cli::kUnavailable;
    case ErrorCategory::timeout:
    case ErrorCategory::deadlock:
      return cli::kTempFail;
    case ErrorCategory::schema:
      return cli::kConfig;
    case ErrorCategory::permission:
      return cli::kNoPermission;
    default:
      return cli::kSoftware;
  }
}

/// The database the command works on: --dsn, else $DBLOCK_DSN, else the embedded default. Only an
/// absent DSN means the default: an empty one is a mistake (an unset variable in a deployment file),
/// and falling back would make every host lock its own file.
std::string resolve_dsn(const std::optional<std::string>& dsn_option, const cli::Command& command) {
  const char* from_env = std::getenv("DBLOCK_DSN");
  if (dsn_option && dsn_option->empty())
    throw InvalidArgument("--dsn is empty: give a database URI, or leave --dsn out for the embedded default");
  if (!dsn_option && from_env != nullptr && *from_env == '\0')
    throw InvalidArgument("DBLOCK_DSN is set but empty: give a database URI, or unset it for the embedded default");
  if (dsn_option) return *dsn_option;
  if (from_env != nullptr) return from_env;
  return command.connects() ? cli::open_default_store() : cli::default_store_uri();
}

}  // namespace

int main(int argc, char** argv) {
  // Named here, not from argv[0]: help, usage errors and the man pages made from them say "dblock".
  CLI::App app{"dblock: distributed locks in the SQL database you already run", "dblock"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version",
      [] {
        std::string text = fmt::format("dblock {} (commit {})\nbackends:", DBLOCK_VERSION, DBLOCK_GIT_COMMIT);
        for (auto& backend : compiled_backends()) text += "\n  " + backend;
        return text;
      },
      "Print the version, the commit it was built from and the built-in backends with their drivers");
  // Global options are accepted after the subcommand too: `dblock migrate up --dsn URI`.
  app.fallthrough();
  std::optional<std::string> dsn_option;
  std::string log_level;  // empty: the subcommand's default
  std::string log_format = "text";
  app.add_option("--dsn", dsn_option,
                 "Database URI (default: $DBLOCK_DSN, else the embedded store sqlite://$DBLOCK_STATE_DIR/dblock.db, "
                 "DBLOCK_STATE_DIR defaulting to /var/lib/dblock for root and to $XDG_STATE_HOME/dblock "
                 "(~/.local/state/dblock) for other users)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off (default: warn; info for reaper)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  std::vector<std::unique_ptr<cli::Command>> commands;
  for (auto add : {cli::add_migrate_command, cli::add_run_command, cli::add_locks_command, cli::add_leader_command,
                   cli::add_release_command, cli::add_reaper_command, cli::add_bench_command})
    commands.push_back(add(app));
  app.add_option("--log-format", log_format, "text or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0 || log_format != "json") {
      int code = app.exit(e);  // help and version on stdout; usage errors as CLI11 words them
      return code == 0 ? 0 : cli::kUsage;
    }
    cli::Stderr(true).say("error", fmt::format("{} (run with --help for more information)", e.what()));
    return cli::kUsage;
  }

  auto& command = **std::find_if(commands.begin(), commands.end(), [](auto& c) { return c->chosen(); });
  cli::Stderr out(log_format == "json");
  try {
    auto logger =
        cli::make_logger(log_level.empty() ? std::string(command.default_log_level()) : log_level, log_format);
    return command.run({resolve_dsn(dsn_option, command), logger, &out});
  } catch (const cli::StoreRefused& e) {
    out.say("error", e.what());
    return e.exit_code();
  } catch (const Error& e) {
    out.say("error", e.what());
    return exit_code_for(e);
  } catch (const std::exception& e) {
    out.say("error", e.what());
    return cli::kSoftware;
  }
}
