// Parallel loops whose chunks are handed out as threads ask for them, not split up front.
//
// Why: at::parallel_for gives each thread an equal share of the range when the loop starts. On a
// machine with as many threads as cores, a thread that another process preempts (the server's
// own detokenizer and HTTP processes, at every step of a 32-request batch) holds back the whole
// call: the other thread finishes its share and waits at the barrier. Here a thread that is
// running takes the next chunk, so a preempted one delays the call by at most the chunk it holds.
// Which thread computes a chunk changes nothing in its outputs.
#pragma once
#include <ATen/Parallel.h>
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace sgl_chunk_queue {

// Calls f(begin, end) for consecutive chunks of [0, count), each of at most `chunk` items, from
// up to at::get_num_threads() threads, each taking the next chunk when it is done with one.
template <typename F>
void for_each_chunk(int64_t count, int64_t chunk, const F& f) {
  const int64_t chunks = (count + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), chunks);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
      f(c * chunk, std::min(count, (c + 1) * chunk));
  });
}

}  // namespace sgl_chunk_queue
