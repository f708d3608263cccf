// One leader among any number of copies of this program: start it several times against one
// database; one copy says it was elected and "works" with its term's fencing token, the others
// wait. Stop or kill the leader (SIGKILL, or SIGSTOP for a pause longer than the lease) and
// another copy is elected within a lease, with a larger token.
//
//   dblock_leader_example 'postgresql://app:pw@127.0.0.1/app' scheduler
//
// Ends on SIGINT or SIGTERM, resigning first, so that another copy takes over at once.

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <fmt/format.h>
#include <dblock/dblock.hpp>

using namespace std::chrono_literals;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s DSN [NAME]\n", argv[0]);
    return 64;
  }
  // Blocked before any thread starts, so every thread inherits the mask and sigwait receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    auto store = dblock::Store::open(argv[1]);
    std::string name = argc == 3 ? argv[2] : "leader-example";
    dblock::LeaderElection election(store, name,
                                    {
                                        .on_elected =
                                            [](std::int64_t token) {
                                              fmt::print("elected, token {}\n", token);
                                              std::fflush(stdout);
                                            },
                                        .on_revoked =
                                            [] {
                                              fmt::print("revoked\n");
                                              std::fflush(stdout);
                                            },
                                        .manager = {.default_ttl = 10s},
                                    });
    fmt::print("campaigning for '{}' as {}\n", dblock::terminal_safe(name), getpid());
    std::fflush(stdout);
    int received = 0;
    sigwait(&stop_signals, &received);
    fmt::print("resigning\n");
  } catch (const dblock::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
