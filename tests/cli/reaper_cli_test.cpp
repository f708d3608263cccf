// The reaper sidecar as an operator runs it: endpoints scraped over loopback, SIGTERM, and a
// database that goes away and comes back.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <dblock/dblock.hpp>

#include "dblock/listen_address.hpp"
#include "support/admin.hpp"
#include "support/build_paths.hpp"
#include "support/cli_runner.hpp"
#include "support/eventually.hpp"
#include "support/installation.hpp"
#include "support/servers.hpp"
#include "support/sidecar.hpp"
#include "support/tcp_proxy.hpp"

using namespace std::chrono_literals;
using dblock::test::Sidecar;
using dblock::test::sidecar_eventually;

namespace {

/// A socket closed however the scope ends.
class Socket {
 public:
  explicit Socket(int family) : fd_(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  [[nodiscard]] int fd() const { return fd_; }

 private:
  int fd_;
};

struct RawResponse {
  int status = -1;  // -1: no answer
  std::string body;
};

/// Sends `request` byte for byte (httplib's client always adds a Content-Length to a POST) to a
/// loopback `address` ("127.0.0.1" or "::1"), and reads the answer until the server closes the
/// connection (the request says "Connection: close"), each read bounded.
RawResponse raw_http(const std::string& address, std::uint16_t port, const std::string& request) {
  sockaddr_storage peer{};
  socklen_t peer_size = 0;
  if (address.find(':') == std::string::npos) {
    auto& v4 = reinterpret_cast<sockaddr_in&>(peer);
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    inet_pton(AF_INET, address.c_str(), &v4.sin_addr);
    peer_size = sizeof v4;
  } else {
    auto& v6 = reinterpret_cast<sockaddr_in6&>(peer);
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    inet_pton(AF_INET6, address.c_str(), &v6.sin6_addr);
    peer_size = sizeof v6;
  }
  Socket connection(peer.ss_family);
  timeval limit{10, 0};
  setsockopt(connection.fd(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(connection.fd(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  if (connect(connection.fd(), reinterpret_cast<sockaddr*>(&peer), peer_size) != 0) return {};
  if (send(connection.fd(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
    return {};
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = recv(connection.fd(), buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, got);
  RawResponse response;
  if (answer.starts_with("HTTP/1.1 ") && answer.size() >= 12) response.status = std::stoi(answer.substr(9, 3));
  if (auto headers_end = answer.find("\r\n\r\n"); headers_end != std::string::npos)
    response.body = answer.substr(headers_end + 4);
  return response;
}

/// A POST as `curl -X POST URL` sends it: no body, and so neither Content-Length nor Transfer-Encoding.
std::string bodiless_post(const std::string& target, const std::string& extra_headers = "") {
  return fmt::format("POST {} HTTP/1.1\r\nHost: localhost\r\n{}Connection: close\r\n\r\n", target, extra_headers);
}

TEST(ReaperSidecar, ServesMetricsAndHealthReapsAndStopsOnSigterm) {
  dblock::test::Installation installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path());
  auto dsn = installation.dsn();
  const auto& store = installation.store();
  installation.admin().insert_expired("stale/", 7);
  dblock::LockManager locks(store, {.default_ttl = 60s});
  auto live = locks.try_acquire("live");
  ASSERT_TRUE(live);

  auto port = dblock::test::free_port();
  Sidecar sidecar(dsn, port);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "sidecar never became healthy";
  ASSERT_TRUE(sidecar_eventually([&] {
    return sidecar.get("/metrics").find("dblock_reaper_rows_reaped_total 7\n") != std::string::npos;
  })) << sidecar.get("/metrics");
  auto metrics = sidecar.get("/metrics");
  for (const char* expected :
       {"# TYPE dblock_reaper_rows_reaped_total counter", "# TYPE dblock_reaper_cycles_total counter",
        "dblock_reaper_failures_total 0", "# TYPE dblock_reaper_cycle_duration_seconds histogram",
        "dblock_reaper_cycle_duration_seconds_bucket{le=\"+Inf\"}", "dblock_locks_held 1", "dblock_locks_expired 0",
        "# TYPE dblock_oldest_held_lock_age_seconds gauge", "dblock_database_up 1"})
    EXPECT_NE(metrics.find(expected), std::string::npos) << expected << "\n" << metrics;
  EXPECT_EQ(store->locks().size(), 1u) << "the live lock stays";
  EXPECT_EQ(sidecar.terminate(), 0) << "SIGTERM must stop it cleanly and promptly";
  dblock::test::remove_embedded_sqlite();
}

TEST(ReaperSidecar, ASecondSidecarOnABusyAddressExits71NamingIt) {
  auto dsn =
      dblock::test::Installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path(), {.keep_store = false})
          .dsn();
  auto port = dblock::test::free_port();
  Sidecar first(dsn, port);
  ASSERT_TRUE(sidecar_eventually([&] { return first.status("/healthz") == 200; }));
  auto address = fmt::format("127.0.0.1:{}", port);
  // Bounded: a second sidecar that shares the port (SO_REUSEPORT) would serve on and never exit.
  auto second = dblock::test::run_command(
      {DBLOCK_CLI_PATH, "--dsn", dsn, "reaper", "--listen", address, "--interval", "100ms"}, {}, 10s);
  const auto& text = second.output;
  EXPECT_EQ(second.exit_code, 71) << text;
  EXPECT_NE(text.find(address), std::string::npos) << text;
  EXPECT_EQ(first.status("/healthz"), 200) << "the first one keeps serving";
  dblock::test::remove_embedded_sqlite();
}

TEST(ReaperSidecar, ReportsTheDatabaseDownAndRecoversWhenItComesBack) {
  std::string server_dsn;
  DBLOCK_REQUIRE_DSN(server_dsn, "DBLOCK_TEST_PG_DSN");
  dblock::test::Installation installation("postgresql", server_dsn, {.keep_store = false});
  auto* admin = &installation.admin();

  dblock::test::TcpProxy proxy(dblock::test::dsn_port(server_dsn), /*start_down=*/true);
  auto proxied = installation.dsn_on(dblock::test::with_port(server_dsn, proxy.port()));
  auto port = dblock::test::free_port();
  Sidecar sidecar(proxied, port, {"--unhealthy-after", "2"});

  // Down from the start: the sidecar keeps retrying and says so.
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 503; })) << "never reported unhealthy";
  EXPECT_NE(sidecar.get("/metrics").find("dblock_database_up 0"), std::string::npos);
  proxy.set_down(false);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "never recovered";
  admin->insert_expired("after-outage/", 4);
  ASSERT_TRUE(sidecar_eventually(
      [&] { return sidecar.get("/metrics").find("dblock_reaper_rows_reaped_total 4\n") != std::string::npos; }));

  // Down while running: pooled sessions break, cycles fail, then it reconnects by itself.
  proxy.set_down(true);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 503; })) << "outage not reported";
  proxy.set_down(false);
  ASSERT_TRUE(sidecar_eventually([&] { return sidecar.status("/healthz") == 200; })) << "did not reconnect";
  admin->insert_expired("after-second-outage/", 2);
  ASSERT_TRUE(sidecar_eventually(
      [&] { return sidecar.get("/metrics").find("dblock_reaper_rows_reaped_total 6\n") != std::string::npos; }));
  EXPECT_EQ(sidecar.terminate(), 0);
}

// A DSN that Store::open refuses (an unknown scheme, a bad parameter) is bad input: exit 64 with the
// reason. It used to leave the sidecar hanging with its listener up, /healthz answering "ok".
TEST(ReaperSidecar, ADsnTheStoreRefusesEndsTheSidecarWith64NotAHangingListener) {
  for (std::string dsn : {"nosuch://x", "sqlite:///tmp/dblock-reaper-bad-dsn.db?prefix=a-b"}) {
    auto outcome = dblock::test::run_command(
        {DBLOCK_CLI_PATH, "--dsn", dsn, "reaper", "--listen", fmt::format("127.0.0.1:{}", dblock::test::free_port())},
        {}, 20s);
    const auto& text = outcome.output;
    EXPECT_EQ(outcome.exit_code, 64) << dsn << ": " << text;
    EXPECT_NE(text.find("is invalid"), std::string::npos) << dsn << ": " << text;
  }
  std::remove("/tmp/dblock-reaper-bad-dsn.db");
}

// `curl -X POST 'http://…/api/revoke?name=N'` sends no body and no Content-Length, as HTTP/1.1
// allows; httplib waited for a body until its read timeout and answered 400 with nothing in it.
TEST(ReaperSidecar, ABodilessRevokeRevokesAndAnIncompleteOneSaysWhy) {
  dblock::test::Installation installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path());
  auto token_file = fmt::format("/tmp/dblock-reaper-admin-token-{}", getpid());
  std::ofstream(token_file) << "0123456789abcdef-secret\n";
  dblock::LockManager locks(installation.store(), {.default_ttl = 60s});
  auto held = locks.try_acquire("bodiless/revoked");
  ASSERT_TRUE(held);
  auto port = dblock::test::free_port();
  Sidecar sidecar(installation.dsn(), port, {"--admin-token-file", token_file});
  ASSERT_TRUE(sidecar.ready()) << "sidecar never reached the database";
  const std::string bearer = "Authorization: Bearer 0123456789abcdef-secret\r\n";

