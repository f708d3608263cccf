#include "dblock/bench_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <dblock/dblock.hpp>
#include <dblock/fence.hpp>

#include "core/bench_floor.hpp"
#include "dblock/bench_harness.hpp"
#if DBLOCK_CLI_WITH_ASIO
#include "dblock/bench_async.hpp"
#endif
#include "dblock/bench_report.hpp"
#include "dblock/bench_workloads.hpp"
#include "dblock/exit_codes.hpp"
#include "dblock/server_cpu.hpp"

namespace dblock::cli {

namespace {

using dblock::detail::HandWritten;

/// One measured cycle of the library: try to take `name`, release it if granted.
void timed_cycle(LockManager& locks, const std::string& name, Latencies& latencies, LockOptions options = {}) {
  auto started = Clock::now();
  if (auto lock = locks.try_acquire(name, options)) lock->release();
  latencies.add(Clock::now() - started);
}

class Bench {
 public:
  Bench(const BenchRequest& request, std::shared_ptr<Store> store)
      : request_(request),
        store_(std::move(store)),
        floor_(*store_),
        mode_(request.mode == "advisory" ? LockMode::advisory : LockMode::table),
        run_id_(fmt::format("bench/{}", getpid())) {}

  Result uncontended(std::size_t threads) {
    LockManager locks(store_, manager_options());
    std::vector<std::unique_ptr<dblock::detail::RawLockClient>> raw;
    for (std::size_t t = 0; t < threads; ++t) raw.push_back(floor_.raw_client());
    std::vector<std::size_t> counters(threads, 0);
    auto name_for = [&](std::size_t t) { return fmt::format("{}/u/{}/{}", run_id_, t, counters[t]++ % 64); };
    // Table mode: the same acquire and release statements, bare. Advisory mode: the plain
    // pg_advisory_lock / pg_advisory_unlock pair on the same keys (MySQL: GET_LOCK / RELEASE_LOCK
    // on names of the same length), no token, no checks.
    auto floor = [&](std::size_t t, Latencies& latencies) {
      auto name = name_for(t);
      auto started = Clock::now();
      if (mode_ == LockMode::advisory) {
        auto key = AdvisoryKey::from_name(name).key();
        raw[t]->blocking_lock(key);
        raw[t]->blocking_unlock(key);
      } else {
        auto owner = fmt::format("{}/floor/{}", run_id_, t);
        auto token = raw[t]->acquire(name, owner, 30'000);
        if (token) raw[t]->release(name, owner, *token);
      }
      latencies.add(Clock::now() - started);
    };
    // --kind permit / shared: a permit of a semaphore of 2, or a read lock, against the same floor
    // (a plain lock's bare statements): what a group costs next to a lock.
    LockOptions options{.shared = request_.kind == "shared", .permits = request_.kind == "permit" ? 2 : 0};
    auto library = [&](std::size_t t, Latencies& latencies) { timed_cycle(locks, name_for(t), latencies, options); };
    auto comparison = compare(threads, request_.duration, floor, library);
    auto scenario = request_.kind == "lock" ? std::string("uncontended") : "uncontended " + request_.kind;
    Result result{scenario,
                  request_.mode,
                  threads,
                  comparison.library,
                  comparison.floor,
                  mode_ == LockMode::advisory ? fmt::format("raw {}, prepared", raw.front()->blocking_lock_functions())
                                              : std::string("raw driver, same statements"),
                  comparison.ratio,
                  {}};
    result.extra["ratio_of"] = "median of 8 alternating pairs";
    result.extra["unit"] = "acquire+release cycles";
    if (mode_ == LockMode::table) compare_with_hand_written(threads, library, result);
    if (mode_ == LockMode::table && request_.kind == "lock") compare_with_ceiling(threads, library, result);
    result.extra["p99_ms"] = fmt::format("{:.3f}", comparison.library.p99_ms);
    note_combining(locks, result);
    return result;
  }

  [[nodiscard]] ManagerOptions manager_options() const {
    return {.mode = mode_,
            .default_ttl = std::chrono::seconds(30),
            .combine_requests = request_.combine,
            .write_behind_releases = request_.write_behind,
            .fair_queue = request_.fair_queue};
  }

  /// How many of the library's acquisitions and releases went out in a statement with others.
  void note_combining(LockManager& locks, Result& result) const {
    auto stats = locks.stats();
    result.extra["combine"] = request_.combine ? "on" : "off";
    result.extra["write_behind"] = request_.write_behind ? "on" : "off";
    if (request_.fair_queue) result.extra["fair_queue"] = "on";
    if (request_.write_behind && stats.acquired > 0)
      result.extra["written_behind_pct"] = fmt::format(
          "{:.0f}", 100.0 * static_cast<double>(stats.written_behind) / static_cast<double>(stats.acquired));
    result.extra["retried"] = std::to_string(stats.retried);
    if (stats.acquired > 0)
      result.extra["combined_pct"] = fmt::format(
          "{:.0f}", 100.0 * static_cast<double>(stats.combined) / (2.0 * static_cast<double>(stats.acquired)));
  }

  /// The floor a user recognises: the simplest SQL they would write by hand, on the same names, in
  /// the same run, compared the same way. Then the same SQL with its delete committed without
  /// waiting for the disk, as dblock's release is: how far that alone takes hand-written SQL.
  /// Skipped where the backend has none.
  template <class Library>
  void compare_with_hand_written(std::size_t threads, Library& library, Result& result) {
    for (auto how : {HandWritten::synchronous, HandWritten::asynchronous_delete}) {
      std::vector<std::unique_ptr<dblock::detail::RawLockClient>> hand;
      for (std::size_t t = 0; t < threads; ++t)
        if (auto client = floor_.hand_written_client(how)) hand.push_back(std::move(client));
      if (hand.size() != threads) return;
      std::vector<std::size_t> counters(threads, 0);
      auto hand_written = [&](std::size_t t, Latencies& latencies) {
        auto name = fmt::format("{}/h/{}/{}", run_id_, t, counters[t]++ % 64);
        auto owner = fmt::format("{}/hand/{}", run_id_, t);
        auto started = Clock::now();
        if (auto token = hand[t]->acquire(name, owner, 30'000)) hand[t]->release(name, owner, *token);
        latencies.add(Clock::now() - started);
      };
      auto comparison = compare(threads, request_.duration, hand_written, library);
      auto key = how == HandWritten::synchronous ? std::string("hand_written") : "hand_written_async_delete";
      result.extra[key + "_ops_per_sec"] = fmt::format("{:.0f}", comparison.floor.ops_per_sec);
      result.extra[key + "_p99_ms"] = fmt::format("{:.3f}", comparison.floor.p99_ms);
      result.extra["ratio_to_" + key] = fmt::format("{:.3f}", comparison.ratio);
    }
    result.extra["hand_written"] = "upsert with nextval() in VALUES + DELETE, raw driver";
    result.extra["hand_written_async_delete"] = "the same, the DELETE with synchronous_commit off";
  }

  /// The server's ceiling for dblock's own statements, in the same run: the acquisition and release
  /// (acquire_many and release_last_many; a lone name, acquire and release_last) driven by the
  /// leanest client (RawBatchClient), as many names outstanding as the library has threads, in the
  /// shape the server serves best: 1, 2 or 4 connections, at most 32 names a statement (each shape
  /// tried briefly first), one round trip per batch. dblock ÷ ceiling says how much of the server
  /// the library leaves unused.
  template <class Library>
  void compare_with_ceiling(std::size_t threads, Library& library, Result& result) {
    constexpr std::size_t kMostNames = 32;  // the combiner's largest batch
    auto least_connections = (threads + kMostNames - 1) / kMostNames;
    std::vector<std::unique_ptr<dblock::detail::RawBatchClient>> clients;
    std::vector<std::size_t> rounds;
    auto probe = std::max(milliseconds(200), request_.duration / 16);
    std::size_t best_connections = 0, best_batch = 0;
    double best = -1;
    auto ceiling_of = [&](std::size_t batch) {
      return [&, batch](std::size_t c, Latencies& latencies) {
        // Names in ascending order, as the core's batches are; a batch's names are free again by the
        // time they come round (the release of one batch commits before the next acquisition).
        auto first = rounds[c]++ % 8 * batch;
        std::vector<std::string> names;
        for (std::size_t i = 0; i < batch; ++i) names.push_back(fmt::format("{}/c/{}/{:04}", run_id_, c, first + i));
        auto started = Clock::now();
        clients[c]->cycle(names, fmt::format("{}/ceiling/{}", run_id_, c), 30'000);
        latencies.add(Clock::now() - started);
      };
    };
    for (std::size_t connections : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
      connections = std::min(std::max(connections, least_connections), threads);
      if (connections <= best_connections) continue;
      while (clients.size() < connections)
        if (auto client = floor_.ceiling_client())
          clients.push_back(std::move(client));
        else
          return;
      rounds.assign(clients.size(), 0);
      auto batch = (threads + connections - 1) / connections;
      auto body = ceiling_of(batch);
      auto ops = run_threads(connections, probe, body).ops_per_sec * static_cast<double>(batch);
      for (auto& client : clients) client->release_held();
      if (ops > best) best = ops, best_connections = connections, best_batch = batch;
    }
    auto ceiling = ceiling_of(best_batch);
    Workers ceiling_workers(best_connections), library_workers(threads);
    auto comparison = compare_on(ceiling_workers, ceiling, static_cast<double>(best_batch), library_workers, library,
                                 request_.duration);
    for (auto& client : clients) client->release_held();
    result.extra["ceiling_ops_per_sec"] = fmt::format("{:.0f}", comparison.floor.ops_per_sec);
    result.extra["ceiling_p50_ms_per_round_trip"] = fmt::format("{:.3f}", comparison.floor.p50_ms);
    result.extra["ratio_to_ceiling"] = fmt::format("{:.3f}", comparison.ratio);
    result.extra["ceiling"] = fmt::format(
        "dblock's acquisition and release pipelined, one round trip per batch, {} connection(s) x {} name(s) (the "
        "best of 1, 2, 4), raw driver",
        best_connections, best_batch);
  }

  /// --scenario fence: one short write transaction (one insert into the bench's own table) fenced
  /// by a lock taken once and held throughout, so only the transaction's cost is compared, against
  /// the same transaction unfenced with the bare driver; then the bare driver's transaction with
  /// the fence against it without, the fence statement's own cost.
  Result fence(std::size_t threads) {
    std::vector<std::unique_ptr<dblock::detail::RawWriteClient>> raw;
    for (std::size_t t = 0; t < threads; ++t)
      if (auto client = floor_.raw_write_client()) raw.push_back(std::move(client));
    if (raw.size() != threads)
      throw InvalidArgument(fmt::format("--scenario fence: no floor on {}", store_->dialect()));
    LockManager locks(store_, {.default_ttl = std::chrono::seconds(30)});
    auto lock = locks.acquire(fmt::format("{}/fence", run_id_), std::chrono::seconds(30));
    const FenceTarget target(lock);
    const std::pair<std::string, std::int64_t> bare_target{lock.name(), lock.token()};
    const std::string& insert = raw.front()->insert_sql();
    std::vector<std::int64_t> counters(threads, 0);
    auto unfenced = [&](std::size_t t, Latencies& latencies) {
      auto started = Clock::now();
      raw[t]->write(run_id_, counters[t]++, std::nullopt);
      latencies.add(Clock::now() - started);
    };
    auto bare_fenced = [&](std::size_t t, Latencies& latencies) {
      auto started = Clock::now();
      raw[t]->write(run_id_, counters[t]++, bare_target);
      latencies.add(Clock::now() - started);
    };
    auto library = [&](std::size_t t, Latencies& latencies) {
      std::vector<std::string> params{run_id_, std::to_string(counters[t]++)};
      auto started = Clock::now();
      store_->fenced(target, [&](FencedTransaction& tx) { tx.execute(insert, params); });
      latencies.add(Clock::now() - started);
    };
    auto comparison = compare(threads, request_.duration, unfenced, library);
    auto statement = compare(threads, request_.duration, unfenced, bare_fenced);
    raw.front()->clear(run_id_);
    Result result{"fence",          request_.mode,
                  threads,          comparison.library,
                  comparison.floor, "raw driver, the same transaction unfenced",
                  comparison.ratio, {}};
    result.extra["ratio_of"] = "median of 8 alternating pairs";
    result.extra["unit"] = "transactions: begin, one insert, commit (dblock: Store::fenced, the fence first)";
    result.extra["bare_fenced_ops_per_sec"] = fmt::format("{:.0f}", statement.library.ops_per_sec);
    result.extra["ratio_bare_fenced_to_unfenced"] = fmt::format("{:.3f}", statement.ratio);
    result.extra["bare_fenced"] = "raw driver, the same transaction with the fence statement first";
    return result;
  }

  Result handoff(std::size_t threads) {
    // One name, T threads: the time from one holder's release to the next holder's grant.
    auto measure = [&](auto&& acquire_one, auto&& release_one) {
      std::atomic<std::int64_t> released_at{0};
      std::vector<std::size_t> grants(threads, 0);
      Latencies handoffs;
      auto cpu_before = server_cpu(store_->dialect());
      std::mutex mutex;
      auto figure = run_threads(threads, request_.duration / 2, [&](std::size_t t, Latencies&) {
        acquire_one(t);
        auto now = Clock::now().time_since_epoch().count();
        auto previous = released_at.load();
        {
          std::lock_guard lock(mutex);  // inside the lock: one holder at a time anyway
          if (previous != 0) handoffs.add(Clock::duration(now - previous));
          ++grants[t];
        }
        released_at = Clock::now().time_since_epoch().count();
        release_one(t);
      });
      figure.p50_ms = handoffs.percentile(0.5);
      figure.p99_ms = handoffs.percentile(0.99);
      auto [least, most] = std::minmax_element(grants.begin(), grants.end());
      std::optional<double> cpu_ms;  // the server's CPU per hand-off
      if (cpu_before)
        cpu_ms = 1000 * cpu_before->seconds_since() / std::max<double>(1, static_cast<double>(handoffs.ms.size()));
      return std::make_tuple(figure, fmt::format("{}..{}", *least, *most), cpu_ms);
    };
    auto name = fmt::format("{}/handoff", run_id_);
    LockManager locks(store_, manager_options());
    std::vector<std::optional<Lock>> held(threads);
    auto [dblock_figure, dblock_fairness, dblock_cpu] =
        measure([&](std::size_t t) { held[t].emplace(locks.acquire(name, std::chrono::seconds(30))); },
                [&](std::size_t t) { held[t].reset(); });
    Result result{"handoff", request_.mode, threads, dblock_figure, std::nullopt, "", std::nullopt, {}};
    result.extra["grants_per_thread"] = dblock_fairness;
    if (request_.fair_queue) result.extra["fair_queue"] = "on";
    if (dblock_cpu) result.extra["server_cpu_ms_per_handoff"] = fmt::format("{:.3f}", *dblock_cpu);
    std::vector<std::unique_ptr<dblock::detail::RawLockClient>> raw;
    for (std::size_t t = 0; t < threads; ++t) raw.push_back(floor_.raw_client());
    if (raw.front()->blocking_lock(0)) {
      raw.front()->blocking_unlock(0);
      constexpr std::int64_t kKey = 0x64626c6f636bLL;  // "dblock"
      auto [floor_figure, floor_fairness, floor_cpu] = measure([&](std::size_t t) { raw[t]->blocking_lock(kKey); },
                                                               [&](std::size_t t) { raw[t]->blocking_unlock(kKey); });
      result.floor = floor_figure;
      result.ratio = dblock_figure.ops_per_sec / std::max(1e-9, floor_figure.ops_per_sec);
      result.floor_name = fmt::format("{} blocking hand-off", raw.front()->blocking_lock_functions());
      result.extra["floor_grants_per_thread"] = floor_fairness;
      if (floor_cpu) result.extra["floor_server_cpu_ms_per_handoff"] = fmt::format("{:.3f}", *floor_cpu);
      result.extra["p50_latency_ratio"] =
          fmt::format("{:.2f}", dblock_figure.p50_ms / std::max(1e-9, floor_figure.p50_ms));
    }
    result.extra["unit"] = "hand-offs; p50/p99 = release-to-next-grant";
    return result;
  }

  Result renew(std::size_t count) {
    LockManager locks(store_, {.default_ttl = std::chrono::minutes(10)});
    std::vector<Lock> held;
    held.reserve(count);
    auto started = Clock::now();
    for (std::size_t i = 0; i < count; ++i)
      if (auto lock = locks.try_acquire(fmt::format("{}/renew/{}", run_id_, i))) held.push_back(std::move(*lock));
    auto acquire_seconds = std::chrono::duration<double>(Clock::now() - started).count();
    auto owner = locks.owner_id();
    std::vector<dblock::detail::HeldRef> refs;
    for (auto& lock : held) refs.push_back({lock.name(), owner, lock.token(), std::chrono::minutes(10)});
    // The watchdog's cycle: one statement for every held lock.
    Latencies cycles;
    std::size_t renewed = 0;
    constexpr int kCycles = 5;
    for (int i = 0; i < kCycles; ++i) {
      auto cycle_start = Clock::now();
      renewed = floor_.renew(refs);
      cycles.add(Clock::now() - cycle_start);
    }
    auto p50 = cycles.percentile(0.5);
    Result result{"renew",
                  request_.mode,
                  1,
                  {p50 > 0 ? static_cast<double>(count) / (p50 / 1000) : 0, p50, cycles.percentile(0.99)},
                  std::nullopt,
                  "",
                  std::nullopt,
                  {}};
    result.extra["locks"] = std::to_string(count);
    result.extra["renewed_per_cycle"] = std::to_string(renewed);
    result.extra["round_trips_per_cycle"] = "1";
    result.extra["unit"] = "locks renewed/s; p50/p99 = one cycle";
    result.extra["acquire_all_seconds"] = fmt::format("{:.2f}", acquire_seconds);
    held.clear();
    return result;
  }

  /// --scenario scale: how cost grows with the work. Table mode: acquire latency with the lock
  /// table at 10k/100k/1M rows (rows whose lease ended, reaped afterwards) and one renewal cycle
  /// at 1k/10k/100k held locks; every mode: hand-offs with 1/16/128 waiters on one name (with the
  /// server's CPU per hand-off where the server runs on this host) and throughput at 1-64 threads.
  std::vector<Result> scale() {
    std::vector<Result> results;
    if (mode_ == LockMode::table) {
      LockManager locks(store_, {.default_ttl = std::chrono::seconds(30)});
      std::size_t seeded = 0, counter = 0;
      for (std::size_t rows : {std::size_t{10'000}, std::size_t{100'000}, std::size_t{1'000'000}}) {
        floor_.seed_expired(fmt::format("{}/scale/{}/", run_id_, rows), rows - seeded);
        seeded = rows;
        auto figure = run_threads(1, request_.duration / 2, [&](std::size_t, Latencies& latencies) {
          timed_cycle(locks, fmt::format("{}/rows/{}", run_id_, counter++ % 64), latencies);
        });
        Result result{"scale rows", request_.mode, 1, figure, std::nullopt, "", std::nullopt, {}};
        result.extra["rows"] = std::to_string(rows);
        result.extra["unit"] = "acquire+release cycles with the lock table at `rows` rows";
        results.push_back(std::move(result));
      }
      auto reaped = Reaper(store_, {.batch_size = 10'000}).run_once();
      if (!reaped.ok) throw DatabaseError("reaping the scale scenario's rows failed: " + reaped.error);
      for (std::size_t count : {std::size_t{1'000}, std::size_t{10'000}, std::size_t{100'000}}) {
        results.push_back(renew(count));
        results.back().scenario = "scale renew";
      }
    }
    for (std::size_t waiters : {std::size_t{1}, std::size_t{16}, std::size_t{128}}) {
      results.push_back(handoff(waiters + 1));
      results.back().scenario = "scale handoff";
      results.back().extra["waiters"] = std::to_string(waiters);
    }
    LockManager locks(store_, manager_options());
    for (std::size_t threads : {1, 2, 4, 8, 16, 32, 64}) {
      std::vector<std::size_t> counters(threads, 0);
      auto figure = run_threads(threads, request_.duration / 2, [&](std::size_t t, Latencies& latencies) {
        timed_cycle(locks, fmt::format("{}/threads/{}/{}", run_id_, t, counters[t]++ % 64), latencies);
      });
      Result result{"scale threads", request_.mode, threads, figure, std::nullopt, "", std::nullopt, {}};
      result.extra["unit"] = "uncontended acquire+release cycles, all threads together";
      results.push_back(std::move(result));
    }
    return results;
  }

  std::vector<Result> workload() { return bench_workload(request_, store_, floor_, manager_options(), run_id_); }

  Result reap() {
    LockManager locks(store_, {.default_ttl = std::chrono::seconds(30)});
    std::size_t counter = 0;
    auto live_cycle = [&](Latencies& latencies) {
      timed_cycle(locks, fmt::format("{}/live/{}", run_id_, counter++ % 64), latencies);
    };
    Latencies baseline;
    auto baseline_until = Clock::now() + std::max(milliseconds(200), request_.duration / 4);
    while (Clock::now() < baseline_until) live_cycle(baseline);

    floor_.seed_expired(fmt::format("{}/expired/", run_id_), request_.reap_rows);
    Reaper reaper(store_, {.batch_size = request_.reap_batch});
    std::atomic<bool> reaping{true};
    Latencies during;
    std::jthread live([&] {
      while (reaping) live_cycle(during);
    });
    // A cycle that fails on a transient error (an InnoDB deadlock against the live loop, after the
    // reaper's own retries) is tried again, as the sidecar would at its next interval; each failed
    // cycle's rows and time still count.
    ReapCycle cycle;
    int failed_cycles = 0;
    for (;;) {
      auto attempt = reaper.run_once();
      cycle.rows += attempt.rows;
      cycle.duration += attempt.duration;
      if (attempt.ok) break;
      if (++failed_cycles == 3) {
        reaping = false;
        throw DatabaseError("reaper failed during the benchmark, 3 cycles in a row: " + attempt.error);
      }
    }
    reaping = false;
    live.join();
    double seconds = std::chrono::duration<double>(cycle.duration).count();
    Result result{
        "reap",
        request_.mode,
        1,
        {seconds > 0 ? static_cast<double>(cycle.rows) / seconds : 0, during.percentile(0.5), during.percentile(0.99)},
        std::nullopt,
        "",
        std::nullopt,
        {}};
    result.extra["rows"] = std::to_string(cycle.rows);
    result.extra["batch"] = std::to_string(request_.reap_batch);
    result.extra["failed_cycles"] = std::to_string(failed_cycles);
    result.extra["live_p99_without_reaper_ms"] = fmt::format("{:.3f}", baseline.percentile(0.99));
    result.extra["live_p99_ratio"] =
        fmt::format("{:.2f}", during.percentile(0.99) / std::max(1e-9, baseline.percentile(0.99)));
    result.extra["unit"] = "rows deleted/s; p50/p99 = live acquire+release while reaping";
    return result;
  }

 private:
  const BenchRequest& request_;
  std::shared_ptr<Store> store_;
  dblock::detail::BenchFloor floor_;
  LockMode mode_;
  std::string run_id_;
};

}  // namespace

int run_bench(const BenchRequest& request, const std::shared_ptr<Store>& store) {
  if (request.mode != "table" && request.mode != "advisory")
    throw InvalidArgument(fmt::format("--mode {} is unknown (table or advisory)", request.mode));
  bool advisory = request.mode == "advisory";
  if (advisory && (request.scenario == "renew" || request.scenario == "reap" || request.scenario == "fence"))
    throw InvalidArgument(fmt::format("--scenario {} measures leases and rows: table mode only", request.scenario));
  if (request.kind != "lock" && request.kind != "permit" && request.kind != "shared")
    throw InvalidArgument(fmt::format("--kind {} is unknown (lock, permit or shared)", request.kind));
  if (request.kind != "lock" && (advisory || request.scenario != "uncontended"))
    throw InvalidArgument("--kind permit|shared measures groups: --scenario uncontended in table mode");
  static const std::vector<std::string> kScenarios{"uncontended", "handoff", "renew", "reap",  "fence",
                                                   "scale",       "async",   "work",  "names", "all"};
  if (std::find(kScenarios.begin(), kScenarios.end(), request.scenario) == kScenarios.end())
    throw InvalidArgument(fmt::format(
        "--scenario {} is unknown (uncontended, handoff, renew, reap, fence, scale, async, work, names, all)",
        request.scenario));
  store->check_schema();
  Bench bench(request, store);
  std::vector<Result> results;
  auto wants = [&](std::string_view scenario) { return request.scenario == "all" || request.scenario == scenario; };
  if (wants("uncontended")) {
    if (request.threads != 0) {
      results.push_back(bench.uncontended(request.threads));
    } else {
      results.push_back(bench.uncontended(1));
      results.push_back(bench.uncontended(16));
    }
  }
  if (wants("handoff")) results.push_back(bench.handoff(request.threads != 0 ? request.threads : 4));
  if (wants("renew") && !advisory) {
    if (request.renew_locks != 0) {
      results.push_back(bench.renew(request.renew_locks));
    } else {
      results.push_back(bench.renew(1000));
      results.push_back(bench.renew(10000));
    }
  }
  if (wants("reap") && !advisory) results.push_back(bench.reap());
  // One thread unless asked for by name: the cost of a transaction, not SQLite's write lock queue.
  if (wants("fence") && !advisory)
    results.push_back(bench.fence(request.scenario == "fence" && request.threads != 0 ? request.threads : 1));
  if (request.scenario == "scale")  // minutes long: only when asked for by name
    for (auto& result : bench.scale()) results.push_back(std::move(result));
  if (request.scenario == "work" || request.scenario == "names")  // only when asked for by name
    for (auto& result : bench.workload()) results.push_back(std::move(result));
  if (request.scenario == "async") {  // only when asked for by name
#if DBLOCK_CLI_WITH_ASIO
    // --threads: the waiting tasks (default 10,000, on a name per 100). The synchronous API meets
    // the same load scaled down to what a thread per waiter allows (at most 200 threads).
    auto mode = advisory ? LockMode::advisory : LockMode::table;
    auto waiters = request.threads != 0 ? request.threads : 10'000;
    auto names = std::max<std::size_t>(1, waiters / 100);
    results.push_back(bench_waiters(store, mode, waiters, names, true));
    auto scaled = std::min<std::size_t>(waiters, 200);
    auto scaled_names = std::max<std::size_t>(1, scaled / 100);
    results.push_back(bench_waiters(store, mode, scaled, scaled_names, true));
    results.push_back(bench_waiters(store, mode, scaled, scaled_names, false));
#else
    throw InvalidArgument("--scenario async: this dblock was built without asio");
#endif
  }
  if (request.json)
    print_json(results, store->dialect());
  else
    print_table(results, store->dialect());
  return 0;
}

}  // namespace dblock::cli
