// Network faults between the library and its server (PostgreSQL, MariaDB), through a loopback TCP proxy that cuts every
// connection and refuses new ones while "down": calls fail with ConnectionError within the
// configured timeouts instead of hanging, a grant is only ever reported when the row really is
// ours, the pool recovers by itself, and nothing stays renewed after the chaos.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <dblock/dblock.hpp>
#if DBLOCK_TEST_WITH_POSTGRES
#include <libpq-fe.h>
#include <dblock/postgres.hpp>
#endif

#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/own_pgbouncer.hpp"
#include "support/servers.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;

namespace {

class Faults : public ::testing::TestWithParam<dblock::test::BackendCase> {};

TEST_P(Faults, ConnectionsCutMidStatementNeverFakeAGrantNorHang) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  const auto& prefix = installation.prefix();
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto store = dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=4"),
                                   {.connect_timeout = 2s});
  dblock::LockManager locks(store, {.default_ttl = 900ms});

  std::atomic<bool> chaos{true};
  std::atomic<int> grants{0}, verified{0}, refused{0}, failures{0}, unexpected{0}, slow{0};
  std::jthread chaos_monkey([&] {
    std::mt19937 random(7);
    auto until = std::chrono::steady_clock::now() + 4s;
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + random() % 60));
      proxy.set_down(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + random() % 60));
      proxy.set_down(false);
    }
    chaos = false;
  });
  std::vector<std::jthread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      // Its own direct connection: a driver connection serves one thread at a time.
      auto admin =
          dblock::test::make_admin(GetParam().dialect, server_dsn, dblock::test::default_schema(GetParam()), prefix);
      std::mt19937 random(static_cast<unsigned>(t));
      while (chaos) {
        auto name = "fault/" + std::to_string(random() % 5);
        auto started = std::chrono::steady_clock::now();
        try {
          auto lock = locks.try_acquire(name);
          if (std::chrono::steady_clock::now() - started > 10s) ++slow;
          if (!lock) {
            ++refused;
            continue;
          }
          ++grants;
          // Read the row through a direct connection: a reported grant must be real.
          auto owner =
              admin->query("SELECT owner || ' ' || token FROM \"" + prefix + "locks\" WHERE name = '" + name + "'");
          if (std::chrono::steady_clock::now() - started < 300ms) {
            EXPECT_EQ(owner, std::vector<std::string>{locks.owner_id() + " " + std::to_string(lock->token())})
                << "a grant was reported that the database does not show";
            ++verified;
          }
          lock->release();
        } catch (const dblock::ConnectionError&) {
          ++failures;  // the documented answer while the network is down
        } catch (const dblock::LockLost&) {
          ++failures;  // the lease lapsed while renewals could not get through
        } catch (const std::exception& e) {
          ++unexpected;
          ADD_FAILURE() << e.what();
        }
        if (std::chrono::steady_clock::now() - started > 10s) ++slow;
      }
    });
  }
  workers.clear();
  std::cout << "grants " << grants << " (verified " << verified << "), busy " << refused << ", connection failures "
            << failures << "\n";
  EXPECT_EQ(slow, 0) << "a call hung beyond the configured timeouts";
  EXPECT_EQ(unexpected, 0);
  EXPECT_GT(failures, 0) << "the chaos must have hit some calls";
  EXPECT_GT(verified, 0) << "and some grants must have come through and been checked";

  // The pool replaced its broken sessions: every slot works again.
  std::vector<dblock::Lock> held;
  for (int i = 0; i < 6; ++i) {
    std::optional<dblock::Lock> lock;
    for (int attempt = 0; attempt < 3 && !lock; ++attempt) {
      try {
        lock = locks.try_acquire("after-chaos/" + std::to_string(i));
      } catch (const dblock::ConnectionError&) {  // a session broken during the chaos, now replaced
      }
    }
    ASSERT_TRUE(lock) << "the store did not recover";
    held.push_back(std::move(*lock));
  }
  held.clear();
  // Grants whose reply was lost are never renewed: they lapse with their lease.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (store->census().held > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(store->census().held, 0) << "a lock stayed held after the chaos";
}

