#pragma once
// Servers of a test's own, started by tools/testdb.sh in a temp dir and stopped (and removed) on
// scope exit: for tests that crash, partition or fail over their servers, so that the shared ones
// other tests run against are not disturbed. Needs DBLOCK_TESTDB_SCRIPT (the script's path).

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "support/build_paths.hpp"

namespace dblock::test {

class OwnServers {
 public:
  /// Runs `testdb.sh <start> DIR <arguments>`, e.g. ("start-galera") or ("start-patroni", "async").
  explicit OwnServers(const std::string& start, const std::string& arguments = {}) {
    char pattern[] = "/tmp/dbo.XXXXXX";
    dir_ = mkdtemp(pattern);
    log_ = run(start, arguments);
  }
  ~OwnServers() { run("stop"); }
  OwnServers(const OwnServers&) = delete;
  OwnServers& operator=(const OwnServers&) = delete;

  /// Runs `testdb.sh <command> DIR <arguments>` and returns what it printed (stderr included).
  std::string run(const std::string& command, const std::string& arguments = {}) const {
    std::string line = std::string(DBLOCK_TESTDB_SCRIPT) + " " + command + " " + dir_ + " " + arguments + " 2>&1";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(line.c_str(), "r"), pclose);
    std::string output;
    char buffer[512];
    while (pipe && fgets(buffer, sizeof buffer, pipe.get()) != nullptr) output += buffer;
    return output;
  }
  /// The value the start printed for `variable` (export VARIABLE='...'), or empty.
  [[nodiscard]] std::string exported(const std::string& variable) const {
    auto at = log_.find(variable + "='");
    if (at == std::string::npos) return {};
    at += variable.size() + 2;
    return log_.substr(at, log_.find('\'', at) - at);
  }
  /// What the start printed: for a failure message.
  [[nodiscard]] const std::string& log() const noexcept { return log_; }

 private:
  std::string dir_;
  std::string log_;
};

}  // namespace dblock::test
