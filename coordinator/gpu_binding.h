// Which of a node's GPUs a rank takes: the ranks of one node share them out by local
// rank (docs/slurm.md, "Several ranks on a node"), so that two ranks of a node never
// run cells on the same GPU while another stays idle.
#pragma once

#include <string>
#include <vector>

namespace attnsweep {

// This rank's place among the ranks of its node.
struct LocalRank {
  int rank = 0;        // 0 .. size - 1
  int size = 1;        // ranks on this node
  std::string source;  // the environment variables it came from ("" when none: alone)
};

// From the launcher's environment: Open MPI (OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE,
// under mpirun and srun), PMIx (PMIX_LOCAL_RANK / PMIX_LOCAL_SIZE), MPICH and Intel MPI
// (MPI_LOCALRANKID / MPI_LOCALNRANKS); {0, 1} when none is set. Throws
// std::runtime_error naming the variable when one is not a number or out of range.
LocalRank local_rank_from_env();

// The GPUs (indexes 0 .. ngpu - 1 of the node's visible ones) a rank takes: with at
// least as many GPUs as ranks, a contiguous block each, [r * G / L, (r + 1) * G / L)
// (G = 4, L = 2: {0, 1} and {2, 3}; G = 3, L = 2: {0} and {1, 2}); with fewer, one each,
// r * G / L, so that each GPU is shared by as few ranks as possible. Every GPU is
// taken by some rank. ATTNSWEEP_GPU_BIND=none (a launcher that already gives each
// task its own GPUs) takes all of them.
std::vector<int> node_gpus(int ngpu, const LocalRank& local);

// The GPU count the rank plans with: ATTNSWEEP_FAKE_GPU_COUNT=N when set and no GPU is
// visible (for tests on CPU hosts: the rank shares out N pretend GPUs and sets their
// CUDA_VISIBLE_DEVICES on its cells, which still run on the CPU; *faked is then true),
// else `real`.
int planned_gpu_count(int real, bool* faked);

}  // namespace attnsweep