TEST_P(Faults, AStalledConnectionFailsWithinTheStatementTimeout) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn, {.keep_store = false});
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto store = dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=2"),
                                   {.connect_timeout = 2s, .statement_timeout = 1s});
  dblock::LockManager locks(store, {.default_ttl = 3s});
  locks.try_acquire("warm-up")->release();

  proxy.set_stalled(true);  // the server's replies stop arriving; the sockets stay open
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW((void)locks.try_acquire("stalled"), dblock::ConnectionError);
  auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 1s);
  EXPECT_LT(waited, 6s) << "the call must give up after the statement timeout (and one resolution read)";

  proxy.set_stalled(false);
  std::optional<dblock::Lock> lock;
  for (int attempt = 0; attempt < 3 && !lock; ++attempt) {
    try {
      lock = locks.try_acquire("after-stall");
    } catch (const dblock::ConnectionError&) {  // a session the stall left behind, now dropped
    }
  }
  EXPECT_TRUE(lock) << "the abandoned session was replaced";
}

// A reader whose renewals fail while its group lives (another reader holds the name) is lost, its
// membership lapses and the reaper deletes it; its owner then takes the membership afresh. The lost
// guard's release must not delete the new membership: a writer would be let in beside the reader who
// holds it. The new row has a token of its own (schema 13), so the release misses it; when a reader's
// token was its group's epoch, it carried the same one.
TEST_P(Faults, ALostReadersReleaseLeavesTheMembershipItsOwnerTookAfresh) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  dblock::test::Installation installation(GetParam(), server_dsn);
  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn));
  auto through_proxy =
      dblock::Store::open(installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()), "pool=2"),
                          {.connect_timeout = 2s, .statement_timeout = 1s});
  dblock::LockManager owner(through_proxy, {.default_ttl = 900ms});
  dblock::LockManager other(installation.store(), {.default_ttl = 60s});
  dblock::LockManager writer(installation.store());
  const dblock::LockOptions reader{.shared = true};
  auto memberships_of_owner = [&] {
    std::vector<dblock::LockInfo> rows;
    for (auto& row : installation.store()->locks())
      if (row.name == "lapsed-reader" && row.owner == owner.owner_id()) rows.push_back(row);
    return rows;
  };
  auto keeper = other.try_acquire("lapsed-reader", reader);
  ASSERT_TRUE(keeper) << "the other reader keeps the group alive";
  auto lapsed = owner.try_acquire("lapsed-reader", reader);
  ASSERT_TRUE(lapsed);
  EXPECT_NE(lapsed->token(), keeper->token()) << "every reader has a token of its own";

  proxy.set_down(true);  // the owner's renewals fail from now on
  ASSERT_TRUE(dblock::test::eventually([&] { return lapsed->lost(); }, 5s)) << "its local deadline passes";
  ASSERT_TRUE(dblock::test::eventually([&] {
    auto rows = memberships_of_owner();
    // Below zero: "0 ms left" may still be a few microseconds before the expiry the reaper checks.
    return rows.size() == 1 && rows[0].remaining.count() < 0;
  })) << "its membership lapses";
  dblock::Reaper reaper(installation.store());
  EXPECT_GE(reaper.run_once().rows, 1u);
  ASSERT_TRUE(memberships_of_owner().empty()) << "the reaper deleted the lapsed membership";
  proxy.set_down(false);

  std::optional<dblock::Lock> afresh;
  for (int attempt = 0; attempt < 3 && !afresh; ++attempt) {
    try {
      afresh = owner.try_acquire("lapsed-reader", reader);
    } catch (const dblock::ConnectionError&) {  // a session the cut left behind, now dropped
    }
  }
  ASSERT_TRUE(afresh) << "the owner takes the membership afresh";
  EXPECT_NE(afresh->token(), lapsed->token()) << "a membership taken afresh after it was reaped: a new token";
  EXPECT_THROW(lapsed->release(), dblock::LockLost);
  auto rows = memberships_of_owner();
  ASSERT_EQ(rows.size(), 1u) << "the lost guard's release deleted the membership taken afresh";
  EXPECT_EQ(rows[0].count, 1);
  keeper->release();
  EXPECT_FALSE(writer.try_acquire("lapsed-reader")) << "a writer beside a reader who believes";
  EXPECT_FALSE(afresh->lost());
  afresh->release();
  EXPECT_TRUE(writer.try_acquire("lapsed-reader")) << "the name is free once the reader gives it back";
}

