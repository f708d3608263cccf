#pragma once
// A strict JSON syntax check for tests (RFC 8259 grammar; no semantics): does `text` hold exactly
// one JSON value?

#include <cctype>
#include <string_view>

namespace dblock::test {

class JsonCheck {
 public:
  static bool is_json(std::string_view text) {
    JsonCheck check(text);
    return check.value() && (check.skip_space(), check.at_ == text.size());
  }

 private:
  explicit JsonCheck(std::string_view text) : text_(text) {}

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  bool eat(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }
  bool string() {
    if (!eat('"')) return false;
    while (at_ < text_.size()) {
      auto c = static_cast<unsigned char>(text_[at_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (at_ >= text_.size()) return false;
      char escape = text_[at_++];
      if (escape == 'u') {
        for (int i = 0; i < 4; ++i)
          if (at_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[at_++]))) return false;
      } else if (std::string_view("\"\\/bfnrt").find(escape) == std::string_view::npos) {
        return false;
      }
    }
    return false;
  }
  bool number() {
    auto start = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    while (at_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[at_])) || text_[at_] == '.' ||
                                  text_[at_] == 'e' || text_[at_] == 'E' || text_[at_] == '+' || text_[at_] == '-'))
      ++at_;
    return at_ > start;
  }
  bool value() {
    skip_space();
    if (at_ >= text_.size()) return false;
    char c = text_[at_];
    if (c == '"') return string();
    if (c == '{') {
      ++at_;
      if (eat('}')) return true;
      do {
        if (!string() || !eat(':') || !value()) return false;
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      ++at_;
      if (eat(']')) return true;
      do {
        if (!value()) return false;
      } while (eat(','));
      return eat(']');
    }
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    return number();
  }

  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace dblock::test