  auto unnamed = raw_http("127.0.0.1", port, bodiless_post("/api/revoke", bearer));
  EXPECT_EQ(unnamed.status, 400);
  EXPECT_NE(unnamed.body.find("name parameter is missing"), std::string::npos) << unnamed.body;
  auto anonymous = raw_http("127.0.0.1", port, bodiless_post("/api/revoke?name=bodiless/revoked"));
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_NE(anonymous.body.find("bearer token"), std::string::npos) << anonymous.body;
  auto elsewhere = raw_http("127.0.0.1", port, bodiless_post("/api/nothing-here", bearer));
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_NE(elsewhere.body.find("no such endpoint"), std::string::npos) << elsewhere.body;
  EXPECT_EQ(installation.store()->lock("bodiless/revoked")->state, dblock::LockState::held);

  auto revoked = raw_http("127.0.0.1", port, bodiless_post("/api/revoke?name=bodiless/revoked", bearer));
  EXPECT_EQ(revoked.status, 200) << revoked.body;
  EXPECT_NE(revoked.body.find("\"revoked\":\"bodiless/revoked\""), std::string::npos) << revoked.body;
  EXPECT_EQ(installation.store()->lock("bodiless/revoked")->state, dblock::LockState::revoked);
  auto again = raw_http("127.0.0.1", port, bodiless_post("/api/revoke?name=no/such/lock", bearer));
  EXPECT_EQ(again.status, 404);
  EXPECT_NE(again.body.find("no live lock"), std::string::npos) << again.body;
  // Its sibling, asking a holder to let go, is answered before a body is read too.
  auto other = locks.try_acquire("bodiless/asked");
  ASSERT_TRUE(other);
  auto asked = raw_http("127.0.0.1", port, bodiless_post("/api/request-release?name=bodiless/asked", bearer));
  EXPECT_EQ(asked.status, 200) << asked.body;
  EXPECT_NE(asked.body.find("\"asked\":\"bodiless/asked\""), std::string::npos) << asked.body;
  std::remove(token_file.c_str());
  dblock::test::remove_embedded_sqlite();
}

