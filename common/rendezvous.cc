#include "common/rendezvous.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ncclwatch {
namespace {

// FNV-1a over the bytes, continuing from `hash`.
uint64_t Fnv1a(std::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// A 64-bit finaliser (Stafford's "mix13"): FNV-1a alone leaves the scores of names that differ in
// their last byte strongly correlated, which would skew who wins.
uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ShardMember ParseShardMember(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string_view::npos) return {std::string(entry), std::string(entry)};
  return {std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1))};
}

absl::StatusOr<std::vector<ShardMember>> ParseShardMembers(const std::vector<std::string>& entries,
                                                           std::string_view flag) {
  std::vector<ShardMember> members;
  std::set<std::string> names;
  for (const std::string& entry : entries) {
    ShardMember m = ParseShardMember(entry);
    if (m.name.empty() || m.address.empty() || !names.insert(m.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::string_view(flag.data(), flag.size()), " entry '", entry,
          "': expected host:port or name=host:port, each name once (keys are placed by name)"));
    }
    members.push_back(std::move(m));
  }
  return members;
}

uint64_t RendezvousScore(std::string_view member, std::string_view key) {
  // The member's length goes in first so that ("ab", "c") and ("a", "bc") differ.
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(uint64_t{member.size()} >> (8 * i));
  uint64_t hash = Fnv1a(std::string_view(length, sizeof length), 0xcbf29ce484222325ull);
  hash = Fnv1a(member, hash);
  return Mix(Fnv1a(key, Mix(hash)));
}

size_t RendezvousOwner(std::string_view key, const std::vector<std::string>& members) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const uint64_t score = RendezvousScore(members[i], key);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

}  // namespace ncclwatch
