#pragma once
// Group commit done by the client: concurrent requests of one manager that would otherwise wait
// for a session go out together, as one statement per batch. A lone request goes at once; a
// batch forms only while `in_flight` statements are already out.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <dblock/errors.hpp>

#include "backends/backend_errors.hpp"
#include "core/park_hooks.hpp"

namespace dblock::detail {

struct CombinerLimits {
  std::size_t max_batch = 1;                      // the backend's; 1: every request alone
  std::size_t in_flight = 2;                      // statements of one combiner out at once
  std::chrono::milliseconds queue_timeout{5000};  // as long as a pool lease may wait
};

/// `alone`: a repeat after a batch's transient error, never batched again (a hot name cannot
/// keep failing the batches it joins).
enum class Combine { yes, alone };

/// Thread-safe. `Request` has a `name` (std::string_view); the names of one statement are
/// distinct and sorted by bytes, the one lock order of every statement that locks several rows.
template <class Request, class Outcome>
class Combiner {
 public:
  using SendOne = std::function<Outcome(const Request&)>;
  using SendMany = std::function<std::vector<Outcome>(std::span<const Request>)>;

  Combiner(CombinerLimits limits, SendOne one, SendMany many)
      : limits_(limits), one_(std::move(one)), many_(std::move(many)) {
    limits_.max_batch = std::max<std::size_t>(limits_.max_batch, 1);
    limits_.in_flight = std::max<std::size_t>(limits_.in_flight, 1);
  }

  /// Sends `request` and returns its outcome; `combined` is set to how many requests its
  /// statement carried. Throws what that statement threw (every request of a failed batch gets
  /// the same error). @throws ConnectionError when it waited queue_timeout without being sent.
  Outcome submit(const Request& request, Combine mode, std::size_t& combined) {
    Slot slot{&request, mode, park_hooks};
    std::unique_lock lock(mutex_);
    queue_.push_back(&slot);
    const auto deadline = std::chrono::steady_clock::now() + limits_.queue_timeout;
    while (slot.state != State::done) {
      if (slot.state == State::queued && queue_.front() == &slot && in_flight_ < limits_.in_flight) {
        try {
          lead(lock, slot);
        } catch (...) {  // no memory for the batch: nothing was taken or sent, so this slot leaves first
          if (slot.state == State::queued) {
            queue_.pop_front();
            if (!queue_.empty() && in_flight_ < limits_.in_flight) wake(*queue_.front());
          }
          throw;
        }
        continue;
      }
      if (slot.state == State::queued && std::chrono::steady_clock::now() >= deadline) {
        bool was_front = queue_.front() == &slot;
        queue_.erase(std::find(queue_.begin(), queue_.end(), &slot));
        if (was_front && !queue_.empty() && in_flight_ < limits_.in_flight) wake(*queue_.front());
        throw ConnectionError(
            fmt::format("{} lock statement(s) of this manager stayed in flight for {} ms "
                        "(the database is slow or unreachable); nothing was sent",
                        in_flight_, limits_.queue_timeout.count()));
      }
      if (slot.hooks != nullptr && slot.hooks->parked) slot.hooks->parked();
      // A taken request waits without a deadline: its statement is out, and its caller must
      // learn what became of it.
      if (slot.state == State::queued)
        slot.wake.wait_until(lock, deadline);
      else
        slot.wake.wait(lock);
    }
    combined = slot.combined;
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(*slot.outcome);
  }

  [[nodiscard]] const CombinerLimits& limits() const noexcept { return limits_; }

 private:
  enum class State { queued, taken, done };
  struct Slot {
    const Request* request;
    Combine mode;
    const ParkHooks* hooks;
    State state = State::queued;
    std::optional<Outcome> outcome;
    std::exception_ptr error;
    std::size_t combined = 0;
    std::condition_variable wake;
  };

