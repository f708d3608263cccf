#pragma once
// A gate per key, there only while someone uses it: statements for one key go one at a time, in
// the order their callers came, while different keys never wait for each other.

#include <map>
#include <mutex>

#include "base/fifo_turn.hpp"
#include "core/park_hooks.hpp"

namespace dblock::detail {

template <class Key>
class KeyGates {
  using Turn = FifoTurn<const ParkHooks*>;  // a waiter carries the hooks that park it
  struct Gate {
    Turn turn;
    int users = 0;  // the holder and the waiters
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
      gate.turn.hand_on([](const ParkHooks* hooks) {
        if (hooks != nullptr && hooks->resumed) hooks->resumed();
      });
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
    if (gate.turn.try_take()) {
      ++gate.users;
      return Pass(*this, entry);
    }
    // Parked, queued, then counted: a hook or an allocation that throws leaves the gate as it was.
    if (park_hooks != nullptr && park_hooks->parked) park_hooks->parked();
    typename Turn::Waiter me;
    me.tag = park_hooks;
    gate.turn.queue(me);
    ++gate.users;
    gate.turn.wait(lock, me);
    return Pass(*this, entry);
  }

 private:
  std::mutex mutex_;
  std::map<Key, Gate> gates_;  // node-based: an entry stays put while others come and go
};

}  // namespace dblock::detail
