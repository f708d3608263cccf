// usage: consumer DSN — migrates, takes a lock, prints its token, and checks that the library's
// exceptions reach the application as their own types (with a shared libdblock.so they cross the
// library boundary, which needs their type information exported).
#include <dblock/dblock.hpp>

#include <chrono>
#include <iostream>

namespace {

template <typename Expected, typename Call>
bool throws(const char* what, Call call) {
  try {
    call();
  } catch (const Expected&) {
    return true;
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << what << " threw the wrong type: " << e.what() << "\n";
    return false;
  }
  std::cerr << "consumer: " << what << " threw nothing\n";
  return false;
}

}  // namespace

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
    dblock::LockManager rival(store);
    auto lock = locks.acquire("consumer/smoke", 5s);
    std::cout << "consumer holds '" << lock.name() << "' with token " << lock.token() << "\n";
    bool typed =
        throws<dblock::Timeout>("acquiring a held lock", [&] { (void)rival.acquire("consumer/smoke", 50ms); }) &&
        throws<dblock::InvalidArgument>("an empty name", [&] { (void)locks.try_acquire(""); });
    lock.release();
    return typed ? 0 : 1;
  } catch (const dblock::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
