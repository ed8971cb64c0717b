#include "worker/comm/tcp_mesh_key_exchange.h"

#include "absl/strings/str_cat.h"

namespace herd {

std::string MemberKeyStoreKey(const std::string& key_prefix) { return absl::StrCat(key_prefix, "member-key"); }

absl::StatusOr<MemberKey> ShareMemberKey(RendezvousStore& store, const std::string& key_prefix, int rank,
                                         std::chrono::milliseconds timeout) {
  const std::string store_key = MemberKeyStoreKey(key_prefix);
  if (rank == 0) {
    absl::StatusOr<MemberKey> key = NewMemberKey();
    if (!key.ok()) return key.status();
    if (absl::Status set = store.Set(store_key, MemberKeyBytes(*key)); !set.ok()) {
      return absl::Status(set.code(), absl::StrCat("publishing the member key at ", store_key, ": ", set.message()));
    }
    return key;
  }
  std::string value;
  if (absl::Status got = store.Get(store_key, timeout, &value); !got.ok()) {
    return absl::Status(got.code(), absl::StrCat("reading the member key at ", store_key, ": ", got.message()));
  }
  absl::StatusOr<MemberKey> key = MemberKeyFromBytes(value);
  if (!key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(store_key, ": ", key.status().message()));
  }
  return key;
}

}  // namespace herd
