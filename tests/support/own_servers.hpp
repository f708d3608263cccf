#pragma once
// Servers of a test's own, started by tools/testdb.sh in a temp dir and stopped (and removed) on
// scope exit: for tests that crash, partition or fail over their servers, so that the shared ones
// other tests run against are not disturbed. Needs DBLOCK_TESTDB_SCRIPT (the script's path).

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"

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

  /// Runs `testdb.sh <command> DIR <arguments>` (split at spaces) and returns what it printed
  /// (stderr included). A cluster's start may take minutes: bounded below the suites' ctest timeouts.
  std::string run(const std::string& command, const std::string& arguments = {}) const {
    std::vector<std::string> argv{DBLOCK_TESTDB_SCRIPT, command, dir_};
    std::istringstream words(arguments);
    for (std::string word; words >> word;) argv.push_back(word);
    return run_command(std::move(argv), {}, std::chrono::seconds(200)).output;
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
