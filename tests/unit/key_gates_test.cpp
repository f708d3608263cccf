// The per-name gates of the core: one holder per key, handed on in arrival order, and every wait
// behind another thread parked where the model test's scheduler sees it (ParkHooks).

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/key_gates.hpp"

namespace {

using namespace std::chrono_literals;
using Gates = dblock::detail::KeyGates<std::string>;

/// What the threads did, in order, under one mutex; waits bounded by a time limit.
struct Journal {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> events;
  int parked = 0;

  void add(const std::string& event) {
    {
      std::lock_guard lock(mutex);
      events.push_back(event);
    }
    changed.notify_all();
  }
  bool wait_parked(int count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return parked >= count; });
  }
};

TEST(KeyGates, WaitersAreHandedTheGateInArrivalOrderAndParkedUntilThen) {
  Gates gates;
  Journal journal;
  std::vector<std::jthread> waiters;
  {
    auto first = gates.enter("a");
    // A caller of another key is never held up by "a".
    { auto other = gates.enter("b"); }
    for (const std::string who : {"second", "third"}) {
      int parked_before = journal.parked;
      waiters.emplace_back([&gates, &journal, who] {
        const dblock::detail::ParkHooks hooks{[&journal] {
                                                {
                                                  std::lock_guard lock(journal.mutex);
                                                  ++journal.parked;
                                                }
                                                journal.changed.notify_all();
                                              },
                                              [&journal, who] { journal.add(who + " resumed"); }};
        dblock::detail::park_hooks = &hooks;
        auto pass = gates.enter("a");
        journal.add(who + " holds");
        dblock::detail::park_hooks = nullptr;
      });
      // The next waiter arrives only once this one waits: the order is known.
      ASSERT_TRUE(journal.wait_parked(parked_before + 1)) << who << " never parked behind the holder";
    }
    journal.add("first lets go");
  }
  for (auto& waiter : waiters) waiter.join();
  // resumed runs on the thread that hands the gate on, before the waiter runs again.
  EXPECT_EQ(journal.events, (std::vector<std::string>{"first lets go", "second resumed", "second holds",
                                                      "third resumed", "third holds"}));
}

TEST(KeyGates, AnUncontendedGateNeverParks) {
  Gates gates;
  int parked = 0;
  const dblock::detail::ParkHooks hooks{[&parked] { ++parked; }, {}};
  dblock::detail::park_hooks = &hooks;
  for (int i = 0; i < 3; ++i) {
    auto pass = gates.enter("a");
  }
  dblock::detail::park_hooks = nullptr;
  EXPECT_EQ(parked, 0);
}

}  // namespace