// A holder cut off from the server: its packets dropped on loopback both ways (iptables), so the
// server's end of its connections stays open and idle, as behind a real partition (a proxy that
// stops forwarding keeps both ends alive and cannot show this). Another process must be granted
// the name within the holder's lease plus the documented margin (doc/guarantees.md, "Cut"):
// PostgreSQL's server closes a session silent for 5 s (tcp_keepalives_*, tcp_user_timeout, set
// per session at connect) and checks once a second; table mode's lease ends by itself, also
// through PgBouncer and on Galera (the contender on another node). Behind PgBouncer the holder's
// connection ends at PgBouncer, which keeps its server connection alive: a session pooler's server
// session, and so its advisory locks, go only once PgBouncer drops the client, which its own
// client-side keepalives bound (CutSessionPooler below).
constexpr auto kCutTtl = 3s;
constexpr auto kCutMargin = 6s;
constexpr auto kCutSlack = 3s;  // a loaded machine; still far below the two hours of TCP's defaults
/// MariaDB has no per-session keepalive: a GET_LOCK session pinned by an owner is told to end once
/// silent for wait_timeout = the check interval (TTL/3 here) + TTL + 2 s, rounded up to whole
/// seconds; so the margin past the lease is the check interval + 3 s (doc/guarantees.md, "Cut").
/// Table mode's lease ends by itself on either server.
std::chrono::seconds cut_margin(const dblock::test::BackendCase& backend) {
  if (std::string_view(backend.dialect) == "mysql" && backend.mode == dblock::LockMode::advisory)
    return std::chrono::duration_cast<std::chrono::seconds>(kCutTtl / 3) + 3s;
  return kCutMargin;
}

/// Drops every packet from and to the given local ports of loopback connections, until destroyed;
/// its rules carry a comment of this process's own, which the destructor deletes all of.
class LoopbackCut {
 public:
  explicit LoopbackCut(const std::vector<std::uint16_t>& ports) {
    for (auto port : ports)
      for (const char* side : {"--sport", "--dport"})
        added_ = run(fmt::format("iptables -w -I INPUT -s 127.0.0.0/8 -p tcp {} {} -m comment --comment {} -j DROP",
                                 side, port, comment())) &&
                 added_;
  }
  ~LoopbackCut() { remove_all(); }
  LoopbackCut(const LoopbackCut&) = delete;
  LoopbackCut& operator=(const LoopbackCut&) = delete;
  [[nodiscard]] bool added() const noexcept { return added_; }

  static bool available() { return geteuid() == 0 && run("iptables -w -S INPUT > /dev/null 2>&1"); }
  static void remove_all() {
    run(
        fmt::format("iptables -w -S INPUT | grep -F -- '--comment {} ' | sed 's/^-A /-D /' | "
                    "while read -r rule; do iptables -w $rule; done",
                    comment()));
  }

 private:
  static std::string comment() { return fmt::format("dblock-cut-test-{}", getpid()); }
  static bool run(const std::string& command) { return std::system(command.c_str()) == 0; }
  bool added_ = true;
};

/// The local ports of `pid`'s established connections to loopback port `server_port`.
std::vector<std::uint16_t> local_ports_of(pid_t pid, std::uint16_t server_port) {
  std::vector<std::uint16_t> ports;
  auto command = fmt::format("ss -tnpH state established '( dport = :{} )'", server_port);
  std::unique_ptr<FILE, int (*)(FILE*)> out(popen(command.c_str(), "r"), pclose);
  if (!out) return ports;
  std::array<char, 1024> line{};
  auto needle = fmt::format("pid={},", pid);
  while (fgets(line.data(), static_cast<int>(line.size()), out.get()) != nullptr) {
    std::istringstream words(line.data());
    std::string receive_queue, send_queue, local;
    words >> receive_queue >> send_queue >> local;
    if (std::string_view(line.data()).find(needle) == std::string_view::npos) continue;
    ports.push_back(static_cast<std::uint16_t>(std::stoi(local.substr(local.rfind(':') + 1))));
  }
  return ports;
}

