#pragma once
// A PgBouncer of a test's own in front of the test PostgreSQL, in the pool mode and with the
// settings the test asks for (tools/testdb.sh's shared one runs in transaction mode with
// PgBouncer's defaults, and other tests use it): on a free loopback port, as user postgres
// (PgBouncer refuses to run as root), in the foreground as this process's child, which is ended
// (SIGTERM: PgBouncer's immediate shutdown, then SIGKILL if it lingers) and reaped, and its
// directory removed, when the object goes. The child also gets SIGTERM if this process dies first.

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "support/processes.hpp"
#include "support/servers.hpp"

namespace dblock::test {

class OwnPgBouncer {
 public:
  /// The installed pgbouncer program, or "" when there is none.
  static std::string program() {
    for (const char* path : {"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer"})
      if (access(path, X_OK) == 0) return path;
    return {};
  }

  /// In front of the PostgreSQL of `server_dsn` (postgresql://user:password@127.0.0.1:PORT/db, as
  /// tools/testdb.sh prints it), with `pool_mode` and the further `settings` lines of its
  /// [pgbouncer] section. Clients log in without a password (auth_type = trust); PgBouncer logs in
  /// to the server with the DSN's. started() says whether it listens; log() what it printed.
  OwnPgBouncer(const std::string& server_dsn, const std::string& pool_mode, const std::string& settings) {
    parse(server_dsn);
    char pattern[] = "/tmp/dbpgb.XXXXXX";
    if (mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const passwd* postgres = getpwnam("postgres");
    if (postgres == nullptr) throw std::runtime_error("no user postgres to run PgBouncer as");
    uid_ = postgres->pw_uid;
    gid_ = postgres->pw_gid;
    std::ofstream(dir_ + "/users.txt") << fmt::format("\"{}\" \"\"\n", user_);
    if (chown(dir_.c_str(), uid_, gid_) != 0 || chown((dir_ + "/users.txt").c_str(), uid_, gid_) != 0)
      throw std::runtime_error("cannot hand " + dir_ + " to user postgres");
    // A port free a moment ago may be taken before PgBouncer binds it: then another one.
    for (int attempt = 0; attempt < 5 && !started_; ++attempt) launch(free_port(), pool_mode, settings);
  }
  ~OwnPgBouncer() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  OwnPgBouncer(const OwnPgBouncer&) = delete;
  OwnPgBouncer& operator=(const OwnPgBouncer&) = delete;

  [[nodiscard]] bool started() const noexcept { return started_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// The DSN of the database through this PgBouncer (no password: trust).
  [[nodiscard]] std::string dsn() const { return fmt::format("postgresql://{}@127.0.0.1:{}/{}", user_, port_, db_); }
  /// What it printed (its log goes to its standard error).
  [[nodiscard]] std::string log() const { return read_text(dir_ + "/pgbouncer.log"); }

 private:
  void parse(const std::string& dsn) {
    auto rest = dsn.substr(dsn.find("://") + 3);
    auto at = rest.rfind('@');
    auto slash = rest.find('/', at);
    if (at == std::string::npos || slash == std::string::npos) throw std::runtime_error("unexpected DSN " + dsn);
    auto credentials = rest.substr(0, at);
    auto colon = credentials.find(':');
    user_ = credentials.substr(0, colon);
    password_ = colon == std::string::npos ? "" : credentials.substr(colon + 1);
    server_port_ = dsn_port(dsn);
    db_ = rest.substr(slash + 1, rest.find('?', slash) - slash - 1);
  }

  void launch(std::uint16_t port, const std::string& pool_mode, const std::string& settings) {
    port_ = port;
    auto ini = dir_ + "/pgbouncer.ini";
    std::ofstream(ini) << fmt::format(
        "[databases]\n{0} = host=127.0.0.1 port={1} dbname={0} user={2} password={3}\n"
        "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {4}\nunix_socket_dir =\nauth_type = trust\n"
        "auth_file = {5}/users.txt\npool_mode = {6}\ndefault_pool_size = 20\nmax_client_conn = 200\n{7}\n",
        db_, server_port_, user_, password_, port, dir_, pool_mode, settings);
    int log = open((dir_ + "/pgbouncer.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log < 0 || chown(ini.c_str(), uid_, gid_) != 0) throw std::runtime_error("cannot write in " + dir_);
    auto program_path = program();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      closefrom(3);  // none of the test's connections
      if (setgroups(0, nullptr) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(126);
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // after setuid, which clears it
      execl(program_path.c_str(), "pgbouncer", ini.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(log);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // gone: the port was taken, or a bad setting
        pid_ = -1;
        return;
      }
      if (listens()) {
        started_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
  }

  [[nodiscard]] bool listens() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port_);
    bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    return connected;
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    started_ = false;
  }

  std::string dir_, user_, password_, db_;
  std::uint16_t server_port_ = 0, port_ = 0;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  pid_t pid_ = -1;
  bool started_ = false;
};

}  // namespace dblock::test
