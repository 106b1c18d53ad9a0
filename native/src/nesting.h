// Bounds on recursion over program structure: the reader, the compiler, the canonical form, the
// writer of datums and the conversion of results all recurse once per level of nesting. Long flat
// forms are iterated (they cost no stack); nesting shares one depth limit, kMaxNesting, and every
// recursive walk also probes the C stack so that a thread with a small stack (a Python thread, a
// pool thread) ends with a typed LimitError rather than a SIGSEGV.
#pragma once
#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "error.h"

namespace ndvm {

// Levels of parentheses (and quote prefixes) a program, a quoted datum or a result may have.
constexpr int kMaxNesting = 2000;

// Bytes of C stack a structural walk leaves unused: room for throwing and formatting the error
// and for the allocator between two probes.
constexpr size_t kStackReserve = 64u << 10;

// Lowest usable address of the current thread's stack, found once per thread.
inline const char* thread_stack_low() {
  thread_local const char* low = [] {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    return static_cast<const char*>(addr);
  }();
  return low;
}

// A probe taken at the entry of a structural walk. check() throws LimitError when the walk has
// come within kStackReserve of the end of the thread's stack. When the walk does not run on the
// thread's own stack (a private stack set up with makecontext) only `fallback` bytes are allowed.
class StackProbe {
 public:
  explicit StackProbe(size_t fallback = 1u << 20) {
    const char* here = static_cast<const char*>(__builtin_frame_address(0));
    const char* low = thread_stack_low();
    size_t avail = 0;
    if (low && here > low && static_cast<size_t>(here - low) < (size_t{1} << 34))
      avail = static_cast<size_t>(here - low);
    else avail = fallback + kStackReserve;
    limit_ = avail > kStackReserve ? here - (avail - kStackReserve) : here;
  }

  // `what` names the walk ("reading", "compiling", ...) for the message.
  void check(const char* what, int line, int col) const {
    const char* here = static_cast<const char*>(__builtin_frame_address(0));
    if (here < limit_)
      limit_error(std::string("program nested too deeply for the C stack of this thread while ") + what +
                      " (the nesting limit is " + std::to_string(kMaxNesting) +
                      " levels; a thread with a larger stack allows more)",
                  line, col);
  }

 private:
  const char* limit_;
};

}  // namespace ndvm
