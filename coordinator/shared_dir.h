// The run directory must be one file system for every rank (docs/slurm.md, "A run
// directory every node sees"): rank 0 writes a token file into it and every rank reads
// it back before any cell runs.
#pragma once

#include <string>
#include <vector>

namespace attnsweep {

// What each rank found: whether it read rank 0's token from its DIR, and its host.
struct SharedDirReport {
  std::vector<int> missing_ranks;  // ranks that did not read the token
  std::vector<std::string> hosts;  // per rank
  std::vector<std::string> why;    // per rank: what it found instead ("" when fine)
  std::string token_file;          // the file rank 0 wrote
};

// The message naming the hosts (and ranks) that do not see DIR; "" when all do.
std::string shared_dir_problem(const std::string& dir, const SharedDirReport& report);

// Collective over MPI_COMM_WORLD (call it on every rank, after rank 0 created DIR): rank
// 0 writes DIR/.attnsweep-shared-<pid>-<random> with a random token, every rank reads it
// (retrying for up to `wait_s`: an NFS client may cache the folder's old listing for a
// moment), rank 0 removes it. Returns 0 when every rank read the token; otherwise 2, and
// rank 0 prints the problem on stderr. With one rank there is nothing to check: 0.
int check_shared_dir(const std::string& dir, int rank, int world, double wait_s = 3.0);

}  // namespace attnsweep
