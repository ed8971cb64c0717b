// SHA-256 as lower-case hex: checkpoint manifests and the token digests of
// auth files (what `sha256sum` prints).
#pragma once

#include <string>

namespace herd {

std::string Sha256Hex(const std::string& data);

}  // namespace herd
