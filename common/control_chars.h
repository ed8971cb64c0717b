// Control characters in strings that reach a terminal: a job name or a
// failure reason holding ESC [ 2 J or ESC ] 0 ; ... BEL would clear the
// screen or retitle the window of whoever runs `herd list`.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace herd {

// True when `text` holds a C0 control (0x00-0x1f), DEL (0x7f) or a C1
// control (U+0080-U+009F, as UTF-8 0xc2 0x80-0x9f).
bool HasControlChars(absl::string_view text);

// `text` with each control character (as above) and each backslash written
// as a C-style escape (\n, \t, \r, \\, \xNN; C1 controls as \u0080 to
// \u009f), so the result prints as one inert line and reads back unambiguously.
std::string EscapeControlChars(absl::string_view text);

}  // namespace herd
