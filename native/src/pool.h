// The persistent thread pool of calibrate_threaded and calibrate_many: workers with large stacks
// (deep recursion stays bounded by Limits, not by the thread), each with a VM of its own.
#pragma once
#include <functional>

namespace ndvm {

class VM;

// Asked about every kPollMs by the thread that waits for a pool job; true cancels the job (Ctrl-C
// from Python: the binding runs Python's signal handlers in it).
using PoolPoll = std::function<bool()>;
constexpr int kPollMs = 20;

// Runs fn(i, vm) for i in [0, n) on the pool (threads <= 0: all cores); fn must not throw. Once
// `poll` returns true, items not yet started are skipped (fn's own long loops stop on a flag the
// caller sets in poll: CalibSpec.cancel).
// After fork() the child has a new, empty pool (pthread_atfork): the parent's workers do not exist
// there, and the first job in the child starts its own.
void parallel_for(int n, int threads, const std::function<void(int, VM&)>& fn, const PoolPoll& poll = nullptr);

// The cores this process may run on (its CPU affinity), at least 1.
int hardware_threads();

}  // namespace ndvm
