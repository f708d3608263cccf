// The public face of the base layer's text rules (include/dblock/text.hpp).
#include <dblock/text.hpp>

#include "backends/backend_factory.hpp"
#include "base/duration.hpp"
#include "base/holder_kind.hpp"
#include "base/json.hpp"
#include "base/terminal_text.hpp"
#include "base/validate.hpp"

namespace dblock {

std::chrono::milliseconds parse_duration(std::string_view text) { return detail::parse_duration(text); }
std::string format_duration(std::chrono::milliseconds duration) { return detail::format_duration(duration); }
void validate_lock_name(std::string_view name) { detail::validate_lock_name(name); }
void validate_ttl(std::chrono::milliseconds ttl) { detail::validate_ttl(ttl, {}); }
std::string terminal_safe(std::string_view text) { return detail::terminal_safe(text); }
std::string_view holder_kind_name(HolderKind kind) noexcept { return detail::kind_text(kind); }
std::string json_string(std::string_view text) { return detail::json_string(text); }
std::vector<std::string> compiled_backends() { return detail::compiled_backends(); }

}  // namespace dblock
