// libFuzzer target for the parsers that see untrusted text first: store URIs (and their
// redaction), durations, lock names and identifiers. The only acceptable failure is
// dblock::InvalidArgument; anything else (another exception, a crash, UB, a leak, a password that
// survives redaction) is a finding. Built and run briefly by tools/test.sh with clang.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <dblock/errors.hpp>

#include "core/duration.hpp"
#include "core/uri.hpp"
#include "core/validate.hpp"

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

  // A password placed in the user-info part must never survive redaction.
  std::string secret = "S3cr3tPw";
  std::string uri = "postgresql://user:" + secret + "@" + std::string(text.substr(0, 64)) + "/db";
  bool host_is_plain = text.find_first_of("@/?") == std::string_view::npos && text.find(secret) == std::string_view::npos;
  if (host_is_plain && dblock::detail::redact_uri(uri).find(secret) != std::string::npos) __builtin_trap();
  return 0;
}
