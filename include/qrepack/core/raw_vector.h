// A std::vector whose resize() leaves new trivially-constructible elements uninitialised: for
// I/O and encode buffers that are always overwritten, where zero-filling them first costs a
// pass over memory. Buffers of 2 MiB and more are 2 MiB-aligned and advised MADV_HUGEPAGE:
// fresh 4 KiB pages fill at a third of the rate of huge pages, and every job buffer of
// `convert` is at least that large. The advice is only advice (THP may be off).
#pragma once

#include <sys/mman.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace qrepack {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}  // NOLINT: rebinding

  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T) - kHugePage) {
      throw std::bad_array_new_length();
    }
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return std::allocator<T>::allocate(n);
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugePage) {
      std::allocator<T>::deallocate(p, n);
    } else {
      std::free(p);
    }
  }

  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialisation: no zero fill
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using RawVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace qrepack
