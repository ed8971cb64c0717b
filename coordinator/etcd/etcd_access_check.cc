#include "coordinator/etcd/etcd_access_check.h"

#include "absl/strings/str_cat.h"

namespace herd::coordinator {
namespace {

// Whether the failure is etcd's absence, which campaigning waits out.
bool Unreachable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

absl::Status Refused(const EtcdClient& client, const std::string& prefix, const char* what,
                     const absl::Status& status) {
  if (!absl::IsPermissionDenied(status)) return status;  // names the user and the endpoint already
  const std::string user = client.user().empty() ? "(the client certificate's)" : client.user();
  return absl::PermissionDeniedError(absl::StrCat(
      "etcd user ", user, " may not ", what, " under the key prefix ", prefix,
      " (permission denied): grant its role readwrite on the prefix, e.g. etcdctl role grant-permission ROLE ",
      "--prefix=true readwrite ", prefix, " (", status.message(), ")"));
}

}  // namespace

absl::Status CheckEtcdAccess(EtcdClient& client, const std::string& prefix) {
  etcdserverpb::RangeRequest read;
  read.set_key(prefix);
  read.set_range_end(PrefixRangeEnd(prefix));
  read.set_count_only(true);
  if (auto status = client.Range(read).status(); !status.ok()) {
    return Unreachable(status) ? absl::OkStatus() : Refused(client, prefix, "read", status);
  }
  etcdserverpb::TxnRequest write;
  etcdserverpb::Compare* never = write.add_compare();
  never->set_key(prefix);
  never->set_target(etcdserverpb::Compare::VERSION);
  never->set_result(etcdserverpb::Compare::LESS);
  never->set_version(0);  // no key's version is below 0
  etcdserverpb::PutRequest* put = write.add_success()->mutable_request_put();
  put->set_key(prefix);
  // A delete of a range under the prefix (as the store deletes its staged
  // batches) that does not overlap the put: etcd refuses a transaction
  // that names one key twice.
  const std::string staged = prefix + "split/";
  etcdserverpb::DeleteRangeRequest* erase = write.add_success()->mutable_request_delete_range();
  erase->set_key(staged);
  erase->set_range_end(PrefixRangeEnd(staged));
  auto written = client.Txn(write);
  if (!written.ok()) {
    return Unreachable(written.status()) ? absl::OkStatus() : Refused(client, prefix, "write", written.status());
  }
  if (written->succeeded()) return absl::InternalError("etcd access check: a transaction that cannot succeed did");
  return absl::OkStatus();
}

}  // namespace herd::coordinator
