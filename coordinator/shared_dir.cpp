#include "coordinator/shared_dir.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "coordinator/rundir.h"

namespace attnsweep {

namespace {

constexpr int kHostLen = 256;
constexpr int kWhyLen = 256;

// What this rank reads at `path`: the token (fine) or why not, as text.
std::string read_token(const std::string& path, const std::string& token, double wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  std::string why;
  for (;;) {
    std::ifstream in(path);
    if (!in) {
      why = "no such file";
    } else {
      std::stringstream ss;
      ss << in.rdbuf();
      if (ss.str() == token) return "";
      why = "a different token";
    }
    if (std::chrono::steady_clock::now() >= until) return why;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::string shared_dir_problem(const std::string& dir, const SharedDirReport& r) {
  if (r.missing_ranks.empty()) return "";
  // One entry per host, with its ranks and what the first of them found: "h3 (ranks 4, 5: no such file)".
  std::vector<std::string> order, ranks, found;
  for (const int k : r.missing_ranks) {
    const std::string& h = r.hosts[static_cast<size_t>(k)];
    size_t i = 0;
    while (i < order.size() && order[i] != h) ++i;
    if (i == order.size()) {
      order.push_back(h);
      ranks.emplace_back();
      found.push_back(r.why[static_cast<size_t>(k)]);
    }
    ranks[i] += (ranks[i].empty() ? "" : ", ") + std::to_string(k);
  }
  std::string hosts;
  for (size_t i = 0; i < order.size(); ++i)
    hosts += (i ? ", " : "") + order[i] + " (rank" + (ranks[i].find(',') != std::string::npos ? "s " : " ") + ranks[i] +
             ": " + found[i] + ")";
  return "--out " + dir + " is not the same directory on every rank: the host" + (order.size() > 1 ? "s " : " ") +
         hosts + (order.size() > 1 ? " do" : " does") + " not see " + r.token_file + ", which rank 0 on " + r.hosts[0] +
         " wrote there. Every rank must see one run directory: put --out on a file system that every node mounts "
         "(NFS, Lustre, GPFS), not on a node-local disk or /tmp";
}

int check_shared_dir(const std::string& dir, int rank, int world, double wait_s) {
  if (world <= 1) return 0;
  // Rank 0 writes the token; everyone learns its name and content.
  char token[64] = {};
  char name[64] = {};
  int written = 1;
  std::string write_error;
  if (rank == 0) {
    std::random_device rd;
    std::snprintf(token, sizeof token, "%08x%08x%08x", rd(), rd(), rd());
    std::snprintf(name, sizeof name, ".attnsweep-shared-%d-%.8s", static_cast<int>(::getpid()), token);
    std::ofstream out(dir + "/" + name);
    out << token;
    out.close();
    if (!out) {
      written = 0;
      write_error = "cannot write " + dir + "/" + name;
    }
  }
  MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!written) {
    if (rank == 0) std::fprintf(stderr, "attnsweep run: %s\n", write_error.c_str());
    return 2;
  }
  MPI_Bcast(token, sizeof token, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string path = dir + "/" + name;
  const std::string why = read_token(path, token, wait_s);
  char mine[kHostLen + kWhyLen] = {};
  std::snprintf(mine, kHostLen, "%s", hostname().c_str());
  std::snprintf(mine + kHostLen, kWhyLen, "%s", why.c_str());
  std::vector<char> all(rank == 0 ? static_cast<size_t>(world) * sizeof mine : 0);
  MPI_Gather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
  int code = 0;
  if (rank == 0) {
    std::remove(path.c_str());
    SharedDirReport r;
    r.token_file = path;
    for (int k = 0; k < world; ++k) {
      const char* at = &all[static_cast<size_t>(k) * sizeof mine];
      r.hosts.emplace_back(at);
      r.why.emplace_back(at + kHostLen);
      if (!r.why.back().empty()) r.missing_ranks.push_back(k);
    }
    if (const std::string p = shared_dir_problem(dir, r); !p.empty()) {
      std::fprintf(stderr, "attnsweep run: %s\n", p.c_str());
      code = 2;
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

}  // namespace attnsweep
