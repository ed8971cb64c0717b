#include "coordinator/etcd/stored_row.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace herd::coordinator {

absl::StatusOr<sql::Value> ColumnDefault(const sql::ColumnSchema& column) {
  const std::string& constraints = column.constraints;
  const size_t at = constraints.find("DEFAULT ");
  if (at == std::string::npos) return absl::NotFoundError(absl::StrCat(column.name, " has no default"));
  absl::string_view text = absl::string_view(constraints).substr(at + 8);
  if (absl::ConsumePrefix(&text, "'")) {
    const size_t end = text.find('\'');
    if (end == absl::string_view::npos) return absl::InternalError(absl::StrCat(column.name, ": unclosed default"));
    return sql::Value(std::string(text.substr(0, end)));
  }
  text = text.substr(0, text.find(' '));
  if (column.type == sql::Type::kInteger) {
    int64_t integer = 0;
    if (absl::SimpleAtoi(text, &integer)) return sql::Value(integer);
  } else if (column.type == sql::Type::kReal) {
    double real = 0;
    if (absl::SimpleAtod(text, &real)) return sql::Value(real);
  }
  return absl::InternalError(absl::StrCat(column.name, ": default \"", text, "\" does not fit its type"));
}

}  // namespace herd::coordinator
