// `dblock reaper`: the sidecar's options; reaper_command.cpp runs it.
#include <string>

#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "dblock/commands/command.hpp"
#include "dblock/reaper_command.hpp"
#include "dblock/run_command.hpp"

namespace dblock::cli {
namespace {

class ReaperCommand final : public Command {
 public:
  explicit ReaperCommand(CLI::App& app)
      : Command(*app.add_subcommand("reaper", "Delete expired locks until SIGTERM; serve /metrics and /healthz")) {
    auto& reaper = *parser_;
    reaper.add_option("--interval", interval_text_, "Pause between cycles (jittered ±20%)");
    reaper.add_option("--batch", request_.batch, "Most rows deleted per statement")->check(CLI::Range(1, 1000000));
    reaper.add_option("--listen", request_.listen,
                      "HOST:PORT or [IPV6]:PORT for /metrics and /healthz ('' to disable)");
    reaper.add_flag("--once", request_.once, "Run one cycle and exit");
    reaper
        .add_option("--unhealthy-after", request_.unhealthy_after, "Failed cycles in a row before /healthz answers 503")
        ->check(CLI::Range(1, 1000));
    reaper.add_option("--census-every", census_every_text_,
                      "Read the lock-table gauges (a scan of the table) at most this often, whatever the scrape rate");
    reaper.add_option("--status-refresh", status_refresh_text_,
                      "Read the rows for the status page (/ and /status.json) at most this often");
    reaper.add_option("--status-rows", request_.status_rows, "Most rows the status page lists (by name)")
        ->check(CLI::Range(1, 100000));
    reaper.add_flag("--status-public", request_.status_public,
                    "Serve the status page and /status.json on a --listen address other than loopback too (they "
                    "show lock names and owners)");
    reaper.add_option("--admin-token-file", request_.admin_token_file,
                      "Enable POST /api/revoke?name=N for requests with 'Authorization: Bearer TOKEN', the token "
                      "read from this file (at least 16 characters); without it the HTTP endpoints are read-only");
  }

  /// A daemon says what it does.
  [[nodiscard]] std::string_view default_log_level() const override { return "info"; }

  int run(const Invocation& invocation) override {
    request_.dsn = invocation.dsn;
    request_.interval = parse_duration(interval_text_);
    if (request_.interval.count() <= 0) throw InvalidArgument("--interval must be positive");
    request_.census_every = parse_duration(census_every_text_);
    request_.status_refresh = parse_duration(status_refresh_text_);
    block_forwarded_signals();  // before any thread, so sigtimedwait receives them
    return run_reaper(request_, invocation.logger);
  }

 private:
  ReaperRequest request_;
  std::string interval_text_ = "10s", census_every_text_ = "15s", status_refresh_text_ = "5s";
};

}  // namespace

std::unique_ptr<Command> add_reaper_command(CLI::App& app) { return std::make_unique<ReaperCommand>(app); }

}  // namespace dblock::cli
