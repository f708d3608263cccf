#include "dblock/bench_report.hpp"

#include <fmt/format.h>

namespace dblock::cli {

void print_table(const std::vector<Result>& results, std::string_view dialect) {
  fmt::print("dblock bench on {} (each figure next to its floor from the same run)\n\n", dialect);
  fmt::print("{:<12} {:>7} {:>14} {:>9} {:>9} {:>14} {:>9} {:>9} {:>7}\n", "scenario", "threads", "ops/s", "p50 ms",
             "p99 ms", "floor ops/s", "floor p50", "floor p99", "ratio");
  for (auto& r : results) {
    if (r.floor)
      fmt::print("{:<12} {:>7} {:>14.0f} {:>9.3f} {:>9.3f} {:>14.0f} {:>9.3f} {:>9.3f} {:>7.3f}\n", r.scenario,
                 r.threads, r.dblock.ops_per_sec, r.dblock.p50_ms, r.dblock.p99_ms, r.floor->ops_per_sec,
                 r.floor->p50_ms, r.floor->p99_ms, r.ratio.value_or(0));
    else
      fmt::print("{:<12} {:>7} {:>14.0f} {:>9.3f} {:>9.3f} {:>14} {:>9} {:>9} {:>7}\n", r.scenario, r.threads,
                 r.dblock.ops_per_sec, r.dblock.p50_ms, r.dblock.p99_ms, "-", "-", "-", "-");
    for (auto& [key, value] : r.extra) fmt::print("{:<12}   {} = {}\n", "", key, value);
    if (r.floor) fmt::print("{:<12}   floor = {}\n", "", r.floor_name);
  }
}

void print_json(const std::vector<Result>& results, std::string_view dialect) {
  fmt::print("[");
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    fmt::print(
        "{}\n  {{\"scenario\":\"{}\",\"dialect\":\"{}\",\"mode\":\"{}\",\"threads\":{},\"ops_per_sec\":{:.1f},"
        "\"p50_ms\":{:.4f},\"p99_ms\":{:.4f}",
        i == 0 ? "" : ",", r.scenario, dialect, r.mode, r.threads, r.dblock.ops_per_sec, r.dblock.p50_ms,
        r.dblock.p99_ms);
    if (r.floor)
      fmt::print(
          ",\"floor_ops_per_sec\":{:.1f},\"floor_p50_ms\":{:.4f},\"floor_p99_ms\":{:.4f},\"ratio\":{:.4f},"
          "\"floor\":\"{}\"",
          r.floor->ops_per_sec, r.floor->p50_ms, r.floor->p99_ms, r.ratio.value_or(0), r.floor_name);
    else
      fmt::print(",\"floor_ops_per_sec\":null,\"ratio\":null");
    for (auto& [key, value] : r.extra) fmt::print(",\"{}\":\"{}\"", key, value);
    fmt::print("}}");
  }
  fmt::print("\n]\n");
}

}  // namespace dblock::cli
