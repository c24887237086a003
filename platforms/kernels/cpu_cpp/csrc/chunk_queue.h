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
#include <c10/util/Exception.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

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

// A thread's share of a range, [lo, hi) packed into one word so that its owner (taking from the
// front) and a thief (taking from the back) claim chunks with one compare-and-swap each.
struct alignas(64) Share {
  std::atomic<uint64_t> bounds;

  static uint64_t pack(uint64_t lo, uint64_t hi) { return hi << 32 | lo; }

  // Claims up to `chunk` items from the front (or the back): true and [begin, end) if any were left.
  bool claim(int64_t chunk, bool from_back, int64_t& begin, int64_t& end) {
    uint64_t seen = bounds.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t lo = static_cast<int64_t>(seen & 0xffffffffu), hi = static_cast<int64_t>(seen >> 32);
      if (lo >= hi) return false;
      const int64_t take = std::min(chunk, hi - lo);
      begin = from_back ? hi - take : lo;
      end = begin + take;
      const uint64_t next = from_back ? pack(lo, hi - take) : pack(lo + take, hi);
      if (bounds.compare_exchange_weak(seen, next, std::memory_order_relaxed)) return true;
    }
  }
};

// Calls f(begin, end) for chunks of [0, count), each of at most `chunk` items, from up to
// at::get_num_threads() threads. Each thread walks its own contiguous share front to back, as a
// static split would, and one that is done takes chunks from the back of the others' shares.
//
// Why: under a static split of a one-row matmul the two threads finish their halves apart (their
// speed through memory differs from call to call; benchmarks/README.md has the figures) and the
// call waits for the later one; a queue handing out small chunks in turn balances them but breaks
// each thread's stream of weights, which its prefetches follow. Here the streams stay whole until
// the end.
template <typename F>
void for_each_chunk_stealing(int64_t count, int64_t chunk, const F& f) {
  TORCH_CHECK(count < (int64_t{1} << 32), "for_each_chunk_stealing: more than 2^32 items");
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), (count + chunk - 1) / chunk));
  if (workers == 1) return f(0, count);
  std::vector<Share> shares(workers);
  for (int64_t w = 0; w < workers; ++w)
    shares[w].bounds.store(Share::pack(count * w / workers, count * (w + 1) / workers), std::memory_order_relaxed);
  at::parallel_for(0, workers, 1, [&](int64_t first, int64_t last) {
    for (int64_t own = first; own < last; ++own) {
      int64_t begin, end;
      while (shares[own].claim(chunk, false, begin, end)) f(begin, end);
      for (int64_t step = 1; step < workers; ++step) {
        Share& other = shares[(own + step) % workers];
        while (other.claim(chunk, true, begin, end)) f(begin, end);
      }
    }
  });
}

}  // namespace sgl_chunk_queue
