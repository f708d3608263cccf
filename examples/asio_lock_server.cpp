// A small asio TCP service whose handlers take a dblock lock per request, without blocking a
// thread while they wait. Each connection is a coroutine and its own TaskOwner; a request is one
// line, `LOCK <name> <milliseconds of work>`, answered `OK <name> <fencing token>` once the work is
// done under the lock, `BUSY <name>` when the lock was not granted within 5 s, or `ERROR <text>`.
//
//   dblock_asio_lock_server 'postgresql://app:pw@127.0.0.1/app' 7878
//   printf 'LOCK orders/42 100\n' | nc 127.0.0.1 7878
//
// Listens on 127.0.0.1 only (port 0: any free one). Prints `listening on 127.0.0.1:<port>` when
// ready; ends on SIGINT or SIGTERM.

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <asio.hpp>

#include <fmt/format.h>
#include <dblock/asio.hpp>
#include <dblock/dblock.hpp>

using namespace std::chrono_literals;
using asio::ip::tcp;

namespace {

/// The reply to one request line.
asio::awaitable<std::string> serve(dblock::AsyncLockManager& locks, const dblock::TaskOwner& owner,
                                   const std::string& line) {
  auto space = line.find(' ');
  auto last = line.rfind(' ');
  if (line.rfind("LOCK ", 0) != 0 || last == space) co_return "ERROR expected: LOCK <name> <milliseconds>";
  auto name = line.substr(space + 1, last - space - 1);
  auto work = std::chrono::milliseconds(std::stoll(line.substr(last + 1)));
  try {
    auto lock = co_await locks.async_acquire(name, 5s, owner, {}, asio::use_awaitable);
    auto token = lock.token();
    // The work, under the lock: a timer stands for the request's I/O.
    asio::steady_timer working(co_await asio::this_coro::executor, work);
    co_await working.async_wait(asio::use_awaitable);
    co_await locks.async_release(std::move(lock), asio::use_awaitable);
    co_return fmt::format("OK {} {}", dblock::terminal_safe(name), token);
  } catch (const dblock::Timeout&) {
    co_return fmt::format("BUSY {}", dblock::terminal_safe(name));
  } catch (const dblock::Error& e) {
    co_return fmt::format("ERROR {}", dblock::terminal_safe(e.what()));
  }
}

asio::awaitable<void> session(tcp::socket socket, dblock::AsyncLockManager& locks) {
  dblock::TaskOwner owner;  // the connection's identity, whichever thread resumes it
  std::string buffer;
  try {
    while (true) {
      auto length = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n', asio::use_awaitable);
      auto line = buffer.substr(0, length - 1);
      buffer.erase(0, length);
      std::string reply;
      try {
        reply = co_await serve(locks, owner, line);
      } catch (const std::exception&) {
        reply = "ERROR malformed request";
      }
      reply += '\n';
      co_await asio::async_write(socket, asio::buffer(reply), asio::use_awaitable);
    }
  } catch (const std::system_error&) {
    // The client went away.
  }
}

asio::awaitable<void> listen(tcp::acceptor acceptor, dblock::AsyncLockManager& locks) {
  while (true) {
    auto socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), session(std::move(socket), locks), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DSN PORT\n", argv[0]);
    return 64;
  }
  try {
    asio::io_context io;
    auto store = dblock::Store::open(argv[1]);
    dblock::AsyncLockManager locks(io.get_executor(), store);
    tcp::acceptor acceptor(
        io, tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(std::stoi(argv[2]))));
    fmt::print("listening on 127.0.0.1:{}\n", acceptor.local_endpoint().port());
    std::fflush(stdout);
    asio::co_spawn(io, listen(std::move(acceptor), locks), asio::detached);
    asio::signal_set stop(io, SIGINT, SIGTERM);
    stop.async_wait([&](std::error_code, int) { io.stop(); });
    // Two threads serve every connection, however many wait for locks.
    std::thread second([&] { io.run(); });
    io.run();
    second.join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
