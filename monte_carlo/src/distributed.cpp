// distributed.hpp over MPI when the build found it (ATTNCHECK_MC_MPI), else as the one rank of a run of size 1.
// This is the only file that knows which.

#include "attncheck/monte_carlo/distributed.hpp"

#include "attncheck/theory/common.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <stdexcept>

#ifdef ATTNCHECK_MC_MPI
// Only the C interface: the deprecated C++ bindings that MPI's header would otherwise declare live in a library
// that is not linked.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace attncheck::monte_carlo::distributed {

SampleRange rank_share(std::uint64_t first, std::uint64_t count, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw theory::InputError(fmt::format("rank {} of {}: no such rank", rank, ranks));
  }
  const auto n = static_cast<std::uint64_t>(ranks), r = static_cast<std::uint64_t>(rank);
  const std::uint64_t base = count / n, extra = count % n;
  return {first + r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

int device_for_local_rank(int local_rank, int device_count) {
  if (device_count <= 0) return -1;
  if (local_rank < 0) throw theory::InputError(fmt::format("local rank {}: a rank is never negative", local_rank));
  return local_rank % device_count;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

#ifdef ATTNCHECK_MC_MPI

bool built_with_mpi() { return true; }

namespace {

// Launchers say so in the environment: Open MPI's mpirun, PMIx (srun --mpi=pmix, Open MPI 4+) and PMI
// (MPICH's hydra, srun --mpi=pmi2). Without one, the program runs alone and never starts MPI, whose singleton
// start-up would spawn a runtime daemon for nothing.
bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

struct World {
  bool active = false;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

const World& world() {
  static const World w = [] {
    World started;
    if (!launched_by_mpi()) return started;
    int provided = 0;
    // Only the main thread calls MPI; OpenMP threads evaluate samples between the calls.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      throw std::runtime_error("MPI_Init_thread failed");
    }
    std::atexit(finalize_at_exit);
    started.active = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &started.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &started.size);
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, started.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &started.local_rank);
    MPI_Comm_size(local, &started.local_size);
    MPI_Comm_free(&local);
    return started;
  }();
  return w;
}

int as_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw std::length_error(fmt::format("{} values exceed one MPI message (at most {})", n, INT_MAX));
  }
  return static_cast<int>(n);
}

// Counts of every rank and where each starts, from this rank's count.
std::vector<int> gathered_counts(int local_count, std::vector<int>& displacements, std::size_t& total) {
  std::vector<int> counts(static_cast<std::size_t>(world().size));
  MPI_Allgather(&local_count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  displacements.assign(counts.size(), 0);
  total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displacements[r] = as_count(total);
    total += static_cast<std::size_t>(counts[r]);
  }
  as_count(total);
  return counts;
}

}  // namespace

int rank() { return world().rank; }
int size() { return world().size; }
int local_rank() { return world().local_rank; }
int local_size() { return world().local_size; }

std::vector<double> allgather(const std::vector<double>& local) {
  if (!world().active) return local;
  std::vector<int> displacements;
  std::size_t total = 0;
  const std::vector<int> counts = gathered_counts(as_count(local.size()), displacements, total);
  std::vector<double> all(total);
  MPI_Allgatherv(local.data(), as_count(local.size()), MPI_DOUBLE, all.data(), counts.data(), displacements.data(),
                 MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

std::vector<std::string> allgather_text(const std::string& local) {
  if (!world().active) return {local};
  std::vector<int> displacements;
  std::size_t total = 0;
  const std::vector<int> counts = gathered_counts(as_count(local.size()), displacements, total);
  std::string all(total, '\0');
  MPI_Allgatherv(local.data(), as_count(local.size()), MPI_CHAR, all.data(), counts.data(), displacements.data(),
                 MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    texts.push_back(all.substr(static_cast<std::size_t>(displacements[r]), static_cast<std::size_t>(counts[r])));
  }
  return texts;
}

bool broadcast_flag(bool value) {
  if (!world().active) return value;
  int flag = value ? 1 : 0;
  MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return flag != 0;
}

std::uint64_t broadcast_count(std::uint64_t value) {
  if (!world().active) return value;
  MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return value;
}

int end_after_error(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized || world().size == 1) return exit_code;
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; should an implementation's do, still end this rank
}

#else

bool built_with_mpi() { return false; }
int rank() { return 0; }
int size() { return 1; }
int local_rank() { return 0; }
int local_size() { return 1; }
std::vector<double> allgather(const std::vector<double>& local) { return local; }
std::vector<std::string> allgather_text(const std::string& local) { return {local}; }
bool broadcast_flag(bool value) { return value; }
std::uint64_t broadcast_count(std::uint64_t value) { return value; }
int end_after_error(int exit_code) { return exit_code; }

#endif

}  // namespace attncheck::monte_carlo::distributed
