#include "coordinator/auth_file.h"

#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/private_file.h"
#include "coordinator/validation.h"

namespace herd::coordinator {
namespace {

constexpr char kTokenPrefix[] = "sha256:";
constexpr char kCertPrefix[] = "cert:";

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == '@'; }

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

bool IsLowerHex(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

absl::StatusOr<Role> ParseRole(absl::string_view text) {
  if (text == "user") return Role::kUser;
  if (text == "worker") return Role::kWorker;
  if (text == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(absl::StrCat("unknown role '", text, "' (expected user, worker or admin)"));
}

// One worker id pattern: a valid id, or a prefix of one followed by '*'.
absl::Status CheckWorkerPattern(const std::string& pattern) {
  std::string id = pattern;
  if (!id.empty() && id.back() == '*') {
    id.pop_back();
    if (id.empty()) return absl::OkStatus();  // "*": every id, for one trusted pool
  }
  return ValidateWorkerId(id);
}

absl::StatusOr<Credential> ParseLine(const std::vector<std::string>& fields) {
  if (fields.size() < 3 || fields.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected PRINCIPAL ROLE CREDENTIAL [WORKER-IDS], got ", fields.size(), " fields"));
  }
  Credential credential;
  Principal& principal = credential.principal;
  principal.name = fields[0];
  if (!ValidName(principal.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("principal '", principal.name, "': use 1 to 128 letters, digits, '.', '_', '-' or '@'"));
  }
  auto role = ParseRole(fields[1]);
  if (!role.ok()) return role.status();
  principal.role = *role;
  const std::string& secret = fields[2];
  if (absl::StartsWith(secret, kTokenPrefix)) {
    credential.token_sha256 = secret.substr(sizeof(kTokenPrefix) - 1);
    if (credential.token_sha256.size() != 64 || !IsLowerHex(credential.token_sha256)) {
      return absl::InvalidArgumentError("sha256: must be followed by 64 lower-case hex digits (the token's SHA-256)");
    }
  } else if (absl::StartsWith(secret, kCertPrefix)) {
    credential.cert_identity = secret.substr(sizeof(kCertPrefix) - 1);
    if (credential.cert_identity.empty()) return absl::InvalidArgumentError("cert: needs the certificate identity");
  } else {
    return absl::InvalidArgumentError("the credential must be sha256:HEX or cert:IDENTITY");
  }
  if (principal.role == Role::kWorker) {
    if (fields.size() != 4) {
      return absl::InvalidArgumentError("a worker credential needs the worker ids it speaks for (w0,w1,gpu-*)");
    }
    principal.worker_ids = absl::StrSplit(fields[3], ',', absl::SkipEmpty());
    if (principal.worker_ids.empty()) return absl::InvalidArgumentError("worker ids: none given");
    for (const std::string& pattern : principal.worker_ids) {
      if (auto status = CheckWorkerPattern(pattern); !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("worker ids: '", pattern, "': ", status.message()));
      }
    }
  } else if (fields.size() == 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("only worker credentials list worker ids; role ", RoleName(principal.role), " has none"));
  }
  return credential;
}

bool SamePrincipal(const Principal& a, const Principal& b) {
  return a.role == b.role && a.worker_ids == b.worker_ids;
}

}  // namespace

absl::StatusOr<AuthTable> ParseAuthFile(const std::string& text, const std::string& source) {
  AuthTable table;
  std::map<std::string, Principal> principals;
  std::set<std::string> secrets;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<std::string> fields = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto fail = [&](absl::string_view message) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ": ", message));
    };
    auto credential = ParseLine(fields);
    if (!credential.ok()) return fail(credential.status().message());
    auto [known, added] = principals.emplace(credential->principal.name, credential->principal);
    if (!added && !SamePrincipal(known->second, credential->principal)) {
      return fail(absl::StrCat("principal '", credential->principal.name,
                               "' appears earlier with another role or other worker ids"));
    }
    const std::string secret = credential->token_sha256.empty() ? "cert:" + credential->cert_identity
                                                                : credential->token_sha256;
    if (!secrets.insert(secret).second) {
      return fail("this credential appears on an earlier line: a credential must name one principal");
    }
    table.credentials.push_back(*std::move(credential));
  }
  if (table.credentials.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no credentials: nobody could call the coordinator"));
  }
  return table;
}

absl::StatusOr<AuthTable> LoadAuthFile(const std::string& path) {
  auto text = ReadPrivateFile(path, "auth file");
  if (!text.ok()) return text.status();
  return ParseAuthFile(*text, path);
}

}  // namespace herd::coordinator
