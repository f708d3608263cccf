#include "testing/fault_hook.hpp"

#include <algorithm>

namespace dblock::testing {

namespace {

bool hits(Statements which, std::string_view what) {
  auto starts = [&](std::string_view prefix) { return what.starts_with(prefix); };
  switch (which) {
    case Statements::acquire:
      return what == "acquire";
    case Statements::renew:
      return what == "renew";
    case Statements::release:
      return what == "release";
    case Statements::fence:
      return what == "beginning a fenced transaction";
    case Statements::occurrence:
      return what == "claiming an occurrence" || what == "recording an occurrence";
    case Statements::reap:
      return starts("reaping");
    case Statements::any:
      return !starts("testing: ");  // never the test store's own control
  }
  return false;
}

}  // namespace

detail::StatementFault FaultHook::before(std::string_view what) {
  std::unique_lock lock(mutex_);
  // While steal() hands a name over, other threads' acquisitions wait for it to finish.
  if (what == "acquire")
    stall_changed_.wait(lock,
                        [&] { return !handing_over_ || *handing_over_ == std::this_thread::get_id() || closing_; });
  auto it = std::ranges::find_if(pending_, [&](const Pending& p) { return hits(p.which, what); });
  if (it == pending_.end()) return detail::StatementFault::none;
  auto fault = it->fault;
  if (--it->times <= 0) pending_.erase(it);
  switch (fault) {
    case Fault::busy:
      return detail::StatementFault::busy;
    case Fault::error:
      return detail::StatementFault::error;
    case Fault::disconnect:
      return detail::StatementFault::disconnect;
    case Fault::reply_lost:
      return detail::StatementFault::reply_lost;
    case Fault::stall:
      break;
  }
  // The thread waits here, outside the writer's turn; for the clock it is done meanwhile.
  auto released_at = releases_;
  ++stalled_;
  clock_->park(std::this_thread::get_id());
  stall_changed_.notify_all();
  // Let go too when the thread's manager ends (it joins the thread).
  auto me = std::this_thread::get_id();
  stall_changed_.wait(lock, [&] { return releases_ != released_at || closing_ || clock_->retired(me); });
  clock_->unpark(std::this_thread::get_id());
  --stalled_;
  stall_changed_.notify_all();
  return detail::StatementFault::none;
}

}  // namespace dblock::testing
