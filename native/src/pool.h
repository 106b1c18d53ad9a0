// The persistent thread pool of calibrate_threaded and calibrate_many: workers with large stacks
// (deep recursion stays bounded by Limits, not by the thread), each with a VM of its own.
#pragma once
#include <functional>

namespace ndvm {

class VM;

// Runs fn(i, vm) for i in [0, n) on the pool (threads <= 0: all cores); fn must not throw.
void parallel_for(int n, int threads, const std::function<void(int, VM&)>& fn);

// The cores this process may run on (its CPU affinity), at least 1.
int hardware_threads();

}  // namespace ndvm
