// dblock: the command-line tool. Subcommands: migrate up|status|verify|sql|grants|repair, run, locks,
// release --force, reaper, bench.
#include <cstdlib>
#include <optional>
#include <iostream>

#include <CLI/CLI.hpp>
#include <dblock/dblock.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dblock/bench_command.hpp"
#include "dblock/default_store.hpp"
#include "dblock/exit_codes.hpp"
#include "dblock/leader_command.hpp"
#include "dblock/locks_command.hpp"
#include "dblock/logging.hpp"
#include "dblock/reaper_command.hpp"
#include "dblock/release_command.hpp"
#include "dblock/run_command.hpp"

namespace {

using namespace dblock;

int exit_code_for(const Error& error) {
  switch (error.category()) {
    case ErrorCategory::invalid_argument: return cli::kUsage;
    case ErrorCategory::connection: return cli::kUnavailable;
    case ErrorCategory::timeout: return cli::kTempFail;
    case ErrorCategory::schema: return cli::kConfig;
    case ErrorCategory::permission: return cli::kNoPermission;
    default: return cli::kSoftware;
  }
}

int run_migrate(const std::shared_ptr<Store>& store, const CLI::App* up, const CLI::App* status,
                const CLI::App* verify, std::optional<int> up_to) {
  Migrator migrator(store);
  if (up->parsed()) {
    auto result = migrator.up(up_to);
    if (result.applied.empty()) fmt::print("dblock schema is up to date (version {})\n", result.current_version);
    for (int version : result.applied) fmt::print("applied migration {:04d}\n", version);
    return 0;
  }
  if (status->parsed() || verify->parsed()) {
    auto statuses = migrator.status();
    if (status->parsed()) {
      fmt::print("{:<8} {:<24} {:<14} {}\n", "VERSION", "NAME", "STATE", "CHECKSUM (recorded / shipped)");
      for (auto& row : statuses)
        fmt::print("{:<8} {:<24} {:<14} {} / {}\n", fmt::format("{:04d}", row.version), row.name,
                   to_string(row.state), row.recorded_checksum.empty() ? "-" : row.recorded_checksum.substr(0, 12),
                   row.shipped_checksum.empty() ? "-" : row.shipped_checksum.substr(0, 12));
    }
    migrator.verify();  // status exits 78 too when something needs an operator
    if (verify->parsed()) fmt::print("dblock schema verified: no drift, no failed or unknown versions\n");
    return 0;
  }
  auto cleared = migrator.repair();
  if (cleared.empty()) fmt::print("nothing to repair\n");
  for (int version : cleared) fmt::print("cleared the failed record of migration {:04d}; run `dblock migrate up`\n", version);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Named here, not from argv[0]: help, usage errors and the man pages made from them say "dblock".
  CLI::App app{"dblock: distributed locks in the SQL database you already run", "dblock"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    std::string text = fmt::format("dblock {} (commit {})\nbackends:", DBLOCK_VERSION, DBLOCK_GIT_COMMIT);
    for (auto& backend : compiled_backends()) text += "\n  " + backend;
    return text;
  }, "Print the version, the commit it was built from and the built-in backends with their drivers");
  // Global options are accepted after the subcommand too: `dblock migrate up --dsn URI`.
  app.fallthrough();
  std::string dsn;
  std::string log_level = "warn";
  std::optional<std::string> dsn_option;
  app.add_option("--dsn", dsn_option,
                 "Database URI (default: $DBLOCK_DSN, else the embedded store sqlite://$DBLOCK_STATE_DIR/dblock.db, "
                 "DBLOCK_STATE_DIR defaulting to /var/lib/dblock for root and to $XDG_STATE_HOME/dblock "
                 "(~/.local/state/dblock) for other users)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  auto* migrate_cmd = app.add_subcommand("migrate", "Manage dblock's own tables");
  migrate_cmd->require_subcommand(1);
  auto* migrate_up = migrate_cmd->add_subcommand("up", "Apply missing migrations (safe to run concurrently)");
  std::optional<int> up_to;
  migrate_up->add_option("--to", up_to, "Stop after this version");
  auto* migrate_status = migrate_cmd->add_subcommand("status", "List versions: applied, pending, drifted, failed, unknown-newer");
  auto* migrate_verify = migrate_cmd->add_subcommand("verify", "Exit 78 on drift, failed records or a newer database");
  auto* migrate_sql = migrate_cmd->add_subcommand("sql", "Print what `up` would run, for a DBA (needs no connection)");
  std::optional<int> sql_from;
  std::optional<int> sql_to;
  migrate_sql->add_option("--from", sql_from, "First version");
  migrate_sql->add_option("--to", sql_to, "Last version");
  auto* migrate_grants = migrate_cmd->add_subcommand(
      "grants", "Print the GRANT statements a runtime role needs (no CREATE anywhere; needs no connection)");
  std::string grants_role;
  migrate_grants->add_option("--role", grants_role, "Role to grant to (MySQL: user or user@host, host % by default)")
      ->required();
  migrate_cmd->add_subcommand("repair", "Complete (MySQL) or clear failed migration records so `up` can go on");

  auto* run = app.add_subcommand("run", "Run a command while holding a lock: dblock run --name N -- CMD ...");
  cli::RunRequest request;
  std::string ttl_text = "30s";
  std::string wait_text = "0s";
  std::string grace_text;
  run->add_option("--name", request.name, "Lock name")->required();
  run->add_option("--ttl", ttl_text, "Lease length, at least 200ms, renewed every third of it (500ms, 30s, 5m)");
  run->add_option("--wait", wait_text, "How long to wait for the lock (0s: fail at once; forever: until granted)");
  run->add_option("--grace", grace_text,
                  "When renewals keep failing, SIGTERM the command this long before the lease's local deadline; "
                  "its process group gets SIGKILL half of it (at most 1s) before the deadline (default: a third of "
                  "--ttl)");
  std::string mode_text = "table";
  run->add_option("--mode", mode_text,
                  "table (a row with a lease) or advisory (PostgreSQL advisory lock or MySQL GET_LOCK, held by "
                  "the connection; --ttl then sets how often the connection is checked)")
      ->check(CLI::IsMember({"table", "advisory"}));
  run->add_flag("--shared", request.shared,
                "A shared (read) lock: many shared holders at once, no exclusive one; in table mode a waiting "
                "exclusive run is not starved by shared ones arriving after it");
  run->add_option("--permits", request.permits,
                  "Table mode: one of N permits of a counting semaphore (at most N commands run at once)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000}));
  std::string min_hold_text;
  run->add_option("--min-hold", min_hold_text,
                  "Table mode, exclusive: keep the name unavailable until this long after the grant even when CMD "
                  "ends sooner (a job that must not run more often than that; e.g. 10m)");
  std::string lock_delay_text;
  run->add_option("--lock-delay", lock_delay_text,
                  "Table mode, exclusive: if the lease ends without a release (this wrapper paused or cut off while "
                  "CMD may still run), keep the name unavailable this long after the lease's end (e.g. 15s)");
  std::string once_per_text, occurrence_key_text, tolerance_text, offset_text, keep_text;
  bool retry_failed = false;
  run->add_option("--once-per", once_per_text,
                  "Run CMD at most once per occurrence of a schedule with this period across every host (e.g. 1h "
                  "for an hourly timer): a host finding this occurrence already run (or failed) exits 75");
  run->add_option("--occurrence", occurrence_key_text,
                  "Run CMD once for this occurrence key (e.g. the scheduled instant), instead of --once-per");
  run->add_option("--occurrence-tolerance", tolerance_text,
                  "How early a host may fire before the scheduled instant (clock skew; default: a tenth of "
                  "--once-per, at most 5m)");
  run->add_option("--occurrence-offset", offset_text,
                  "Where the periods start after the Unix epoch in UTC (e.g. 22h: days starting at 22:00 UTC)");
  run->add_option("--occurrence-keep", keep_text,
                  "How long occurrence records are kept (default: 3 periods; 7 days with --occurrence)");
  run->add_flag("--retry-failed", retry_failed,
                "Let a failed or abandoned occurrence run again (default: at most one run per occurrence)");
  run->add_option("command", request.command, "The command and its arguments, after --")->required();
  // The manual page's source too (help2man): its last paragraph becomes the ENVIRONMENT section.
  run->footer(
      "run exits with CMD's status; 127 when CMD was not found, 126 when it is not executable (both named on "
      "stderr).\n\n"
      "Environment:\n"
      "  CMD runs with DBLOCK_LOCK_NAME, DBLOCK_FENCING_TOKEN, DBLOCK_LOCK_OWNER (the holder's owner id, as the lock "
      "table has it) and DBLOCK_LOCK_KIND (exclusive, permit or shared): the arguments of the fence its own "
      "transactions begin with (fence_member for a permit or a reader).");

  auto* locks = app.add_subcommand("locks", "List locks with owner, count, token and lease left");
  bool json = false;
  locks->add_flag("--json", json, "Print JSON");

  auto* leader = app.add_subcommand("leader",
                                    "Print who leads a name now (owner, token, since when, lease left); "
                                    "exit 1 when nobody does");
  std::string leader_name;
  bool leader_json = false;
  leader->add_option("name", leader_name, "Lock name the election campaigns for")->required();
  leader->add_flag("--json", leader_json, "Print JSON");

  auto* release = app.add_subcommand("release", "Operator's break-glass: revoke a lock whoever holds it");
  bool force = false;
  bool unsafe_delete = false;
  std::string release_name;
  release->add_flag("--force", force,
                    "Required: confirms breaking someone else's lock. The holder is revoked: told at its next renewal "
                    "that it lost the lock, and the name is free once it lets go or its lease ends, not before");
  release->add_flag("--unsafe-delete", unsafe_delete,
                    "With --force: delete the row at once instead. UNSAFE unless the holder is known to be dead: a "
                    "live holder keeps working until its next renewal while the next one is already granted");
  release->add_option("name", release_name, "Lock name")->required();

  auto* reaper = app.add_subcommand("reaper", "Delete expired locks until SIGTERM; serve /metrics and /healthz");
  cli::ReaperRequest reaper_request;
  std::string interval_text = "10s";
  std::string log_format = "text";
  reaper->add_option("--interval", interval_text, "Pause between cycles (jittered ±20%)");
  reaper->add_option("--batch", reaper_request.batch, "Most rows deleted per statement")->check(CLI::Range(1, 1000000));
  reaper->add_option("--listen", reaper_request.listen,
                     "HOST:PORT or [IPV6]:PORT for /metrics and /healthz ('' to disable)");
  reaper->add_flag("--once", reaper_request.once, "Run one cycle and exit");
  reaper->add_option("--unhealthy-after", reaper_request.unhealthy_after,
                     "Failed cycles in a row before /healthz answers 503")
      ->check(CLI::Range(1, 1000));
  std::string census_every_text = "15s", status_refresh_text = "5s";
  reaper->add_option("--census-every", census_every_text,
                     "Read the lock-table gauges (a scan of the table) at most this often, whatever the scrape rate");
  reaper->add_option("--status-refresh", status_refresh_text,
                     "Read the rows for the status page (/ and /status.json) at most this often");
  reaper->add_option("--status-rows", reaper_request.status_rows, "Most rows the status page lists (by name)")
      ->check(CLI::Range(1, 100000));
  reaper->add_flag("--status-public", reaper_request.status_public,
                   "Serve the status page and /status.json on a --listen address other than loopback too (they "
                   "show lock names and owners)");
  reaper->add_option("--admin-token-file", reaper_request.admin_token_file,
                     "Enable POST /api/revoke?name=N for requests with 'Authorization: Bearer TOKEN', the token read "
                     "from this file (at least 16 characters); without it the HTTP endpoints are read-only");
  auto* bench = app.add_subcommand("bench", "Measure dblock against the raw-driver floor in the same run");
  cli::BenchRequest bench_request;
  std::string bench_duration = "5s";
  bench->add_option("--scenario", bench_request.scenario,
                    "uncontended, handoff, renew, reap, fence, all (these five) or scale (minutes: cost against table size, held locks, waiters, threads)");
  bench->add_option("--mode", bench_request.mode, "table or advisory (PostgreSQL advisory locks, MySQL GET_LOCK; uncontended and handoff)");
  bench->add_option("--kind", bench_request.kind,
                    "uncontended: lock, permit (of a semaphore of 2) or shared (a read lock), against the same floor");
  bench->add_option("--threads", bench_request.threads, "Threads (default: 1 and 16 uncontended, 4 handoff)")
      ->check(CLI::Range(1, 256));
  bench->add_option("--duration", bench_duration, "Measuring time per figure (split between floor and dblock)");
  bench->add_option("--renew-locks", bench_request.renew_locks, "Held locks renewed per cycle (default 1000 and 10000)")
      ->check(CLI::Range(1, 1000000));
  bench->add_option("--rows", bench_request.reap_rows, "Expired rows for the reap scenario")->check(CLI::Range(1, 10000000));
  bench->add_option("--batch", bench_request.reap_batch, "Reaper batch size for the reap scenario")
      ->check(CLI::Range(1, 1000000));
  bench->add_flag("--json", bench_request.json, "One JSON object per scenario");
  std::string bench_combine = "on";
  bench
      ->add_option(
          "--combine", bench_combine,
          "on: the library combines concurrent acquisitions and releases (the default); off: one statement each")
      ->check(CLI::IsMember({"on", "off"}));
  std::string bench_write_behind = "off";
  bench
      ->add_option("--write-behind", bench_write_behind,
                   "on: the library's releases are written behind (ManagerOptions::write_behind_releases); off: the "
                   "default")
      ->check(CLI::IsMember({"on", "off"}));
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

  if (reaper->parsed() && log_level == "warn") log_level = "info";  // a daemon says what it does
  auto logger = cli::make_logger(log_level, log_format);
  cli::Stderr out(log_format == "json");
  request.out = &out;
  try {
    // Only an absent DSN means the embedded default: an empty one is a mistake (an unset variable
    // in a deployment file), and falling back would make every host lock its own file.
    const char* from_env = std::getenv("DBLOCK_DSN");
    if (dsn_option && dsn_option->empty())
      throw InvalidArgument("--dsn is empty: give a database URI, or leave --dsn out for the embedded default");
    if (!dsn_option && from_env != nullptr && *from_env == '\0')
      throw InvalidArgument("DBLOCK_DSN is set but empty: give a database URI, or unset it for the embedded default");
    // The subcommands that need no connection only need the default store's dialect.
    bool connects = !migrate_sql->parsed() && !migrate_grants->parsed();
    dsn = dsn_option                       ? *dsn_option
          : from_env != nullptr            ? std::string(from_env)
          : connects                       ? cli::open_default_store()
                                           : cli::default_store_uri();
    if (run->parsed()) {
      request.ttl = parse_duration(ttl_text);
      request.wait = wait_text == "forever" ? wait_forever : parse_duration(wait_text);
      validate_lock_name(request.name);
      validate_ttl(request.ttl);
      if (request.ttl < cli::kMinRunTtl)
        throw InvalidArgument(fmt::format("--ttl {} is too short for `run`: it must be at least {} (renewals every "
                                          "third of the lease, SIGTERM and SIGKILL before its end must fit in it)",
                                          ttl_text, format_duration(cli::kMinRunTtl)));
      request.grace = grace_text.empty() ? request.ttl / 3 : parse_duration(grace_text);
      if (request.grace >= request.ttl)
        throw InvalidArgument(fmt::format("--grace {} must be shorter than --ttl {}", grace_text, ttl_text));
      request.mode = mode_text == "advisory" ? LockMode::advisory : LockMode::table;
      if (request.permits > 0 && request.mode != LockMode::table) throw InvalidArgument("--permits needs --mode table");
      if (request.permits > 0 && request.shared) throw InvalidArgument("--permits and --shared exclude each other");
      if (!min_hold_text.empty()) {
        request.min_hold = parse_duration(min_hold_text);
        if (request.min_hold.count() <= 0) throw InvalidArgument("--min-hold must be positive");
        if (request.mode != LockMode::table || request.permits > 0 || request.shared)
          throw InvalidArgument("--min-hold needs --mode table and an exclusive lock (no --shared, no --permits)");
      }
      if (!lock_delay_text.empty()) {
        request.lock_delay = parse_duration(lock_delay_text);
        if (request.lock_delay.count() <= 0) throw InvalidArgument("--lock-delay must be positive");
        if (request.mode != LockMode::table || request.permits > 0 || request.shared)
          throw InvalidArgument("--lock-delay needs --mode table and an exclusive lock (no --shared, no --permits)");
      }
      if (!once_per_text.empty() || !occurrence_key_text.empty()) {
        OccurrenceOptions occurrence{.key = occurrence_key_text, .retry_failed = retry_failed};
        if (!once_per_text.empty()) occurrence.period = parse_duration(once_per_text);
        if (!tolerance_text.empty()) occurrence.tolerance = parse_duration(tolerance_text);
        if (!offset_text.empty()) occurrence.offset = parse_duration(offset_text);
        if (!keep_text.empty()) occurrence.keep = parse_duration(keep_text);
        if (request.mode != LockMode::table || request.shared || request.permits > 0)
          throw InvalidArgument("--once-per and --occurrence need an exclusive lock in table mode");
        request.occurrence = occurrence;
      } else if (!tolerance_text.empty() || !offset_text.empty() || !keep_text.empty() || retry_failed) {
        throw InvalidArgument("--occurrence-tolerance, --occurrence-offset, --occurrence-keep and --retry-failed "
                              "need --once-per or --occurrence");
      }
      cli::block_forwarded_signals();  // before the Store or a manager starts any thread
      request.inherited_descriptors = cli::descriptors_open_now();  // before the Store opens any
    }
    if (release->parsed()) {
      if (!force) throw InvalidArgument("release breaks another owner's lock: add --force to confirm");
      validate_lock_name(release_name);
    }
    if (reaper->parsed()) {
      reaper_request.dsn = dsn;
      reaper_request.interval = parse_duration(interval_text);
      if (reaper_request.interval.count() <= 0) throw InvalidArgument("--interval must be positive");
      reaper_request.census_every = parse_duration(census_every_text);
      reaper_request.status_refresh = parse_duration(status_refresh_text);
      cli::block_forwarded_signals();  // before any thread, so sigtimedwait receives them
      return cli::run_reaper(reaper_request, logger);
    }
    if (migrate_sql->parsed()) {
      fmt::print("{}", Migrator::sql(dsn, sql_from, sql_to));
      return 0;
    }
    if (migrate_grants->parsed()) {
      fmt::print("{}", Migrator::grants(dsn, grants_role));
      return 0;
    }
    StoreOptions store_options{.logger = logger};
    if (bench->parsed()) {
      bench_request.duration = parse_duration(bench_duration);
      bench_request.combine = bench_combine == "on";
      bench_request.write_behind = bench_write_behind == "on";
      if (bench_request.duration.count() <= 0) throw InvalidArgument("--duration must be positive");
      store_options.pool_size = std::max<std::size_t>(bench_request.threads, 16) + 4;  // one session per thread
    }
    auto store = Store::open(dsn, store_options);
    if (migrate_cmd->parsed()) return run_migrate(store, migrate_up, migrate_status, migrate_verify, up_to);
    // The embedded default needs no set-up step: its file gets dblock's tables on first use.
    if (store->dialect() == "sqlite") (void)migrate(*store);
    if (run->parsed()) return cli::run_guarded(store, request);
    if (bench->parsed()) return cli::run_bench(bench_request, store);
    store->check_schema();
    if (locks->parsed()) {
      cli::print_locks(*store, json);
      return 0;
    }
    if (release->parsed()) return cli::run_release(*store, release_name, unsafe_delete);
    if (leader->parsed()) return cli::print_leader(*store, leader_name, leader_json);
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
  return 0;
}
