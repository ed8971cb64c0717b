#include "worker/daemon/exit_message.h"

#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"

namespace herd::worker {
namespace {

// Enough log tail to find a last line without reading a huge log whole.
constexpr std::streamoff kLogTailBytes = 64 * 1024;

std::string ReadAtMost(const std::string& path, std::streamoff max_bytes, bool from_end) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size <= 0) return "";
  std::streamoff start = from_end && size > max_bytes ? size - max_bytes : 0;
  std::streamoff length = std::min(size - start, max_bytes);
  std::string data(static_cast<size_t>(length), '\0');
  in.seekg(start);
  in.read(data.data(), length);
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

absl::string_view LastNonEmptyLine(absl::string_view text) {
  while (!text.empty()) {
    size_t newline = text.rfind('\n');
    absl::string_view line = newline == absl::string_view::npos ? text : text.substr(newline + 1);
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) return line;
    if (newline == absl::string_view::npos) break;
    text = text.substr(0, newline);
  }
  return {};
}

// Length of the UTF-8 sequence starting at text[i], or 0 if invalid.
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  unsigned char lead = static_cast<unsigned char>(text[i]);
  size_t length = 0;
  unsigned int min_code = 0;
  unsigned int code = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, min_code = 0x80, code = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, min_code = 0x800, code = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, min_code = 0x10000, code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    unsigned char next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3F);
  }
  bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  if (code < min_code || code > 0x10FFFF || surrogate) return 0;
  return length;
}

}  // namespace

std::string SanitizeUtf8(absl::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t length = Utf8SequenceLength(text, i);
    size_t emitted = length == 0 ? 1 : length;
    if (out.size() + emitted > max_bytes) break;
    if (length == 0) {
      out.push_back('?');
    } else {
      out.append(text.data() + i, length);
    }
    i += emitted;
  }
  return out;
}

std::string ReadExitMessage(const std::string& termination_message_path, const std::string& log_path) {
  // Read a little past the limit so trimming whitespace cannot shorten a
  // long message below what we keep.
  std::string message = ReadAtMost(termination_message_path, kMaxExitMessageBytes + 64, /*from_end=*/false);
  absl::string_view trimmed = absl::StripAsciiWhitespace(message);
  if (trimmed.empty()) {
    message = ReadAtMost(log_path, kLogTailBytes, /*from_end=*/true);
    trimmed = LastNonEmptyLine(message);
  }
  return std::string(absl::StripTrailingAsciiWhitespace(SanitizeUtf8(trimmed, kMaxExitMessageBytes)));
}

}  // namespace herd::worker
