#include "ir/escape.h"

#include <cstdint>

namespace fusec {

namespace {

/// Bytes in the well-formed UTF-8 sequence starting at s[i] (Unicode 15, table 3-7), or 0 when
/// none starts there (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF).
size_t utf8_length(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  auto cont = [&](size_t k, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i + k < s.size() && b(k) >= lo && b(k) <= hi;
  };
  uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void hex_byte(std::string& out, uint8_t c) {
  static const char* digits = "0123456789abcdef";
  out += "\\x";
  out += digits[c >> 4];
  out += digits[c & 15];
}

}  // namespace

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_length(s, i);
    uint8_t c = static_cast<uint8_t>(s[i]);
    if (n == 0) {
      hex_byte(out, c);
      ++i;
    } else if (n == 1 && (c < 0x20 || c == 0x7F)) {
      if (c == '\n')
        out += "\\n";
      else if (c == '\r')
        out += "\\r";
      else if (c == '\t')
        out += "\\t";
      else
        hex_byte(out, c);
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<uint8_t>(s[i + 1]) < 0xA0) {  // C1: U+0080..U+009F
      hex_byte(out, c);
      hex_byte(out, static_cast<uint8_t>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string utf8_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_length(s, i);
    if (n == 0) {
      hex_byte(out, static_cast<uint8_t>(s[i]));
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string markdown_text(std::string_view s) {
  std::string line = one_line(s), out;
  out.reserve(line.size());
  for (char c : line) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '|':
      case '~':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace fusec
