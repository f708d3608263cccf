// The combiner alone, over statements the test holds: a lone request goes at once and alone;
// requests that arrive while statements are out go together, each name once, in byte order, at
// most max_batch; every caller of a failed statement gets its error; a repeat after a transient
// error is never combined; a request nobody could send gives up with nothing sent.

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend_errors.hpp"
#include "core/combiner.hpp"

namespace {

using namespace std::chrono_literals;
using dblock::detail::Combine;
using dblock::detail::Combiner;
using dblock::detail::CombinerLimits;

struct Request {
  std::string_view name;
};

/// Statements the test lets go of: each call blocks until the latch opens (when closed), and the
/// combiner's waiting threads are counted through the park hooks.
class Statements {
 public:
  std::mutex mutex;
  std::condition_variable changed;
  bool open = true;
  std::vector<std::vector<std::string>> sent;  // the names of each statement, in order sent
  std::atomic<int> parked{0};
  std::function<void()> fail;  // throws, when set, for combined statements

  std::string one(const Request& r) {
    wait_and_record({std::string(r.name)});
    return "one:" + std::string(r.name);
  }
  std::vector<std::string> many(std::span<const Request> requests) {
    std::vector<std::string> names;
    for (auto& r : requests) names.emplace_back(r.name);
    wait_and_record(names);
    if (fail) fail();
    std::vector<std::string> out;
    for (auto& n : names) out.push_back("many:" + n);
    return out;
  }
  void set_open(bool value) {
    {
      std::lock_guard lock(mutex);
      open = value;
    }
    changed.notify_all();
  }
  bool wait_parked(int count) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (parked.load() < count)
      if (std::chrono::steady_clock::now() > until)
        return false;
      else
        std::this_thread::sleep_for(1ms);
    return true;
  }
  std::vector<std::vector<std::string>> statements() {
    std::lock_guard lock(mutex);
    return sent;
  }

 private:
  void wait_and_record(std::vector<std::string> names) {
    std::unique_lock lock(mutex);
    sent.push_back(std::move(names));
    changed.notify_all();
    if (!changed.wait_for(lock, 10s, [&] { return open; })) throw std::runtime_error("the test never opened the latch");
  }
};

using TestCombiner = Combiner<Request, std::string>;

std::unique_ptr<TestCombiner> make(Statements& statements, CombinerLimits limits) {
  return std::make_unique<TestCombiner>(
      limits, [&](const Request& r) { return statements.one(r); },
      [&](std::span<const Request> r) { return statements.many(r); });
}

/// Submits from a new thread that counts itself parked when the combiner makes it wait.
std::future<std::string> submit_async(TestCombiner& combiner, Statements& statements, std::string_view name,
                                      Combine mode = Combine::yes, std::size_t* carried = nullptr) {
  return std::async(std::launch::async, [&combiner, &statements, name, mode, carried] {
    dblock::detail::ParkHooks hooks{[&statements] { ++statements.parked; }, {}};
    dblock::detail::park_hooks = &hooks;
    std::size_t combined = 0;
    Request request{name};
    auto out = combiner.submit(request, mode, combined);
    if (carried != nullptr) *carried = combined;
    return out;
  });
}

/// Holds the one statement a combiner with in_flight 1 may send, so that what follows queues.
bool hold_first_statement(TestCombiner& combiner, Statements& statements, std::future<std::string>& first) {
  statements.set_open(false);
  auto before = statements.statements().size();
  first = submit_async(combiner, statements, "first");
  auto until = std::chrono::steady_clock::now() + 10s;
  while (statements.statements().size() == before)
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      std::this_thread::sleep_for(1ms);
  return true;
}

TEST(Combiner, ALoneRequestGoesAtOnceAndAlone) {
  Statements statements;
  auto combiner = make(statements, {.max_batch = 8, .in_flight = 1});
  std::size_t combined = 0;
  Request request{"solo"};
  EXPECT_EQ(combiner->submit(request, Combine::yes, combined), "one:solo");
  EXPECT_EQ(combined, 1U);
  EXPECT_EQ(statements.statements(), (std::vector<std::vector<std::string>>{{"solo"}}));
}

