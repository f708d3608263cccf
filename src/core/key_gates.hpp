#pragma once
// A mutex per key, there only while someone uses it: statements for one key go one at a time
// while different keys never wait for each other.

#include <map>
#include <mutex>

namespace dblock::detail {

template <class Key>
class KeyGates {
  struct Gate {
    std::mutex mutex;
    int users = 0;  // holders and waiters; guarded by KeyGates::mutex_
  };
  using Entry = typename std::map<Key, Gate>::iterator;

 public:
  /// Holds the gate of one key until destroyed.
  class Pass {
   public:
    Pass(KeyGates& gates, Entry entry) : gates_(gates), entry_(entry) { entry_->second.mutex.lock(); }
    ~Pass() {
      entry_->second.mutex.unlock();
      std::lock_guard lock(gates_.mutex_);
      if (--entry_->second.users == 0) gates_.gates_.erase(entry_);
    }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    KeyGates& gates_;
    Entry entry_;
  };

  /// Waits until no other thread holds `key`'s gate, then holds it.
  [[nodiscard]] Pass enter(const Key& key) {
    Entry entry;
    {
      std::lock_guard lock(mutex_);
      entry = gates_.try_emplace(key).first;
      ++entry->second.users;
    }
    return Pass(*this, entry);
  }

 private:
  std::mutex mutex_;
  std::map<Key, Gate> gates_;  // node-based: an entry stays put while others come and go
};

}  // namespace dblock::detail
