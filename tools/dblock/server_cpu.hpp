#pragma once
// The CPU time a database server on this host spends, for `dblock bench --scenario scale`: read
// from /proc by process name (postgres; mariadbd or mysqld), process by process.

#include <map>
#include <memory>
#include <optional>
#include <string_view>

namespace dblock::cli {

class ServerCpu {
 public:
  /// Empty for SQLite (it runs in this process) and when no such process is visible here (a
  /// server on another host, or another container).
  friend std::optional<ServerCpu> server_cpu(std::string_view dialect);
  /// CPU seconds (user + system) the server's processes spent since this sample: per process,
  /// so a backend that exits meanwhile takes away nothing; a new one counts from its start.
  /// The last moments of a process that exited in between are not counted.
  [[nodiscard]] double seconds_since() const;

 private:
  ServerCpu(std::string_view dialect, std::map<int, long long> ticks) : dialect_(dialect), ticks_(std::move(ticks)) {}
  std::string_view dialect_;
  std::map<int, long long> ticks_;  // by pid: utime + stime in clock ticks
};

[[nodiscard]] std::optional<ServerCpu> server_cpu(std::string_view dialect);

}  // namespace dblock::cli
