// The embedded default store on a host with several users: root's locks and tokens are out of an
// unprivileged user's reach, a store others can write is refused with the fix, and the previous
// release's ./dblock.db is not silently bypassed. The unprivileged user is `nobody`, reached with
// setpriv (util-linux); every store lives in a temporary directory, never in /var/lib/dblock.

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/processes.hpp"
#include "support/servers.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using Outcome = dblock::test::CommandOutcome;

struct As {
  std::optional<passwd> user;  // empty: root
  std::vector<std::string> env;
  std::string cwd;
};

class MultiUser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      // tools/test.sh runs as root with DBLOCK_REQUIRE_SERVERS=1: there a missing precondition fails.
      if (dblock::test::servers_required())
        FAIL() << "switching to another user needs root, and DBLOCK_REQUIRE_SERVERS=1";
      GTEST_SKIP() << "switching to another user needs root (CI runs as root)";
    }
    passwd* nobody = ::getpwnam("nobody");
    ASSERT_NE(nobody, nullptr) << "the host has no user nobody";
    nobody_ = *nobody;
    char pattern[] = "/tmp/dblock-multiuser.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    tmp_ = pattern;
    // nobody must reach the binary: the build tree may sit under a directory closed to others.
    fs::permissions(tmp_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    cli_ = tmp_ + "/dblock";
    fs::copy_file(DBLOCK_CLI_PATH, cli_);
    ::chmod(cli_.c_str(), 0755);
    nobody_home_ = tmp_ + "/home-nobody";
    fs::create_directory(nobody_home_);
    ASSERT_EQ(::chown(nobody_home_.c_str(), nobody_.pw_uid, nobody_.pw_gid), 0);
    ::chmod(nobody_home_.c_str(), 0700);
    root_state_ = tmp_ + "/root-state";  // created by the CLI
  }

  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }

  /// Starts `argv` with a clean environment (only PATH, HOME and `as.env`), as root or as
  /// nobody (no supplementary groups), stdout and stderr into a file of its own.
  dblock::test::ChildProcess start(std::vector<std::string> argv, const As& as) {
    std::vector<std::string> full;
    if (as.user) {
      full = {"/usr/bin/setpriv", fmt::format("--reuid={}", as.user->pw_uid),
              fmt::format("--regid={}", as.user->pw_gid), "--clear-groups"};
    }
    full.insert(full.end(),
                {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=" + (as.user ? nobody_home_ : tmp_ + "/home-root")});
    full.insert(full.end(), as.env.begin(), as.env.end());
    full.insert(full.end(), argv.begin(), argv.end());
    return dblock::test::ChildProcess(std::move(full), {.cwd = as.cwd});
  }

  static Outcome finish(dblock::test::ChildProcess& started) { return started.finish(); }

  Outcome dblock(std::vector<std::string> args, const As& as) {
    args.insert(args.begin(), cli_);
    auto started = start(std::move(args), as);
    return finish(started);
  }

  As root(std::string cwd = {}) const { return As{std::nullopt, {"DBLOCK_STATE_DIR=" + root_state_}, std::move(cwd)}; }
  As nobody(std::vector<std::string> env = {}) const { return As{nobody_, std::move(env), nobody_home_}; }

  /// `"key":value` of the lock named `name` in `dblock locks --json` output.
  static std::string field(const std::string& json, const std::string& name, const std::string& key) {
    auto at = json.find(fmt::format("\"name\":\"{}\"", name));
    if (at == std::string::npos) return {};
    at = json.find(fmt::format("\"{}\":", key), at);
    if (at == std::string::npos) return {};
    at += key.size() + 3;
    return json.substr(at, json.find_first_of(",}", at) - at);
  }

  static std::string mode_of(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return "missing";
    return fmt::format("{:04o}", st.st_mode & 07777);
  }

  passwd nobody_{};
  std::string tmp_, cli_, nobody_home_, root_state_;
};

TEST_F(MultiUser, AnUnprivilegedUserCannotBreakRootsLockNorReuseItsTokens) {
  auto holder = start({cli_, "run", "--name", "nightly", "--ttl", "30s", "--", "sleep", "30"}, root());
  std::string before;
  for (int i = 0; i < 500 && field(before, "nightly", "token").empty(); ++i) {
    before = dblock({"locks", "--json"}, root()).output;
    if (field(before, "nightly", "token").empty()) std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(field(before, "nightly", "token").empty()) << before;
  auto root_file = root_state_ + "/dblock.db";

  // What the previous release let any user do to root's store: break the lock, through the
  // default store or by naming the file.
  auto by_state_dir = dblock({"release", "--force", "nightly"}, nobody({"DBLOCK_STATE_DIR=" + root_state_}));
  EXPECT_NE(by_state_dir.exit_code, 0) << by_state_dir.output;
  EXPECT_NE(by_state_dir.output.find(root_file), std::string::npos) << by_state_dir.output;
  auto by_dsn = dblock({"--dsn", "sqlite://" + root_file, "release", "--force", "nightly"}, nobody());
  EXPECT_NE(by_dsn.exit_code, 0) << by_dsn.output;
  for (const auto& path : {root_state_, root_file, root_file + "-wal", root_file + "-shm", root_file + "-journal"}) {
    auto writable = start({"/bin/sh", "-c", fmt::format("test -w '{}'", path)}, nobody()).finish();
    EXPECT_NE(writable.exit_code, 0) << "nobody can write " << path << " (mode " << mode_of(path) << ")";
  }
  auto after = dblock({"locks", "--json"}, root()).output;
  EXPECT_EQ(field(after, "nightly", "owner"), field(before, "nightly", "owner")) << after;
  EXPECT_EQ(field(after, "nightly", "token"), field(before, "nightly", "token")) << after;

  // nobody's own default store: its own file under its home, which root's lock is not in.
  auto own_release = dblock({"release", "--force", "nightly"}, nobody());
  EXPECT_EQ(own_release.exit_code, 1) << own_release.output;
  auto own_run = dblock({"run", "--name", "nightly", "--", "true"}, nobody());
  EXPECT_EQ(own_run.exit_code, 0) << own_run.output;
  auto own_dir = nobody_home_ + "/.local/state/dblock";
  auto listed = dblock({"locks"}, nobody());
  EXPECT_NE(listed.output.find("store: sqlite://" + own_dir + "/dblock.db"), std::string::npos) << listed.output;
  EXPECT_EQ(mode_of(own_dir), "0700");
  EXPECT_EQ(mode_of(own_dir + "/dblock.db"), "0600");
  struct stat st {};
  ASSERT_EQ(::stat((own_dir + "/dblock.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody_.pw_uid);

  ::kill(holder.pid(), SIGTERM);
  finish(holder);
  auto next = dblock({"run", "--name", "nightly", "--", "sh", "-c", "echo token=$DBLOCK_FENCING_TOKEN"}, root());
  ASSERT_EQ(next.exit_code, 0) << next.output;
  auto token = next.output.substr(next.output.find("token=") + 6);
  EXPECT_GT(std::stoll(token), std::stoll(field(before, "nightly", "token"))) << "a next grant never reuses a token";
  EXPECT_EQ(mode_of(root_state_), "0755");
  EXPECT_EQ(mode_of(root_file), "0600");
}

TEST_F(MultiUser, AStoreOtherUsersCanWriteIsRefusedWithTheFix) {
  // As the previous release left it: a sticky world-writable directory, a file mode 0666.
  fs::create_directory(root_state_);
  ::chmod(root_state_.c_str(), 01777);
  auto file = root_state_ + "/dblock.db";
  ::close(::open(file.c_str(), O_WRONLY | O_CREAT, 0600));
  ::chmod(file.c_str(), 0666);
  auto refused = dblock({"locks"}, root());
  EXPECT_EQ(refused.exit_code, 77) << refused.output;
  for (const auto& expected :
       {root_state_ + " is writable by every user (mode 1777)", file + " is writable by every user (mode 0666)",
        "chmod o-w " + root_state_, "chmod o-w " + file})
    EXPECT_NE(refused.output.find(expected), std::string::npos) << expected << "\n" << refused.output;
  EXPECT_EQ(mode_of(file), "0666") << "nothing is changed behind the operator's back";

  ::chmod(root_state_.c_str(), 0755);
  ::chmod(file.c_str(), 0600);
  ::close(::open((file + "-shm").c_str(), O_WRONLY | O_CREAT, 0600));
  ::chmod((file + "-shm").c_str(), 0666);  // SQLite gives -shm the database's old mode
  auto sibling = dblock({"locks"}, root());
  EXPECT_EQ(sibling.exit_code, 77) << sibling.output;
  EXPECT_NE(sibling.output.find("chmod o-w " + file + "-shm"), std::string::npos) << sibling.output;
  fs::remove(file + "-shm");

  ASSERT_EQ(::chown(file.c_str(), nobody_.pw_uid, nobody_.pw_gid), 0);
  auto owned = dblock({"locks"}, root());
  EXPECT_EQ(owned.exit_code, 77) << owned.output;
  EXPECT_NE(owned.output.find("chown root " + file), std::string::npos) << owned.output;
  ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);

  auto fixed = dblock({"run", "--name", "fixed", "--", "true"}, root());
  EXPECT_EQ(fixed.exit_code, 0) << fixed.output;
  for (const auto& entry : fs::directory_iterator(root_state_))
    EXPECT_EQ(entry.status().permissions() & (fs::perms::group_write | fs::perms::others_write), fs::perms::none)
        << entry.path() << " " << mode_of(entry.path());
}

TEST_F(MultiUser, APreviousReleasesStoreInTheWorkingDirectoryIsNotBypassed) {
  auto work = tmp_ + "/work";
  fs::create_directory(work);
  // The previous release's default: sqlite://dblock.db in the working directory.
  ASSERT_EQ(dblock({"--dsn", "sqlite://dblock.db", "migrate", "up"}, root(work)).exit_code, 0);
  for (std::vector<std::string> args : {std::vector<std::string>{"run", "--name", "job", "--", "true"},
                                        {"locks"},
                                        {"release", "--force", "job"},
                                        {"migrate", "status"}}) {
    auto refused = dblock(args, root(work));
    EXPECT_EQ(refused.exit_code, 78) << args[0] << "\n" << refused.output;
    for (const auto& expected : {"--dsn sqlite://" + work + "/dblock.db", "mv " + work + "/dblock.db"})
      EXPECT_NE(refused.output.find(expected), std::string::npos) << expected << "\n" << refused.output;
  }
  // Naming a store is the override, the old file or the new one.
  EXPECT_EQ(dblock({"--dsn", "sqlite://dblock.db", "run", "--name", "job", "--", "true"}, root(work)).exit_code, 0);
  auto with_env = root(work);
  with_env.env.push_back("DBLOCK_DSN=sqlite://" + root_state_ + "/dblock.db");
  EXPECT_EQ(dblock({"run", "--name", "job", "--", "true"}, with_env).exit_code, 0);
  // The store itself as the working directory, and another program's SQLite file, are no reason.
  EXPECT_EQ(dblock({"locks"}, root(root_state_)).exit_code, 0);
  auto other = tmp_ + "/other";
  fs::create_directory(other);
  ASSERT_EQ(dblock({"--dsn", "sqlite://dblock.db?prefix=app_", "migrate", "up"}, root(other)).exit_code, 0);
  auto unrelated = dblock({"run", "--name", "job", "--", "true"}, root(other));
  EXPECT_EQ(unrelated.exit_code, 0) << unrelated.output;
}

}  // namespace
