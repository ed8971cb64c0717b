#include "common/control_chars.h"

#include "absl/strings/str_format.h"

namespace herd {
namespace {

bool IsC0OrDel(unsigned char c) { return c < 0x20 || c == 0x7f; }

// UTF-8 of U+0080..U+009F.
bool IsC1At(absl::string_view text, size_t i) {
  return static_cast<unsigned char>(text[i]) == 0xc2 && i + 1 < text.size() &&
         static_cast<unsigned char>(text[i + 1]) >= 0x80 && static_cast<unsigned char>(text[i + 1]) <= 0x9f;
}

}  // namespace

bool HasControlChars(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsC0OrDel(static_cast<unsigned char>(text[i])) || IsC1At(text, i)) return true;
  }
  return false;
}

std::string EscapeControlChars(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (IsC0OrDel(c)) {
      out += absl::StrFormat("\\x%02x", c);
    } else if (IsC1At(text, i)) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace herd
