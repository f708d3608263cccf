// usage: consumer DSN — migrates, takes a lock, prints its token, releases.
#include <dblock/dblock.hpp>

#include <chrono>
#include <iostream>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc != 2) {
    std::cerr << "usage: consumer DSN\n";
    return 64;
  }
  try {
    auto store = dblock::Store::open(argv[1]);
    dblock::migrate(*store);
    dblock::LockManager locks(store, {.default_ttl = 10s});
    auto lock = locks.acquire("consumer/smoke", 5s);
    std::cout << "consumer holds '" << lock.name() << "' with token " << lock.token() << "\n";
    lock.release();
    return 0;
  } catch (const dblock::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