/// A `dblock run` holding `name` with a sleeping command, in a process group of its own; killed
/// when destroyed.
class CutHolder {
 public:
  CutHolder(const std::string& dsn, const std::string& name, dblock::LockMode mode)
      : marker_(fmt::format("/tmp/dblock-cut-{}-{}", getpid(), std::hash<std::string>{}(name))) {
    std::remove(marker_.c_str());
    auto ttl = fmt::format("{}ms", std::chrono::milliseconds(kCutTtl).count());
    auto script = fmt::format("echo held > {}; exec sleep 600", marker_);
    // A session of its own, and none of this process's descriptors (a driver may open its
    // connections without O_CLOEXEC): only the holder's own connections get cut.
    holder_.emplace(
        std::vector<std::string>{DBLOCK_CLI_PATH, "--dsn", dsn, "--log-level", "off", "run", "--name", name, "--ttl",
                                 ttl, "--wait", "20s", "--mode",
                                 mode == dblock::LockMode::advisory ? "advisory" : "table", "--", "sh", "-c", script},
        dblock::test::ProgramOptions{.new_session = true});
  }
  ~CutHolder() {
    holder_.reset();  // its group killed
    std::remove(marker_.c_str());
  }
  CutHolder(const CutHolder&) = delete;
  CutHolder& operator=(const CutHolder&) = delete;
  [[nodiscard]] pid_t pid() const noexcept { return holder_->pid(); }
  [[nodiscard]] bool holds() const { return std::ifstream(marker_).good(); }

 private:
  std::string marker_;
  std::optional<dblock::test::ChildProcess> holder_;
};

/// Polls `contender` for `name` until granted or `limit` passes; the time it took, or nullopt.
std::optional<std::chrono::milliseconds> takeover_time(dblock::LockManager& contender, const std::string& name,
                                                       std::chrono::milliseconds limit) {
  auto cut_at = std::chrono::steady_clock::now();
  std::optional<std::chrono::milliseconds> took;
  dblock::test::eventually(
      [&] {
        auto lock = contender.try_acquire(name);
        if (!lock) return false;
        took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut_at);
        lock->release();
        return true;
      },
      limit);
  return took;
}

/// A `dblock run` holding a name of its own on `holder_dsn` is cut off from loopback port `port`
/// (its end of every connection it has there); prints how long until `contender` is granted the
/// name, and fails unless that is within `bound`.
void expect_taken_over_after_cut(const std::string& label, const std::string& holder_dsn, std::uint16_t port,
                                 dblock::LockManager& contender, dblock::LockMode mode, std::chrono::seconds bound) {
  const std::string name = fmt::format("cut/{}/{}", label, getpid());
  CutHolder holder(holder_dsn, name, mode);
  ASSERT_TRUE(dblock::test::eventually([&] { return holder.holds(); }, 30s)) << "the holder never got the lock";
  auto ports = local_ports_of(holder.pid(), port);
  ASSERT_FALSE(ports.empty()) << "the holder has no connection to port " << port;
  ASSERT_FALSE(contender.try_acquire(name)) << "the holder holds the name";

  LoopbackCut cut(ports);
  ASSERT_TRUE(cut.added());
  auto took = takeover_time(contender, name, bound);
  std::cout << label << ": " << ports.size() << " connection(s) of the holder cut; another process was "
            << (took ? fmt::format("granted the name {} ms after the cut", took->count())
                     : fmt::format("not granted the name within {} s", bound.count()))
            << "\n";
  ASSERT_TRUE(took) << "a cut holder kept the name past its lease plus the margin";
  EXPECT_LE(*took, bound);
}

class Cut : public ::testing::TestWithParam<dblock::test::BackendCase> {};

