#include "dblock/server_cpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dblock::cli {

namespace {

std::vector<std::string> process_names(std::string_view dialect) {
  if (dialect == "postgresql") return {"postgres"};
  if (dialect == "mysql") return {"mariadbd", "mysqld"};
  return {};
}

/// utime + stime by pid of the processes named `names`.
std::map<int, long long> ticks_of(const std::vector<std::string>& names) {
  std::map<int, long long> ticks;
  std::error_code error;
  for (auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    auto pid_text = entry.path().filename().string();
    if (pid_text.empty() || !std::all_of(pid_text.begin(), pid_text.end(), ::isdigit)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 > line.size()) continue;
    if (std::find(names.begin(), names.end(), line.substr(open + 1, close - open - 1)) == names.end()) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string skipped;
    for (int field = 3; field <= 13; ++field) fields >> skipped;  // state .. cmajflt (proc(5))
    long long user = 0, system = 0;
    if (fields >> user >> system) ticks[std::stoi(pid_text)] = user + system;
  }
  return ticks;
}

}  // namespace

std::optional<ServerCpu> server_cpu(std::string_view dialect) {
  auto names = process_names(dialect);
  if (names.empty()) return std::nullopt;
  auto ticks = ticks_of(names);
  if (ticks.empty()) return std::nullopt;
  return ServerCpu(dialect, std::move(ticks));
}

double ServerCpu::seconds_since() const {
  long long spent = 0;
  for (auto& [pid, now] : ticks_of(process_names(dialect_))) {
    auto before = ticks_.find(pid);
    spent += now - (before == ticks_.end() ? 0 : std::min(now, before->second));
  }
  return static_cast<double>(spent) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace dblock::cli
