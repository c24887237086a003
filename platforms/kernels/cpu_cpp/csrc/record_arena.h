// Memory for weight records (int16_activations.h), on 2 MiB pages where the system gives them.
//
// Why: decode streams every layer's records from DRAM each step, 4 KiB pages then cost a TLB
// miss every 4 KiB. Measured on the embedded model's 120 int4 layers at one row, two threads:
// records in madvise(MADV_HUGEPAGE) memory took 5.2-5.3 ms against 5.5-6.2 ms in 4 KiB pages
// (1.1-1.17x). A layer's records are 0.3-1.1 MiB, less than a huge page, so they are carved out
// of shared 32 MiB chunks; a chunk's memory is freed when the last records in it are.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <cstdlib>
#include <cstring>
#include <mutex>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sgl_record_arena {

constexpr int64_t HUGE_PAGE = int64_t{1} << 21;
constexpr int64_t CHUNK = int64_t{32} << 20;
constexpr int64_t ALIGN = 64;  // each span starts on a cache line

// `bytes` (rounded up to huge pages) of huge-page-advised memory as a uint8 tensor that frees it.
inline at::Tensor huge_page_block(int64_t bytes) {
  const int64_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  void* memory = nullptr;
  TORCH_CHECK(posix_memalign(&memory, HUGE_PAGE, size) == 0, "record arena: out of memory (", size, " bytes)");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(memory, size, MADV_HUGEPAGE);  // advice only: without transparent huge pages it is ignored
#endif
  return at::from_blob(memory, {size}, [](void* p) { std::free(p); }, at::kByte);
}

// A zeroed uint8 span of `bytes`: a slice of the current chunk, or a block of its own when it
// would take more than half a chunk.
inline at::Tensor allocate(int64_t bytes) {
  static std::mutex lock;
  static at::Tensor chunk;
  static int64_t used = CHUNK;
  at::Tensor span;
  if (bytes > CHUNK / 2) {
    span = huge_page_block(bytes).narrow(0, 0, bytes);
  } else {
    const std::lock_guard<std::mutex> guard(lock);
    if (used + bytes > CHUNK) {
      chunk = huge_page_block(CHUNK);
      used = 0;
    }
    span = chunk.narrow(0, used, bytes);
    used += (bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  // Zeroed through its memory, not `zero_()`: a chunk made under inference mode (a model load)
  // is an inference tensor, which torch does not let later calls outside that mode write to.
  std::memset(span.data_ptr(), 0, bytes);
  return span;
}

}  // namespace sgl_record_arena
