#include "attncheck/streams/parallel.hpp"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>
#include <pthread.h>

#if defined(ATTNCHECK_STREAMS_OPENBLAS)
extern "C" void openblas_set_num_threads(int);  // OpenBLAS's declaration, without the rest of its header
#endif

namespace attncheck::streams {

namespace {

// The stack size libgomp gives its threads: GOMP_STACKSIZE or OMP_STACKSIZE (a number with an optional B, K, M or
// G; K when none), else the system's default. Zero for the default.
std::size_t openmp_stack_bytes() {
  for (const char* name : {"GOMP_STACKSIZE", "OMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    while (end && std::isspace(static_cast<unsigned char>(*end))) ++end;
    const char unit = end && *end ? static_cast<char>(std::toupper(static_cast<unsigned char>(*end))) : 'K';
    const int shift = unit == 'B' ? 0 : unit == 'M' ? 20 : unit == 'G' ? 30 : 10;
    return static_cast<std::size_t>(value) << shift;
  }
  return 0;
}

// The most threads seen to start in this process so far.
std::atomic<int> started{1};

}  // namespace

int thread_count(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

void require_threads(int threads) {
#if defined(ATTNCHECK_STREAMS_OPENBLAS)
  // Eigen's products go to OpenBLAS, whose own threads would nest inside ours: from the first parallel loop on,
  // each product runs on the thread that asks for it.
  static const bool blas_on_one_thread = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)blas_on_one_thread;
#endif
  if (threads <= started.load()) return;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  if (const std::size_t stack = openmp_stack_bytes(); stack > 0) pthread_attr_setstacksize(&attributes, stack);
  std::vector<pthread_t> trial_threads;
  int error = 0;
  for (int k = 1; k < threads && error == 0; ++k) {
    pthread_t thread;
    error = pthread_create(
        &thread, &attributes, [](void*) -> void* { return nullptr; }, nullptr);
    if (error == 0) trial_threads.push_back(thread);
  }
  for (const pthread_t thread : trial_threads) pthread_join(thread, nullptr);
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    throw theory::InputError("--threads " + std::to_string(threads) + ": the system cannot start " +
                             std::to_string(threads) + " threads (" + std::strerror(error) +
                             ": a limit on memory or processes); use fewer threads");
  }
  int seen = started.load();
  while (threads > seen && !started.compare_exchange_weak(seen, threads)) {
  }
}

}  // namespace attncheck::streams
