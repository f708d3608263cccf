#pragma once
// A database suite that also runs the CLI on its installation, with a scratch directory of the
// test's own for the files its commands write.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/installation.hpp"

namespace dblock::test {

class CliCaseTest : public InstalledCaseTest {
 protected:
  void SetUp() override {
    InstalledCaseTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no server: the base skipped or failed already
    dir_ = std::filesystem::temp_directory_path() / ("dblock-cli-case-" + installation_->prefix());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  /// `dblock --dsn <this installation> args...` started in the background, its output into a file of its own.
  [[nodiscard]] ChildProcess start_cli(std::vector<std::string> args) const {
    args.insert(args.begin(), {DBLOCK_CLI_PATH, "--dsn", installation_->dsn()});
    return ChildProcess(std::move(args));
  }
  /// The same, waited for.
  [[nodiscard]] CommandOutcome cli(std::vector<std::string> args) const { return start_cli(std::move(args)).finish(); }

  std::filesystem::path dir_;  // empty when the set-up did not get that far
};

}  // namespace dblock::test
