#include "worker/data/npy_header.h"

#include <cctype>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr int64_t kMagicBytes = 6;

// A cursor over the header's Python dict literal:
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class Literal {
 public:
  explicit Literal(std::string text) : text_(std::move(text)) {}

  void SkipSpace() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool Take(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool String(std::string* out) {
    SkipSpace();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) return false;
    const char quote = text_[at_];
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string::npos) return false;
    *out = text_.substr(at_ + 1, end - at_ - 1);
    at_ = end + 1;
    return true;
  }
  bool Word(std::string* out) {
    SkipSpace();
    const size_t start = at_;
    while (at_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[at_]))) ++at_;
    *out = text_.substr(start, at_ - start);
    return !out->empty();
  }
  // (), (5,), (3, 4)
  bool Tuple(std::vector<int64_t>* out) {
    if (!Take('(')) return false;
    while (!Take(')')) {
      std::string digits;
      int64_t value = 0;
      if (!Word(&digits) || !absl::SimpleAtoi(digits, &value) || value < 0) return false;
      out->push_back(value);
      if (!Take(',') && !(SkipSpace(), at_ < text_.size() && text_[at_] == ')')) return false;
    }
    return true;
  }

 private:
  std::string text_;
  size_t at_ = 0;
};

int ItemBytes(const std::string& descr) {
  static const std::map<std::string, int> known = {
      {"f4", 4}, {"f2", 2}, {"f8", 8}, {"u1", 1}, {"i1", 1}, {"u2", 2}, {"i2", 2},
      {"u4", 4}, {"i4", 4}, {"u8", 8}, {"i8", 8}, {"b1", 1}};
  auto it = known.find(descr.substr(1));
  return it == known.end() ? 0 : it->second;
}

}  // namespace

int64_t NpyHeader::element_count() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(const uint8_t* bytes, int64_t size) {
  if (size < kMagicBytes + 4 || std::memcmp(bytes, kMagic, kMagicBytes) != 0) {
    return absl::InvalidArgumentError("not a .npy file (no \\x93NUMPY magic at its start)");
  }
  const int major = bytes[6];
  if (major < 1 || major > 3) {
    return absl::InvalidArgumentError(absl::StrCat(".npy format version ", major, ".", int{bytes[7]},
                                                   " is not supported (1, 2 or 3)"));
  }
  int64_t header_bytes = 0, prefix = 0;
  if (major == 1) {
    header_bytes = bytes[8] | (bytes[9] << 8);
    prefix = 10;
  } else {
    if (size < 12) return absl::DataLossError("truncated .npy header");
    header_bytes = int64_t{bytes[8]} | (int64_t{bytes[9]} << 8) | (int64_t{bytes[10]} << 16) | (int64_t{bytes[11]} << 24);
    prefix = 12;
  }
  if (prefix + header_bytes > size) {
    return absl::DataLossError(absl::StrCat("truncated .npy header: it says ", header_bytes, " bytes, the file has ",
                                            size - prefix, " after the prefix"));
  }
  Literal literal(std::string(reinterpret_cast<const char*>(bytes + prefix), header_bytes));
  NpyHeader header;
  header.data_offset = prefix + header_bytes;
  bool have_descr = false, have_order = false, have_shape = false;
  const auto malformed = absl::InvalidArgumentError("malformed .npy header dictionary");
  if (!literal.Take('{')) return malformed;
  while (!literal.Take('}')) {
    std::string key;
    if (!literal.String(&key) || !literal.Take(':')) return malformed;
    if (key == "descr") {
      if (!literal.String(&header.descr)) {
        return absl::InvalidArgumentError(".npy descr is not a plain dtype (structured arrays are not supported)");
      }
      have_descr = true;
    } else if (key == "fortran_order") {
      std::string word;
      if (!literal.Word(&word) || (word != "False" && word != "True")) return malformed;
      if (word == "True") {
        return absl::InvalidArgumentError(
            ".npy array is in Fortran (column-major) order; save it C-ordered (np.ascontiguousarray)");
      }
      have_order = true;
    } else if (key == "shape") {
      if (!literal.Tuple(&header.shape)) return absl::InvalidArgumentError("malformed .npy shape");
      have_shape = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown .npy header key '", key, "'"));
    }
    if (!literal.Take(',')) {
      if (!literal.Take('}')) return malformed;
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape) {
    return absl::InvalidArgumentError(".npy header lacks descr, fortran_order or shape");
  }
  header.item_bytes = ItemBytes(header.descr);
  if (header.descr.size() != 3 || header.item_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(".npy dtype '", header.descr, "' is not a numeric dtype"));
  }
  if (header.descr[0] == '>' && header.item_bytes > 1) {
    return absl::InvalidArgumentError(absl::StrCat(".npy dtype '", header.descr,
                                                   "' is big-endian; save it little-endian (astype('<",
                                                   header.descr.substr(1), "'))"));
  }
  // Element counts beyond 2^62 bytes cannot be a real file; refuse before multiplying further.
  int64_t count = 1;
  for (int64_t d : header.shape) {
    if (d != 0 && count > (int64_t{1} << 62) / d) return absl::InvalidArgumentError("absurd .npy shape");
    count *= d;
  }
  return header;
}

}  // namespace herd