TEST(Combiner, RequestsArrivingWhileAStatementIsOutGoTogetherInByteOrder) {
  Statements statements;
  auto combiner = make(statements, {.max_batch = 8, .in_flight = 1});
  std::future<std::string> first;
  ASSERT_TRUE(hold_first_statement(*combiner, statements, first));
  std::vector<std::string> names{"e", "b", "d", "a", "c"};
  std::vector<std::size_t> carried(names.size());
  std::vector<std::future<std::string>> rest;
  for (std::size_t i = 0; i < names.size(); ++i)
    rest.push_back(submit_async(*combiner, statements, names[i], Combine::yes, &carried[i]));
  ASSERT_TRUE(statements.wait_parked(5));
  statements.set_open(true);
  EXPECT_EQ(first.get(), "one:first");
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(rest[i].get(), "many:" + names[i]);  // each caller gets its own outcome
    EXPECT_EQ(carried[i], 5U);
  }
  EXPECT_EQ(statements.statements(), (std::vector<std::vector<std::string>>{{"first"}, {"a", "b", "c", "d", "e"}}));
}

TEST(Combiner, ANameNeverAppearsTwiceInOneStatementAndNoneCarriesMoreThanMaxBatch) {
  Statements statements;
  auto combiner = make(statements, {.max_batch = 3, .in_flight = 1});
  std::future<std::string> first;
  ASSERT_TRUE(hold_first_statement(*combiner, statements, first));
  std::vector<std::string> names{"a", "a", "b", "c", "d", "e", "f"};
  std::vector<std::future<std::string>> rest;
  for (auto& name : names) rest.push_back(submit_async(*combiner, statements, name));
  ASSERT_TRUE(statements.wait_parked(7));
  statements.set_open(true);
  first.get();
  for (auto& r : rest) r.get();
  auto sent = statements.statements();
  std::size_t requests = 0;
  for (std::size_t i = 1; i < sent.size(); ++i) {
    EXPECT_LE(sent[i].size(), 3U);
    EXPECT_TRUE(std::is_sorted(sent[i].begin(), sent[i].end()));
    EXPECT_EQ(std::adjacent_find(sent[i].begin(), sent[i].end()), sent[i].end()) << "a name twice in one statement";
    requests += sent[i].size();
  }
  EXPECT_EQ(requests, 7U);
  EXPECT_LE(sent.size(), 1U + 4U);  // combined: 7 requests in at most 4 statements
}

TEST(Combiner, EveryCallerOfAFailedStatementGetsItsErrorAndARepeatGoesAlone) {
  Statements statements;
  auto combiner = make(statements, {.max_batch = 8, .in_flight = 1});
  statements.fail = [] { throw dblock::detail::OutcomeUnknown("reply lost (test)"); };
  std::future<std::string> first;
  ASSERT_TRUE(hold_first_statement(*combiner, statements, first));
  std::vector<std::future<std::string>> rest;
  for (auto name : {"x", "y", "z"}) rest.push_back(submit_async(*combiner, statements, name));
  ASSERT_TRUE(statements.wait_parked(3));
  statements.set_open(true);
  first.get();
  for (auto& r : rest) EXPECT_THROW(r.get(), dblock::detail::OutcomeUnknown);

  // Repeats after a transient error: queued together, yet each goes in a statement of its own.
  ASSERT_TRUE(hold_first_statement(*combiner, statements, first));
  statements.parked = 0;
  std::vector<std::future<std::string>> repeats;
  for (auto name : {"p", "q", "r"}) repeats.push_back(submit_async(*combiner, statements, name, Combine::alone));
  ASSERT_TRUE(statements.wait_parked(3));
  statements.set_open(true);
  first.get();
  for (auto& r : repeats) EXPECT_TRUE(r.get().starts_with("one:"));
}

TEST(Combiner, ARequestNobodyCouldSendGivesUpWithNothingSent) {
  Statements statements;
  auto combiner = make(statements, {.max_batch = 8, .in_flight = 1, .queue_timeout = 100ms});
  std::future<std::string> first;
  ASSERT_TRUE(hold_first_statement(*combiner, statements, first));
  auto late = submit_async(*combiner, statements, "late");
  EXPECT_THROW(late.get(), dblock::ConnectionError);
  statements.set_open(true);
  first.get();
  EXPECT_EQ(statements.statements(), (std::vector<std::vector<std::string>>{{"first"}}));
}

}  // namespace
