// `dblock run --name N -- CMD ...`: its options and their checks; run_command.cpp holds the lock
// while the command runs.
#include <signal.h>
#include <unistd.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>
#include <dblock/options.hpp>
#include <dblock/text.hpp>

#include "dblock/commands/command.hpp"
#include "dblock/run_command.hpp"

namespace dblock::cli {
namespace {

class RunCommand final : public Command {
 public:
  explicit RunCommand(CLI::App& app)
      : Command(*app.add_subcommand("run", "Run a command while holding a lock: dblock run --name N -- CMD ...")) {
    auto& run = *parser_;
    run.add_option("--name", request_.name, "Lock name")->required();
    run.add_option("--ttl", ttl_text_, "Lease length, at least 200ms, renewed every third of it (500ms, 30s, 5m)");
    run.add_option("--wait", wait_text_, "How long to wait for the lock (0s: fail at once; forever: until granted)");
    run.add_option("--grace", grace_text_,
                   "When renewals keep failing, SIGTERM the command this long before the lease's local deadline; "
                   "its process group gets SIGKILL half of it (at most 1s) before the deadline (default: a third of "
                   "--ttl)");
    run.add_option("--mode", mode_text_,
                   "table (a row with a lease) or advisory (PostgreSQL advisory lock or MySQL GET_LOCK, held by "
                   "the connection; --ttl then sets how often the connection is checked)")
        ->check(CLI::IsMember({"table", "advisory"}));
    run.add_flag("--shared", request_.shared,
                 "A shared (read) lock: many shared holders at once, no exclusive one; in table mode a waiting "
                 "exclusive run is not starved by shared ones arriving after it");
    run.add_option("--permits", request_.permits,
                   "Table mode: one of N permits of a counting semaphore (at most N commands run at once)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000}));
    run.add_option("--min-hold", min_hold_text_,
                   "Table mode, exclusive: keep the name unavailable until this long after the grant even when CMD "
                   "ends sooner (a job that must not run more often than that; e.g. 10m)");
    run.add_option("--lock-delay", lock_delay_text_,
                   "Table mode, exclusive: if the lease ends without a release (this wrapper paused or cut off while "
                   "CMD may still run), keep the name unavailable this long after the lease's end (e.g. 15s)");
    run.add_flag("--fair", request_.fair,
                 "Table mode, a plain exclusive lock: wait in the name's fair queue (first come, first served; a "
                 "release hands the name to the first waiter in its own commit) and say the place taken on stderr")
        ->needs(run.get_option("--wait"));
    run.add_option("--note", note_,
                   "Table mode, exclusive: a note shown beside this holder by `dblock locks` and the status page "
                   "(up to 255 bytes; default: this host, pid and CMD; '' for none)");
    run.add_option("--ask-signal", ask_signal_text_,
                   "Table mode, exclusive: when the holder is asked to let go (`dblock release --ask`), send CMD's "
                   "process group this signal (TERM, INT, HUP, USR1, USR2, QUIT, WINCH or ALRM, with or without "
                   "SIG); default none: the request is only said on stderr");
    run.add_option("--once-per", once_per_text_,
                   "Run CMD at most once per occurrence of a schedule with this period across every host (e.g. 1h "
                   "for an hourly timer): a host finding this occurrence already run (or failed) exits 75");
    run.add_option("--occurrence", occurrence_key_text_,
                   "Run CMD once for this occurrence key (e.g. the scheduled instant), instead of --once-per");
    run.add_option("--occurrence-tolerance", tolerance_text_,
                   "How early a host may fire before the scheduled instant (clock skew; default: a tenth of "
                   "--once-per, at most 5m)");
    run.add_option("--occurrence-offset", offset_text_,
                   "Where the periods start after the Unix epoch in UTC (e.g. 22h: days starting at 22:00 UTC)");
    run.add_option("--occurrence-keep", keep_text_,
                   "How long occurrence records are kept (default: 3 periods; 7 days with --occurrence)");
    run.add_flag("--retry-failed", retry_failed_,
                 "Let a failed or abandoned occurrence run again (default: at most one run per occurrence)");
    run.add_option("command", request_.command, "The command and its arguments, after --")->required();
    // The manual page's source too (help2man): its last paragraph becomes the ENVIRONMENT section.
    run.footer(
        "run exits with CMD's status; 127 when CMD was not found, 126 when it is not executable (both named on "
        "stderr).\n\n"
        "Environment:\n"
        "  CMD runs with DBLOCK_LOCK_NAME, DBLOCK_FENCING_TOKEN, DBLOCK_LOCK_OWNER (the holder's owner id, as the "
        "lock table has it) and DBLOCK_LOCK_KIND (exclusive, permit or shared): the arguments of the fence its own "
        "transactions begin with (fence_member for a permit or a reader).");
  }

  int run(const Invocation& invocation) override {
    request_.out = invocation.out;
    check_options();
    block_forwarded_signals();                                // before the Store or a manager starts any thread
    request_.inherited_descriptors = descriptors_open_now();  // before the Store opens any
    return run_guarded(open_ready_store(invocation), request_);
  }

 private:
  void check_options() {
    request_.ttl = parse_duration(ttl_text_);
    request_.wait = wait_text_ == "forever" ? wait_forever : parse_duration(wait_text_);
    validate_lock_name(request_.name);
    validate_ttl(request_.ttl);
    if (request_.ttl < kMinRunTtl)
      throw InvalidArgument(
          fmt::format("--ttl {} is too short for `run`: it must be at least {} (renewals every "
                      "third of the lease, SIGTERM and SIGKILL before its end must fit in it)",
                      ttl_text_, format_duration(kMinRunTtl)));
    request_.grace = grace_text_.empty() ? request_.ttl / 3 : parse_duration(grace_text_);
    if (request_.grace >= request_.ttl)
      throw InvalidArgument(fmt::format("--grace {} must be shorter than --ttl {}", grace_text_, ttl_text_));
    request_.mode = mode_text_ == "advisory" ? LockMode::advisory : LockMode::table;
    if (request_.permits > 0 && request_.mode != LockMode::table) throw InvalidArgument("--permits needs --mode table");
    if (request_.permits > 0 && request_.shared) throw InvalidArgument("--permits and --shared exclude each other");
    bool exclusive_table = request_.mode == LockMode::table && request_.permits == 0 && !request_.shared;
    if (!min_hold_text_.empty()) {
      request_.min_hold = parse_duration(min_hold_text_);
      if (request_.min_hold.count() <= 0) throw InvalidArgument("--min-hold must be positive");
      if (!exclusive_table)
        throw InvalidArgument("--min-hold needs --mode table and an exclusive lock (no --shared, no --permits)");
    }
    if (!lock_delay_text_.empty()) {
      request_.lock_delay = parse_duration(lock_delay_text_);
      if (request_.lock_delay.count() <= 0) throw InvalidArgument("--lock-delay must be positive");
      if (!exclusive_table)
        throw InvalidArgument("--lock-delay needs --mode table and an exclusive lock (no --shared, no --permits)");
    }
    if (request_.fair && (!exclusive_table || request_.min_hold.count() > 0 || request_.lock_delay.count() > 0))
      throw InvalidArgument(
          "--fair needs --mode table and a plain exclusive lock (no --shared, --permits, --min-hold or --lock-delay)");
    if (note_) {
      request_.note = *note_;
      if (!note_->empty() && !exclusive_table) throw InvalidArgument("--note needs --mode table and an exclusive lock");
    } else if (exclusive_table) {
      request_.note = default_note(request_.command);
    }
    if (!ask_signal_text_.empty()) {
      request_.ask_signal = signal_named(ask_signal_text_);
      if (!exclusive_table) throw InvalidArgument("--ask-signal needs --mode table and an exclusive lock");
    }
    check_occurrence(exclusive_table);
  }

  /// "HOST pid N: CMD ARGS...", escaped as a terminal shows it, cut to a note's 255 bytes.
  static std::string default_note(const std::vector<std::string>& command) {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    auto note = fmt::format("{} pid {}:", terminal_safe(host.data()), getpid());
    for (const auto& word : command) note += " " + terminal_safe(word);
    constexpr std::size_t kMaxNote = 255;
    if (note.size() > kMaxNote) {
      auto cut = kMaxNote;
      while (cut > 0 && (static_cast<unsigned char>(note[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
      note.resize(cut);
    }
    return note;
  }

  static int signal_named(std::string_view text) {
    constexpr std::array<std::pair<std::string_view, int>, 8> kSignals{{{"TERM", SIGTERM},
                                                                        {"INT", SIGINT},
                                                                        {"HUP", SIGHUP},
                                                                        {"USR1", SIGUSR1},
                                                                        {"USR2", SIGUSR2},
                                                                        {"QUIT", SIGQUIT},
                                                                        {"WINCH", SIGWINCH},
                                                                        {"ALRM", SIGALRM}}};
    auto bare = text.starts_with("SIG") ? text.substr(3) : text;
    for (auto [name, number] : kSignals)
      if (bare == name) return number;
    throw InvalidArgument(fmt::format("--ask-signal '{}' is not one of TERM, INT, HUP, USR1, USR2, QUIT, WINCH, ALRM",
                                      terminal_safe(text)));
  }

  void check_occurrence(bool exclusive_table) {
    if (once_per_text_.empty() && occurrence_key_text_.empty()) {
      if (!tolerance_text_.empty() || !offset_text_.empty() || !keep_text_.empty() || retry_failed_)
        throw InvalidArgument(
            "--occurrence-tolerance, --occurrence-offset, --occurrence-keep and --retry-failed need --once-per or "
            "--occurrence");
      return;
    }
    OccurrenceOptions occurrence{.key = occurrence_key_text_, .retry_failed = retry_failed_};
    if (!once_per_text_.empty()) occurrence.period = parse_duration(once_per_text_);
    if (!tolerance_text_.empty()) occurrence.tolerance = parse_duration(tolerance_text_);
    if (!offset_text_.empty()) occurrence.offset = parse_duration(offset_text_);
    if (!keep_text_.empty()) occurrence.keep = parse_duration(keep_text_);
    if (!exclusive_table) throw InvalidArgument("--once-per and --occurrence need an exclusive lock in table mode");
    request_.occurrence = occurrence;
  }

  RunRequest request_;
  std::string ttl_text_ = "30s", wait_text_ = "0s", grace_text_, mode_text_ = "table";
  std::string min_hold_text_, lock_delay_text_, ask_signal_text_;
  std::optional<std::string> note_;
  std::string once_per_text_, occurrence_key_text_, tolerance_text_, offset_text_, keep_text_;
  bool retry_failed_ = false;
};

}  // namespace

std::unique_ptr<Command> add_run_command(CLI::App& app) { return std::make_unique<RunCommand>(app); }

}  // namespace dblock::cli
