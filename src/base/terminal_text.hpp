#pragma once
// Text from outside (lock names, owners, server messages) made safe to print on a terminal or in
// a line-based log: one line, no escape sequence, no reordering.

#include <string>
#include <string_view>

namespace dblock::detail {

/// `text` with every character that could move the cursor, start an escape sequence, end the
/// line or reorder the display written as an escape, and everything else unchanged:
/// - a backslash becomes `\\` (so the result reads back unambiguously);
/// - C0 controls (newline, tab, ESC, ...) and DEL become `\xNN`;
/// - C1 controls (U+0080..U+009F) and the bidirectional controls (U+200E, U+200F, U+202A..U+202E,
///   U+2066..U+2069) become `\u{NNNN}`;
/// - a byte that is not part of valid UTF-8 becomes `\xNN`.
[[nodiscard]] std::string terminal_safe(std::string_view text);

}  // namespace dblock::detail
