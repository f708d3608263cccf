#pragma once
// The sidecar's read-only status page and its JSON twin: every holder with kind, state, token,
// lease left and age, the lock-table census, and what the database cannot show (waiters).

#include <string>
#include <string_view>

#include "dblock/status_source.hpp"

namespace dblock::cli {

/// `text` safe inside HTML text and attribute values: & < > " ' escaped, control and
/// bidirectional characters written out visibly (as `dblock locks` does on a terminal).
std::string html_escape(std::string_view text);

/// A complete HTML document: inline CSS, no script, no external asset. `refresh_seconds`: the
/// page reloads itself that often (0: never).
std::string render_status_html(const StatusSnapshot& status, std::string_view store, int refresh_seconds);
std::string render_status_json(const StatusSnapshot& status, std::string_view store);

}  // namespace dblock::cli