// Also through the shared PgBouncer (tools/testdb.sh: pool_mode = transaction; the holder's
// connections to PgBouncer are cut, PgBouncer's to the server stay) and on Galera (the holder on
// node 1 is cut off from it, the contender asks node 2): table mode's lease ends by itself there too.
TEST_P(Cut, AHolderCutOffFromTheServerBlocksTheNameOnlyUntilItsLeaseEndsPlusTheMargin) {
  std::string server_dsn;
  DBLOCK_REQUIRE_BACKEND_DSN(server_dsn, GetParam());
  ASSERT_TRUE(LoopbackCut::available()) << "cutting a connection needs root and iptables (tools/deps.sh installs it)";
  dblock::test::Installation installation(GetParam(), dblock::test::node_dsns(GetParam(), server_dsn));
  auto stores = installation.stores_on_nodes();
  dblock::LockManager contender(stores.size() > 1 ? stores[1] : stores[0],
                                {.mode = GetParam().mode, .default_ttl = kCutTtl});
  expect_taken_over_after_cut(GetParam().label, installation.dsn(), dblock::test::dsn_port(server_dsn), contender,
                              GetParam().mode, kCutTtl + cut_margin(GetParam()) + kCutSlack);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, Cut,
    ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory,
                                             dblock::test::kMysqlTable, dblock::test::kMysqlAdvisory,
                                             dblock::test::kPgBouncerTable, dblock::test::kGaleraTable})),
    [](const auto& info) { return std::string(info.param.label); });

#if DBLOCK_TEST_WITH_POSTGRES
/// PgBouncer's client side bounded as dblock bounds PostgreSQL's server side (pg_connection.hpp,
/// kCut*): a client silent for 5 s is dropped (doc/configuration.md, "Cut connections behind PgBouncer").
constexpr const char* kPoolerCutSettings =
    "tcp_keepalive = 1\ntcp_keepidle = 2\ntcp_keepintvl = 1\ntcp_keepcnt = 3\ntcp_user_timeout = 5000";

const dblock::test::BackendCase kSessionPoolerTable{"pgbouncer_session_table", "postgresql",
                                                    "DBLOCK_TEST_PG_DSN",      dblock::LockMode::table,
                                                    "pool_mode=session",       "DBLOCK_TEST_PG_DSN"};
const dblock::test::BackendCase kSessionPoolerAdvisory{"pgbouncer_session_advisory", "postgresql",
                                                       "DBLOCK_TEST_PG_DSN",         dblock::LockMode::advisory,
                                                       "pool_mode=session",          "DBLOCK_TEST_PG_DSN"};

class CutSessionPooler : public ::testing::TestWithParam<dblock::test::BackendCase> {};

// Through a PgBouncer in session mode (a pooler of the test's own: the shared one runs in
// transaction mode, where advisory mode is refused), the holder cut off from PgBouncer. dblock's
// keepalive settings then reach only PgBouncer's server connection, whose ends both live: the server
// session, and its advisory locks, stay until PgBouncer drops the client and gives the server
// connection back (server_reset_query, DISCARD ALL by default, unlocks them). PgBouncer's own client
// settings bound that (kPoolerCutSettings; with its defaults, TCP's: about 2 h 11 min); table
// mode's lease ends by itself whatever PgBouncer does.
TEST_P(CutSessionPooler, AHolderCutOffFromPgBouncerBlocksTheNameOnlyUntilItsLeaseEndsPlusTheMargin) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  if (dblock::test::OwnPgBouncer::program().empty()) {
    if (dblock::test::servers_required()) FAIL() << "PgBouncer is not installed but DBLOCK_REQUIRE_SERVERS=1";
    GTEST_SKIP() << "PgBouncer is not installed";
  }
  ASSERT_TRUE(LoopbackCut::available()) << "cutting a connection needs root and iptables (tools/deps.sh installs it)";
  dblock::test::OwnPgBouncer pooler(server_dsn, "session", kPoolerCutSettings);
  ASSERT_TRUE(pooler.started()) << pooler.log();
  dblock::test::Installation installation(GetParam(), dblock::test::with_params(pooler.dsn(), GetParam().dsn_params));
  dblock::LockManager contender(installation.store(), {.mode = GetParam().mode, .default_ttl = kCutTtl});
  expect_taken_over_after_cut(GetParam().label, installation.dsn(), pooler.port(), contender, GetParam().mode,
                              kCutTtl + kCutMargin + kCutSlack);
}

