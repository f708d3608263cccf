#pragma once
// How `dblock bench` prints its results: a table for people, JSON for scripts.

#include <string_view>
#include <vector>

#include "dblock/bench_harness.hpp"

namespace dblock::cli {

void print_table(const std::vector<Result>& results, std::string_view dialect);
void print_json(const std::vector<Result>& results, std::string_view dialect);

}  // namespace dblock::cli
