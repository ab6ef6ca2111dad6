#pragma once
// Every OpenMP loop of the project runs through here: an exception that escaped an OpenMP region would call
// std::terminate (an abort, never the error message and exit code 2 it was meant for), so each iteration's
// exception is caught, and the first is rethrown on the calling thread once the loop is done.

#include "attncheck/theory/common.hpp"

#include <exception>
#include <mutex>

namespace attncheck::streams {

// Throws theory::InputError naming --threads when `threads` threads cannot all be started now (a memory limit on
// their stacks, a limit on processes): OpenMP itself would print "Thread creation failed" and exit the program with
// status 1, which reads as "a claim is violated". Threads are started, and joined, once per larger count.
void require_threads(int threads);

// The threads a --threads value asks for: itself, or for 0 as many as OpenMP would use (every core unless
// OMP_NUM_THREADS says otherwise).
int thread_count(int requested);

// Runs body(k) for k = 0 .. count - 1 over `threads` threads (dynamic schedule, one iteration at a time).
template <class Body>
void parallel_for(theory::Index count, int threads, Body&& body) {
  if (threads > 1) require_threads(threads);
  std::exception_ptr failure;
  std::mutex failure_mutex;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (theory::Index k = 0; k < count; ++k) {
    try {
      body(k);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace attncheck::streams