INSTANTIATE_TEST_SUITE_P(Backends, CutSessionPooler, ::testing::Values(kSessionPoolerTable, kSessionPoolerAdvisory),
                         [](const auto& info) { return std::string(info.param.label); });

// The other side of the pooler: PgBouncer (in session mode, with its defaults) cut off from the
// server, on the one server connection that holds the holder's advisory lock. That server session
// got dblock's keepalive settings (the SETs at connect pass through a session pooler to its server
// connection), so the server ends it, and the lock, as it does a direct holder's.
TEST(CutSessionPoolerServer, APgBouncerCutOffFromTheServerLosesItsClientsAdvisoryLocksWithinTheMargin) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  if (dblock::test::OwnPgBouncer::program().empty()) {
    if (dblock::test::servers_required()) FAIL() << "PgBouncer is not installed but DBLOCK_REQUIRE_SERVERS=1";
    GTEST_SKIP() << "PgBouncer is not installed";
  }
  ASSERT_TRUE(LoopbackCut::available()) << "cutting a connection needs root and iptables (tools/deps.sh installs it)";
  dblock::test::OwnPgBouncer pooler(server_dsn, "session", "");
  ASSERT_TRUE(pooler.started()) << pooler.log();
  dblock::test::Installation installation(kSessionPoolerAdvisory,
                                          dblock::test::with_params(pooler.dsn(), kSessionPoolerAdvisory.dsn_params));
  dblock::LockManager contender(installation.store(), {.mode = dblock::LockMode::advisory, .default_ttl = kCutTtl});
  const std::string name = fmt::format("cut/pgbouncer-server/{}", getpid());
  CutHolder holder(installation.dsn(), name, dblock::LockMode::advisory);
  ASSERT_TRUE(dblock::test::eventually([&] { return holder.holds(); }, 30s)) << "the holder never got the lock";
  auto key = static_cast<std::uint64_t>(dblock::AdvisoryKey::from_name(name).key());
  auto ports = installation.admin().query(fmt::format(
      "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
      "AND l.classid = {} AND l.objid = {} AND l.objsubid = 1 AND l.granted",
      key >> 32, key & 0xffffffffu));
  ASSERT_EQ(ports.size(), 1u) << "one server session holds the lock";
  ASSERT_FALSE(contender.try_acquire(name)) << "the holder holds the name";

  LoopbackCut cut({static_cast<std::uint16_t>(std::stoi(ports[0]))});
  ASSERT_TRUE(cut.added());
  const auto bound = kCutMargin + kCutSlack;
  auto took = takeover_time(contender, name, bound);
  std::cout << "pgbouncer_session_advisory, PgBouncer's server connection cut: another process was "
            << (took ? fmt::format("granted the name {} ms after the cut", took->count())
                     : fmt::format("not granted the name within {} s", bound.count()))
            << "\n";
  ASSERT_TRUE(took) << "a server session cut off from its pooler kept its advisory lock past the margin";
}
#endif

