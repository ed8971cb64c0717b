#include "bench/smoke_run.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <memory>

#include "bench/herd_binary.h"

namespace herd::bench {
namespace {

// Single quotes make every argument one shell word (the args hold no quotes).
std::string ShellWords(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) line += "'" + word + "' ";
  return line;
}

}  // namespace

nlohmann::json RunBenchmark(const std::string& package_path, const std::vector<std::string>& args) {
  std::vector<std::string> words = {FindHerdBinary(package_path, nullptr)};
  words.insert(words.end(), args.begin(), args.end());
  const std::string command = ShellWords(words);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return {};
  }
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << " failed:\n" << output;
  std::string last = output;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  nlohmann::json report = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object()) {
    ADD_FAILURE() << "last line is not a JSON object: " << last << "\nfull output:\n" << output;
    return {};
  }
  return report;
}

void ExpectPositive(const nlohmann::json& object, const std::string& key, const std::string& where) {
  ASSERT_TRUE(object.is_object() && object.contains(key)) << where << ": no '" << key << "' in " << object.dump();
  ASSERT_TRUE(object.at(key).is_number()) << where << "." << key << " is not a number: " << object.at(key).dump();
  EXPECT_GT(object.at(key).get<double>(), 0) << where << "." << key;
}

}  // namespace herd::bench
