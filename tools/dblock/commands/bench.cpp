// `dblock bench`: its options; bench_command.cpp measures.
#include <algorithm>
#include <string>

#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "dblock/bench_command.hpp"
#include "dblock/commands/command.hpp"

namespace dblock::cli {
namespace {

class BenchCommand final : public Command {
 public:
  explicit BenchCommand(CLI::App& app)
      : Command(*app.add_subcommand("bench", "Measure dblock against the raw-driver floor in the same run")) {
    auto& bench = *parser_;
    bench.add_option("--scenario", request_.scenario,
                     "uncontended, handoff, renew, reap, fence, all (these five), scale (minutes: cost against "
                     "table size, held locks, waiters, threads), async (waiting tasks), work (1 ms of work inside "
                     "each lock, 16 and 200 threads) or names (10,000 names at random); work and names beside "
                     "hand-written SQL");
    bench.add_option("--mode", request_.mode,
                     "table or advisory (PostgreSQL advisory locks, MySQL GET_LOCK; uncontended and handoff)");
    bench.add_option("--kind", request_.kind,
                     "uncontended: lock, permit (of a semaphore of 2) or shared (a read lock), against the same floor");
    bench.add_option("--threads", request_.threads, "Threads (default: 1 and 16 uncontended, 4 handoff)")
        ->check(CLI::Range(1, 256));
    bench.add_option("--duration", duration_text_, "Measuring time per figure (split between floor and dblock)");
    bench.add_option("--renew-locks", request_.renew_locks, "Held locks renewed per cycle (default 1000 and 10000)")
        ->check(CLI::Range(1, 1000000));
    bench.add_option("--rows", request_.reap_rows, "Expired rows for the reap scenario")
        ->check(CLI::Range(1, 10000000));
    bench.add_option("--batch", request_.reap_batch, "Reaper batch size for the reap scenario")
        ->check(CLI::Range(1, 1000000));
    bench.add_flag("--json", request_.json, "One JSON object per scenario");
    bench
        .add_option(
            "--combine", combine_text_,
            "on: the library combines concurrent acquisitions and releases (the default); off: one statement each")
        ->check(CLI::IsMember({"on", "off"}));
    bench
        .add_option("--write-behind", write_behind_text_,
                    "on: the library's releases are written behind (ManagerOptions::write_behind_releases); off: "
                    "the default")
        ->check(CLI::IsMember({"on", "off"}));
    bench
        .add_option("--fair-queue", fair_queue_text_,
                    "on: the library's waiters queue in the database and releases hand off "
                    "(ManagerOptions::fair_queue); off: the default")
        ->check(CLI::IsMember({"on", "off"}));
  }

  int run(const Invocation& invocation) override {
    request_.duration = parse_duration(duration_text_);
    request_.combine = combine_text_ == "on";
    request_.write_behind = write_behind_text_ == "on";
    request_.fair_queue = fair_queue_text_ == "on";
    if (request_.duration.count() <= 0) throw InvalidArgument("--duration must be positive");
    // One session per thread, and a few for the floor's own clients.
    StoreOptions options{.pool_size = std::max<std::size_t>(request_.threads, 16) + 4};
    return run_bench(request_, open_ready_store(invocation, options));
  }

 private:
  BenchRequest request_;
  std::string duration_text_ = "5s", combine_text_ = "on", write_behind_text_ = "off", fair_queue_text_ = "off";
};

}  // namespace

std::unique_ptr<Command> add_bench_command(CLI::App& app) { return std::make_unique<BenchCommand>(app); }

}  // namespace dblock::cli
