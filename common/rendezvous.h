// Rendezvous (highest-random-weight) hashing: which of several named members owns a key.
//
// Every member gets a score for the key, a 64-bit mix of the member's name and the key; the
// highest score owns it. Whoever holds the same member names (in any order) computes the same
// owner, with no shared state. Adding a member moves exactly the keys it now wins, about 1/(n+1)
// of them, all onto the new member; removing one moves only the keys it owned. The agents place
// jobs on aggregators with it and the aggregators route Query calls with it (docs/scale.md).
#ifndef NCCLWATCH_COMMON_RENDEZVOUS_H_
#define NCCLWATCH_COMMON_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ncclwatch {

// A member of a sharded service as a flag lists it: "name=host:port", or just "host:port" (then
// named by its address). Keys are hashed on the name, so a member whose address changes (a pod
// rescheduled) keeps its keys when its name, e.g. a StatefulSet pod's, stays.
struct ShardMember {
  std::string name;
  std::string address;
};
ShardMember ParseShardMember(std::string_view entry);
// Every entry of a member list (`flag` names it in errors); InvalidArgument for an empty name or
// address, or a name listed twice (keys are placed by name).
absl::StatusOr<std::vector<ShardMember>> ParseShardMembers(const std::vector<std::string>& entries,
                                                           std::string_view flag);

// The score of `member` for `key`; deterministic across processes, builds and machines.
uint64_t RendezvousScore(std::string_view member, std::string_view key);

// The index in `members` of the one that owns `key` (ties, which need equal names, go to the
// lower index). `members` must not be empty.
size_t RendezvousOwner(std::string_view key, const std::vector<std::string>& members);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_RENDEZVOUS_H_
