// The rank a training job itself knows a process by (its global rank, and its rank on the node),
// as the launcher put it in the environment: the number on-call engineers see in the job's own
// logs, which a communicator rank is not (rank 1 of "tp2" is global rank 5 of a Megatron job).
//
// Read once per process, from the first variable that holds a plain decimal number:
//   global: NCCLWATCH_RANK (set it when the launcher uses another name), RANK (torchrun, most
//           launchers), SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH)
//   local:  NCCLWATCH_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
//           MPI_LOCALRANKID
// A variable holding anything else ("", "-1", "5x", a number of 2^20 or more: more ranks than a
// report may claim) is skipped, as if unset.
#ifndef NCCLWATCH_PLUGIN_TRAINING_RANK_H_
#define NCCLWATCH_PLUGIN_TRAINING_RANK_H_

#include "absl/functional/function_ref.h"

namespace ncclwatch::plugin {

struct TrainingRank {
  int global = -1;  // -1: unknown
  int local = -1;
};

// `getenv` looks a variable up (std::getenv in the plugin; nullptr when unset).
TrainingRank TrainingRankFromEnv(absl::FunctionRef<const char*(const char*)> getenv);

// A plain decimal number in [0, 2^20), or -1.
int ParseRankNumber(const char* text);

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_TRAINING_RANK_H_