// An IPv6 address in brackets, as URLs write it: httplib binds "::1", not "[::1]".
TEST(ReaperSidecar, ListensOnABracketedIpv6Loopback) {
  dblock::test::Installation installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path());
  dblock::LockManager locks(installation.store(), {.default_ttl = 60s});
  auto held = locks.try_acquire("over/ipv6");
  ASSERT_TRUE(held);
  auto port = dblock::test::free_port();
  Sidecar sidecar(installation.dsn(), port, {"--status-refresh", "100ms"}, "::1");
  auto get = [&](const std::string& path) {
    return raw_http("::1", port, fmt::format("GET {} HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n", path));
  };
  ASSERT_TRUE(sidecar_eventually([&] {
    return get("/metrics").body.find("dblock_database_up 1\n") != std::string::npos;
  })) << "nothing served on [::1], or the database never reached";
  EXPECT_EQ(get("/healthz").status, 200);
  // ::1 is loopback: the status page is served there as on 127.0.0.1.
  ASSERT_TRUE(sidecar_eventually([&] { return get("/status.json").body.find("\"over/ipv6\"") != std::string::npos; }))
      << get("/status.json").body;
  EXPECT_EQ(sidecar.terminate(), 0);
  dblock::test::remove_embedded_sqlite();
}

TEST(ReaperListenAddress, AnIpv6AddressGoesInBracketsAndBadTextIsRefusedSayingWhy) {
  auto bracketed = dblock::cli::parse_listen("[::1]:9464");
  EXPECT_EQ(bracketed.host, "::1");
  EXPECT_EQ(bracketed.port, 9464);
  EXPECT_EQ(dblock::cli::parse_listen("127.0.0.1:9464").host, "127.0.0.1");
  auto refusal = [](std::string_view text) {
    try {
      dblock::cli::parse_listen(text);
    } catch (const dblock::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal("::1:9464").find("without brackets"), std::string::npos) << refusal("::1:9464");
  EXPECT_NE(refusal("[127.0.0.1]:9464").find("not an IPv6 address"), std::string::npos);
  EXPECT_NE(refusal("[::1]").find("[IPV6]:PORT"), std::string::npos);
  EXPECT_NE(refusal("127.0.0.1:94x").find("port"), std::string::npos);
  EXPECT_NE(refusal(":9464").find("no host"), std::string::npos);
}

// The listener is judged by the address bound, never by how --listen spells it: a name such as
// 127.example.com may resolve to the wildcard (every interface), where the status page must stay
// off. Only loopback and wildcard addresses appear here, and nothing is sent anywhere.
TEST(ReaperListenAddress, LoopbackIsJudgedByTheAddressNotByItsSpelling) {
  auto v4 = [](const char* text) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, text, &address.sin_addr), 1) << text;
    return address;
  };
  auto v6 = [](const char* text) {
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, text, &address.sin6_addr), 1) << text;
    return address;
  };
  EXPECT_TRUE(dblock::cli::is_loopback(v4("127.0.0.1")));
  EXPECT_TRUE(dblock::cli::is_loopback(v4("127.255.255.254")));
  EXPECT_TRUE(dblock::cli::is_loopback(v6("::1")));
  EXPECT_TRUE(dblock::cli::is_loopback(v6("::ffff:127.0.0.1")));
  EXPECT_FALSE(dblock::cli::is_loopback(v4("0.0.0.0")));
  EXPECT_FALSE(dblock::cli::is_loopback(v6("::")));
  EXPECT_FALSE(dblock::cli::is_loopback(v6("::ffff:0.0.0.0")));
  sockaddr_storage unix_socket{};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_FALSE(dblock::cli::is_loopback(unix_socket)) << "another family is not judged loopback";

  // What a host resolves to decides, numeric hosts included (no name here: a lookup could leave the host).
  for (const auto* host : {"127.0.0.1", "127.1", "::1"})
    for (const auto& candidate : dblock::cli::resolve_listen_host(host))
      EXPECT_TRUE(dblock::cli::is_loopback(candidate.address)) << host << " as " << candidate.numeric;
  for (const auto* host : {"0.0.0.0", "::"})
    for (const auto& candidate : dblock::cli::resolve_listen_host(host))
      EXPECT_FALSE(dblock::cli::is_loopback(candidate.address)) << host << " as " << candidate.numeric;
}

TEST(ReaperSidecar, OnceExitsWithTheOutcome) {
  auto dsn =
      dblock::test::Installation("sqlite", "sqlite://" + dblock::test::embedded_sqlite_path(), {.keep_store = false})
          .dsn();
  auto ok = dblock::test::run_command({DBLOCK_CLI_PATH, "--dsn", dsn, "reaper", "--once"});
  EXPECT_EQ(ok.exit_code, 0);
  auto unreachable =
      dblock::test::run_command({DBLOCK_CLI_PATH, "--dsn", "postgresql://u:pw@127.0.0.1:1/db", "reaper", "--once"});
  EXPECT_EQ(unreachable.exit_code, dblock::test::is_built("postgresql") ? 69 : 64) << "unreachable, or not built";
  auto bad_listen = dblock::test::run_command({DBLOCK_CLI_PATH, "--dsn", dsn, "reaper", "--listen", "nonsense"});
  EXPECT_EQ(bad_listen.exit_code, 64);
  dblock::test::remove_embedded_sqlite();
}

}  // namespace