  /// REQUIRES: lock held, `mine` queued at the front, a statement's place free. Throws only
  /// before it takes anything (std::bad_alloc); from there on every slot it takes is completed.
  void lead(std::unique_lock<std::mutex>& lock, Slot& mine) {
    std::vector<Slot*> batch = take_batch(mine);
    ++in_flight_;
    if (!queue_.empty() && in_flight_ < limits_.in_flight) wake(*queue_.front());
    lock.unlock();
    std::sort(batch.begin(), batch.end(), [](const Slot* a, const Slot* b) {
      return std::string_view(a->request->name) < std::string_view(b->request->name);
    });
    std::vector<Outcome> outcomes;
    std::exception_ptr error;
    try {
      if (batch.size() == 1) {
        outcomes.push_back(one_(*batch.front()->request));
      } else {
        std::vector<Request> requests;
        requests.reserve(batch.size());
        for (const Slot* slot : batch) requests.push_back(*slot->request);
        outcomes = many_(requests);
        if (outcomes.size() != batch.size())
          throw std::logic_error("a combined statement's outcomes do not match its requests");
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    --in_flight_;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Slot& slot = *batch[i];
      if (error)
        slot.error = &slot == &mine ? error : own_copy(error);
      else
        slot.outcome = std::move(outcomes[i]);
      slot.combined = batch.size();
      slot.state = State::done;
      if (&slot != &mine) wake(slot);
    }
    if (!queue_.empty() && in_flight_ < limits_.in_flight) wake(*queue_.front());
  }

  /// `mine` first, then in queue order the requests that may join it (not `alone`, a name not
  /// yet in the batch), up to max_batch; takes them off the queue.
  std::vector<Slot*> take_batch(Slot& mine) {
    std::vector<Slot*> batch;
    batch.reserve(limits_.max_batch);  // the one allocation, before the queue changes
    batch.push_back(&mine);
    queue_.pop_front();
    if (mine.mode == Combine::yes) {
      for (auto it = queue_.begin(); it != queue_.end() && batch.size() < limits_.max_batch;) {
        Slot* slot = *it;
        bool joins = slot->mode == Combine::yes && std::none_of(batch.begin(), batch.end(), [&](const Slot* in) {
                       return std::string_view(in->request->name) == std::string_view(slot->request->name);
                     });
        if (joins) {
          batch.push_back(slot);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Slot* slot : batch) slot->state = State::taken;
    return batch;
  }

  /// A copy of the error for one caller, built afresh from its message. Callers on other threads
  /// catch it, read it and let it go; an exception object shared between threads (or a copy of
  /// one, which shares the message's reference-counted buffer) is destroyed by whichever thread
  /// lets go last, with no ordering the others can see (ThreadSanitizer reports it). Made on the
  /// leader's thread before it hands the outcomes over under the mutex. Without memory for a copy,
  /// the shared error: every caller must be completed.
  static std::exception_ptr own_copy(const std::exception_ptr& error) noexcept {
    try {
      return copy_of(error);
    } catch (...) {
      return error;
    }
  }
  static std::exception_ptr copy_of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const OutcomeUnknown& e) {
      return std::make_exception_ptr(OutcomeUnknown(fresh(e), e.sqlstate()));
    } catch (const TransientError& e) {
      return std::make_exception_ptr(TransientError(fresh(e), e.sqlstate()));
    } catch (const SchemaError& e) {
      return std::make_exception_ptr(SchemaError(e.reason(), fresh(e)));
    } catch (const PermissionDenied& e) {
      return std::make_exception_ptr(PermissionDenied(fresh(e)));
    } catch (const DatabaseError& e) {
      return std::make_exception_ptr(DatabaseError(fresh(e), e.sqlstate()));
    } catch (const ConnectionError& e) {
      return std::make_exception_ptr(ConnectionError(fresh(e), e.sqlstate()));
    } catch (const InvalidArgument& e) {
      return std::make_exception_ptr(InvalidArgument(fresh(e)));
    } catch (const Timeout& e) {
      return std::make_exception_ptr(Timeout(fresh(e)));
    } catch (const LockLost& e) {
      return std::make_exception_ptr(LockLost(fresh(e)));
    } catch (const NotHeld& e) {
      return std::make_exception_ptr(NotHeld(fresh(e)));
    } catch (const Error& e) {
      return std::make_exception_ptr(Error(e.category(), fresh(e), e.sqlstate()));
    } catch (const std::logic_error& e) {
      return std::make_exception_ptr(std::logic_error(fresh(e)));
    } catch (const std::exception& e) {
      return std::make_exception_ptr(std::runtime_error(fresh(e)));
    } catch (...) {
      return std::make_exception_ptr(std::runtime_error("a combined statement failed"));
    }
  }
  static std::string fresh(const std::exception& e) { return std::string(std::string_view(e.what())); }

  static void wake(Slot& slot) {
    if (slot.hooks != nullptr && slot.hooks->resumed) slot.hooks->resumed();
    slot.wake.notify_one();
  }

  CombinerLimits limits_;
  SendOne one_;
  SendMany many_;
  std::mutex mutex_;
  std::deque<Slot*> queue_;  // requests not yet taken; the slots live on their callers' stacks
  std::size_t in_flight_ = 0;
};

}  // namespace dblock::detail
