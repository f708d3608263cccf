// libFuzzer target for the parsers that see untrusted text first: store URIs (and their
// redaction), durations, lock names and identifiers. The only acceptable failure is
// dblock::InvalidArgument; anything else (another exception, a crash, UB, a leak, a password that
// survives redaction) is a finding. Built and run briefly by tools/test.sh with clang.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include <dblock/errors.hpp>

#include "base/duration.hpp"
#include "base/uri.hpp"
#include "base/validate.hpp"

namespace {

template <class Fn>
void expect_clean(Fn&& parse) {
  try {
    parse();
  } catch (const dblock::InvalidArgument&) {
    // the documented answer to bad input
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  expect_clean([&] { (void)dblock::detail::parse_store_uri(text); });
  expect_clean([&] { (void)dblock::detail::resolve_store_uri(text, {}); });
  expect_clean([&] { (void)dblock::detail::parse_duration(text); });
  expect_clean([&] { dblock::detail::validate_lock_name(text); });
  expect_clean([&] { dblock::detail::validate_identifier("prefix", text, 40, true); });

  // A random password, placed wherever a DSN can carry one, never appears in the redacted URI nor
  // in any error text produced from it. (Templates whose fixed text contains the password, and
  // passwords cut by a raw separator of their slot, say nothing: skipped.)
  // The marker keeps the fuzzer from composing a "password" out of the message's own words.
  std::string password = "Zq9" + std::string(text.substr(0, std::min<std::size_t>(text.size(), 21)));
  if (password.size() >= 4 && password.find('\0') == std::string::npos) {
    const std::string templates[] = {
        "postgresql://user:{}@127.0.0.1:5432/db?prefix=p",   "mysql://user:{}@127.0.0.1:3306/db",
        "postgresql://user@127.0.0.1/db?password={}&pool=2", "postgresql://user@127.0.0.1/db?sslpassword={}",
        "postgresql://user@127.0.0.1/db?pass%77ord={}",
    };
    for (std::size_t i = 0; i < std::size(templates); ++i) {
      const auto& shape = templates[i];
      auto slot = shape.find("{}");
      if (shape.find(password) != std::string::npos) continue;
      bool in_query = i >= 2;
      if (in_query && password.find_first_of("& ") != std::string::npos) continue;
      std::string uri = shape.substr(0, slot) + password + shape.substr(slot + 2);
      if (dblock::detail::redact_uri(uri).find(password) != std::string::npos) __builtin_trap();
      try {
        (void)dblock::detail::resolve_store_uri(uri, {});
      } catch (const dblock::Error& e) {
        if (std::string_view(e.what()).find(password) != std::string_view::npos) __builtin_trap();
      }
    }
  }
  return 0;
}
