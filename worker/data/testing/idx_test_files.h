// Writes small IDX files (raw or gzip) for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace herd {

// The bytes of a ubyte IDX file with these dims and data.
std::vector<uint8_t> IdxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data);

void WriteRawFile(const std::string& path, const std::vector<uint8_t>& bytes);
void WriteGzipFile(const std::string& path, const std::vector<uint8_t>& bytes);

// A fresh empty folder under the test's temp dir.
std::string MakeTempFolder(const std::string& name);

}  // namespace herd
