#pragma once
// A gate per key, there only while someone uses it: statements for one key go one at a time, in
// the order their callers came, while different keys never wait for each other.

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "core/park_hooks.hpp"

namespace dblock::detail {

template <class Key>
class KeyGates {
  /// A caller waiting for a gate, on its own stack until the gate is handed to it.
  struct Waiter {
    std::condition_variable handed;
    bool holds = false;
    const ParkHooks* hooks = nullptr;
  };
  struct Gate {
    bool held = false;
    std::deque<Waiter*> waiters;  // first come, first handed the gate
    int users = 0;                // the holder and the waiters
  };
  using Entry = typename std::map<Key, Gate>::iterator;

 public:
  /// Holds the gate of one key until destroyed; then hands it to the first waiter.
  class Pass {
   public:
    Pass(KeyGates& gates, Entry entry) : gates_(gates), entry_(entry) {}
    ~Pass() {
      std::lock_guard lock(gates_.mutex_);
      auto& gate = entry_->second;
      if (gate.waiters.empty()) {
        gate.held = false;
      } else {
        Waiter* next = gate.waiters.front();
        gate.waiters.pop_front();
        next->holds = true;
        if (next->hooks != nullptr && next->hooks->resumed) next->hooks->resumed();
        next->handed.notify_one();
      }
      if (--gate.users == 0) gates_.gates_.erase(entry_);
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    KeyGates& gates_;
    Entry entry_;
  };

  /// Waits until the threads that came before for `key` are done with it, then holds its gate.
  [[nodiscard]] Pass enter(const Key& key) {
    std::unique_lock lock(mutex_);
    auto entry = gates_.try_emplace(key).first;
    auto& gate = entry->second;
    if (!gate.held) {
      ++gate.users;
      gate.held = true;
      return Pass(*this, entry);
    }
    // Parked, queued, then counted: a hook or an allocation that throws leaves the gate as it was.
    if (park_hooks != nullptr && park_hooks->parked) park_hooks->parked();
    Waiter me{{}, false, park_hooks};
    gate.waiters.push_back(&me);
    ++gate.users;
    me.handed.wait(lock, [&] { return me.holds; });
    return Pass(*this, entry);
  }

 private:
  std::mutex mutex_;
  std::map<Key, Gate> gates_;  // node-based: an entry stays put while others come and go
};

}  // namespace dblock::detail
