// Plain-text tables with aligned columns, for the CLI's table output.
#pragma once

#include <string>
#include <vector>

namespace herd::client {

// Left-aligned columns separated by two spaces, one line per row, the header
// first; no trailing spaces.
std::string FormatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace herd::client
