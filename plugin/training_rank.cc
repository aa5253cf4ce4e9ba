#include "plugin/training_rank.h"

namespace ncclwatch::plugin {

int ParseRankNumber(const char* text) {
  if (text == nullptr || *text == '\0') return -1;
  long value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return -1;
    value = value * 10 + (*p - '0');
    if (value >= (1L << 20)) return -1;
  }
  return static_cast<int>(value);
}

TrainingRank TrainingRankFromEnv(absl::FunctionRef<const char*(const char*)> getenv) {
  const auto first = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      const int value = ParseRankNumber(getenv(name));
      if (value >= 0) return value;
    }
    return -1;
  };
  TrainingRank out;
  out.global =
      first({"NCCLWATCH_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  out.local = first({"NCCLWATCH_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID",
                     "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
  return out;
}

}  // namespace ncclwatch::plugin
