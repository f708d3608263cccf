#pragma once
// A loopback TCP proxy for tests: forwards bytes between a client and a server and counts round
// trips (each time the client speaks again after the server answered). Loopback only.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dblock::test {

class TcpProxy {
 public:
  explicit TcpProxy(std::uint16_t target_port, bool start_down = false) : target_port_(target_port), down_(start_down) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listener_, 16) != 0)
      throw std::runtime_error("proxy: bind/listen failed");
    socklen_t length = sizeof address;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  }
  ~TcpProxy() {
    thread_.request_stop();
    thread_.join();
    for (auto& pair : pairs_) {
      close(pair.client);
      close(pair.server);
    }
    close(listener_);
  }
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::uint64_t round_trips() const { return round_trips_.load(); }
  /// Down: every open connection is cut and new ones are closed at once, like a dead server.
  void set_down(bool down) { down_ = down; }
  /// Stalled: connections stay open but nothing is forwarded, like a frozen server or network.
  void set_stalled(bool stalled) { stalled_ = stalled; }
  void reset_round_trips() { round_trips_ = 0; }

 private:
  struct Pair {
    int client;
    int server;
    bool server_spoke_last = true;
  };

  void run(std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (down_) {
        while (!pairs_.empty()) drop(0);
      }
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      short events = stalled_ ? 0 : POLLIN;
      for (auto& pair : pairs_) {
        fds.push_back({pair.client, events, 0});
        fds.push_back({pair.server, events, 0});
      }
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (std::size_t i = 0; i < pairs_.size() && 1 + 2 * i + 1 < fds.size(); ++i) {
        auto& pair = pairs_[i];
        if (fds[1 + 2 * i].revents & (POLLIN | POLLHUP)) {
          if (!forward(pair.client, pair.server)) {
            drop(i);
            break;
          }
          if (pair.server_spoke_last) ++round_trips_;
          pair.server_spoke_last = false;
        }
        if (fds[2 + 2 * i].revents & (POLLIN | POLLHUP)) {
          if (!forward(pair.server, pair.client)) {
            drop(i);
            break;
          }
          pair.server_spoke_last = true;
        }
      }
    }
  }

  void accept_one() {
    int client = accept(listener_, nullptr, nullptr);
    if (client < 0) return;
    if (down_) {
      close(client);
      return;
    }
    int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(target_port_);
    if (connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      close(client);
      close(server);
      return;
    }
    pairs_.push_back({client, server});
  }

  static bool forward(int from, int to) {
    char buffer[16384];
    auto got = read(from, buffer, sizeof buffer);
    if (got <= 0) return false;
    for (ssize_t sent = 0; sent < got;) {
      auto n = write(to, buffer + sent, static_cast<std::size_t>(got - sent));
      if (n <= 0) return false;
      sent += n;
    }
    return true;
  }

  void drop(std::size_t index) {
    close(pairs_[index].client);
    close(pairs_[index].server);
    pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  std::uint16_t target_port_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  std::vector<Pair> pairs_;
  std::atomic<std::uint64_t> round_trips_{0};
  std::atomic<bool> down_{false};
  std::atomic<bool> stalled_{false};
  std::jthread thread_;
};

}  // namespace dblock::test
