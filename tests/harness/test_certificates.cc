#include "tests/harness/test_certificates.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "tests/harness/process.h"

namespace herd::testing {

absl::Status MakeCertificates(const std::string& dir, const std::vector<std::string>& clients) {
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string script = "set -e; cd '" + dir + "'; " +
                       "openssl req -x509 " + key + " -keyout ca.key -out ca.crt -days 1 -subj /CN=herd-test-ca; " +
                       "openssl req " + key + " -keyout server.key -out server.csr -subj /CN=127.0.0.1; " +
                       "printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext; " +
                       "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt " +
                       "-days 1 -extfile server.ext; ";
  for (const std::string& client : clients) {
    script += "openssl req " + key + " -keyout " + client + ".key -out " + client + ".csr -subj /CN=" + client +
              "; openssl x509 -req -in " + client + ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -out " + client +
              ".crt -days 1; ";
  }
  CommandResult made = RunCommand({"/bin/bash", "-c", script}, std::chrono::seconds(60));
  if (made.exit_code != 0) return absl::InternalError(absl::StrCat("openssl failed in ", dir, ": ", made.err));
  return absl::OkStatus();
}

}  // namespace herd::testing