#if DBLOCK_TEST_WITH_POSTGRES
// The same for a transaction-scoped advisory lock on the application's own connection (opened
// here without any keepalive settings of its own): try_xact_lock bounds its transaction's
// connection as dblock's sessions are (no lease: the margin alone).
TEST(CutXact, ATransactionCutOffFromTheServerKeepsItsXactLockOnlyForTheMargin) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  ASSERT_TRUE(LoopbackCut::available()) << "cutting a connection needs root and iptables (tools/deps.sh installs it)";
  dblock::test::Installation installation(dblock::test::kPostgresAdvisory, server_dsn);
  const std::string name = fmt::format("cut/xact/{}", getpid());
  std::unique_ptr<PGconn, void (*)(PGconn*)> conn(PQconnectdb(server_dsn.c_str()), PQfinish);
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  PQclear(PQexec(conn.get(), "BEGIN"));
  ASSERT_TRUE(dblock::postgres::try_xact_lock(*installation.store(), conn.get(), dblock::AdvisoryKey::from_name(name)));
  sockaddr_in local{};
  socklen_t length = sizeof local;
  ASSERT_EQ(getsockname(PQsocket(conn.get()), reinterpret_cast<sockaddr*>(&local), &length), 0);
  dblock::LockManager contender(installation.store(), {.mode = dblock::LockMode::advisory, .default_ttl = kCutTtl});
  ASSERT_FALSE(contender.try_acquire(name)) << "the transaction holds the name";

  LoopbackCut cut({ntohs(local.sin_port)});
  ASSERT_TRUE(cut.added());
  auto took = takeover_time(contender, name, kCutMargin + kCutSlack);
  std::cout << "xact lock: another process was "
            << (took ? fmt::format("granted the name {} ms after the cut", took->count())
                     : fmt::format("not granted the name within {} s", (kCutMargin + kCutSlack).count()))
            << "\n";
  ASSERT_TRUE(took) << "a cut transaction kept its lock past the margin";
}
#endif

class CutStatement : public ::testing::TestWithParam<dblock::test::BackendCase> {};

// No call waits on a dead socket: with every session of a store cut off (packets dropped both
// ways, nothing closed, so a statement is sent into the kernel's buffer and its reply never comes)
// a call returns within the statement timeout plus one resolution read on a fresh session, as
// through a stalled proxy (AStalledConnectionFailsWithinTheStatementTimeout): libpq's reply
// deadline; MariaDB Connector/C's read timeout, which dblock sets to the statement timeout.
TEST_P(CutStatement, ACallOnACutSessionReturnsWithinTheStatementTimeout) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, GetParam().dsn_env);
  ASSERT_TRUE(LoopbackCut::available()) << "cutting a connection needs root and iptables (tools/deps.sh installs it)";
  dblock::test::Installation installation(GetParam(), server_dsn);
  const auto port = dblock::test::dsn_port(server_dsn);
  const auto others = local_ports_of(getpid(), port);  // the installation's own: not cut
  auto store = installation.open_store("pool=1", {.connect_timeout = 2s, .statement_timeout = 1s});
  dblock::LockManager locks(store, {.mode = GetParam().mode, .default_ttl = kCutTtl});
  const std::string name = fmt::format("cut-statement/{}", getpid());
  locks.try_acquire(name + "/warm-up")->release();
  std::vector<std::uint16_t> ports;
  for (auto local : local_ports_of(getpid(), port))
    if (std::find(others.begin(), others.end(), local) == others.end()) ports.push_back(local);
  ASSERT_FALSE(ports.empty()) << "the store has no session";

  LoopbackCut cut(ports);
  ASSERT_TRUE(cut.added());
  auto started = std::chrono::steady_clock::now();
  std::string outcome;
  try {
    outcome = locks.try_acquire(name) ? "granted (on a fresh session)" : "refused";
  } catch (const dblock::ConnectionError& e) {
    outcome = std::string("ConnectionError: ") + e.what();
  }
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  std::cout << GetParam().label << ": " << ports.size() << " session(s) cut; the call returned after " << waited.count()
            << " ms: " << outcome << "\n";
  // The statement timeout (1 s), less the rounding of a poll's milliseconds: the call met the cut session.
  EXPECT_GE(waited, 900ms) << "the call did not meet the cut session";
  EXPECT_LT(waited, 6s) << "the call must give up after the statement timeout (and one resolution read)";
}

INSTANTIATE_TEST_SUITE_P(
    Backends, CutStatement,
    ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable, dblock::test::kPostgresAdvisory,
                                             dblock::test::kMysqlTable, dblock::test::kMysqlAdvisory})),
    [](const auto& info) { return std::string(info.param.label); });

INSTANTIATE_TEST_SUITE_P(Backends, Faults,
                         ::testing::ValuesIn(dblock::test::built({dblock::test::kPostgresTable,
                                                                  dblock::test::kMysqlTable})),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
