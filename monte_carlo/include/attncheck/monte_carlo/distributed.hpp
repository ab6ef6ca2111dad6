#pragma once
// The processes of one run started by mpirun or srun (ranks), and the few collective steps a sweep needs.
// A build with MPI implements them over MPI_COMM_WORLD; a build without it, or a program not started by an MPI
// launcher, is the single rank 0 of a run of size 1, where every collective is the identity. Only
// src/distributed.cpp knows which: callers need no #ifdef.
//
// Every collective must be called by every rank in the same order with the same arguments where stated;
// a rank that fails must end the whole run (abort_run), or the others would wait for it forever.

#include <cstdint>
#include <string>
#include <vector>

namespace attncheck::monte_carlo::distributed {

// True when this build can run over MPI (it says nothing about whether this process was started by mpirun).
bool built_with_mpi();

// This process's rank in [0, size()), and the number of ranks. MPI starts at the first call of any function
// here, and only when an MPI launcher started the process.
int rank();
int size();
inline bool is_root() { return rank() == 0; }

// The rank among the ranks on the same host (MPI_Comm_split_type shared), and their number.
int local_rank();
int local_size();

// The host name of this process.
std::string host_name();

// Every rank's `local`, concatenated in rank order (the ranks may give different lengths).
std::vector<double> allgather(const std::vector<double>& local);
// Every rank's text, in rank order.
std::vector<std::string> allgather_text(const std::string& local);
// Rank 0's value on every rank: decisions that depend on rank 0's clock must be taken once.
bool broadcast_flag(bool value);
std::uint64_t broadcast_count(std::uint64_t value);

// After an error on this rank: a run of one rank returns `exit_code`; in a run of several, the error must stop
// them all, so this ends every rank with `exit_code` (MPI_Abort) and does not return.
int end_after_error(int exit_code);

// The contiguous part of samples [first, first + count) that rank `rank` of `ranks` evaluates: the first
// count % ranks ranks take one sample more, so the parts cover the range in rank order.
struct SampleRange {
  std::uint64_t first = 0, count = 0;
};
SampleRange rank_share(std::uint64_t first, std::uint64_t count, int rank, int ranks);

// One GPU per rank: the device of the rank with this local rank on a host with `device_count` devices
// (local rank mod device count, so ranks beyond the devices share them round-robin); -1 with no device.
int device_for_local_rank(int local_rank, int device_count);

}  // namespace attncheck::monte_carlo::distributed
