// Prepared-statement ids as the backends assign them: one id per distinct text, the same id for
// the same text, dense from 0, from any number of threads at once.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backends/statement_ids.hpp"

namespace {

using dblock::detail::StatementIds;

TEST(StatementIds, TheSameTextKeepsItsIdAndAnotherTextGetsTheNext) {
  StatementIds ids;
  EXPECT_EQ(ids.size(), 0u);
  EXPECT_FALSE(ids.text_of(0));
  auto select = ids.of("SELECT 1");
  auto release = ids.of("SELECT RELEASE_LOCK(?)");
  EXPECT_EQ(select, 0u);
  EXPECT_EQ(release, 1u);
  EXPECT_EQ(ids.of(std::string("SELECT ") + "1"), select);  // by text, not by the caller's object
  EXPECT_NE(ids.of("SELECT 1 "), select);                   // one byte makes another statement
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.text_of(release), "SELECT RELEASE_LOCK(?)");
  EXPECT_EQ(ids.text_of(2), "SELECT 1 ");
  EXPECT_FALSE(ids.text_of(3));
}

TEST(StatementIds, ThreadsBuildingStatementSetsAtOnceShareOneDenseNumbering) {
  constexpr int kThreads = 8;
  constexpr int kTexts = 200;
  StatementIds ids;
  std::vector<std::vector<std::size_t>> seen(kThreads, std::vector<std::size_t>(kTexts));
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        // Each thread walks every text from its own start, half of them backwards, so they race
        // for the same new texts.
        for (int i = 0; i < kTexts; ++i) {
          int step = (i + 29 * t) % kTexts;
          int text = t % 2 == 0 ? step : kTexts - 1 - step;
          seen[t][text] = ids.of(fmt::format("SELECT {}", text));
        }
      });
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kTexts));
  std::set<std::size_t> distinct;
  for (int text = 0; text < kTexts; ++text) {
    for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t][text], seen[0][text]) << "text " << text;
    distinct.insert(seen[0][text]);
    EXPECT_EQ(ids.text_of(seen[0][text]), fmt::format("SELECT {}", text));
  }
  ASSERT_EQ(distinct.size(), static_cast<std::size_t>(kTexts));
  EXPECT_EQ(*distinct.rbegin(), static_cast<std::size_t>(kTexts - 1));  // dense: 0 .. kTexts-1
}

}  // namespace
