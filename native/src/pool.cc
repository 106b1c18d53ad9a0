// The persistent thread pool: one job at a time, its items handed out by an atomic counter.
#include "pool.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "vm.h"

namespace ndvm {

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(CPU_COUNT(&set));
  return n ? static_cast<int>(n) : 1;
}

namespace {

constexpr size_t kWorkerStack = 256u << 20;  // reserved, not committed: deep recursion is safe

class Pool;
Pool* the_pool = nullptr;  // never destroyed: workers may outlive static destruction
std::once_flag pool_once;

class Pool {
 public:
  static Pool& get() {
    std::call_once(pool_once, [] {
      the_pool = new Pool();
      // The child of a fork() has only the forking thread: the workers are gone and the pool's
      // mutexes may be held by them. It gets a new pool (the old one is leaked, never touched).
      pthread_atfork(nullptr, nullptr, [] { the_pool = new Pool(); });
    });
    return *the_pool;
  }

  void run(int n, int threads, const std::function<void(int, VM&)>& fn, const PoolPoll& poll) {
    std::lock_guard<std::mutex> one_job_at_a_time(job_mu_);
    ensure(threads);
    std::unique_lock<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    wanted_ = threads;
    pending_ = threads;
    ++generation_;
    cv_.notify_all();
    auto done = [&] { return pending_ == 0; };
    if (!poll) {
      done_cv_.wait(lk, done);
    } else {
      bool cancelled = false;
      while (!done_cv_.wait_for(lk, std::chrono::milliseconds(kPollMs), done)) {
        if (cancelled) continue;
        lk.unlock();  // the poll may wait for Python's GIL: never with the pool's lock held
        cancelled = poll();
        if (cancelled) next_.store(n);  // items not yet handed out are skipped
        lk.lock();
      }
    }
    fn_ = nullptr;
  }

 private:
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<pthread_t> workers_;
  const std::function<void(int, VM&)>* fn_ = nullptr;
  int n_ = 0, wanted_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  std::atomic<int> next_{0};

  struct Arg {
    Pool* pool;
    int index;
  };

  void ensure(int threads) {
    while (static_cast<int>(workers_.size()) < threads) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kWorkerStack);
      pthread_t t;
      auto* arg = new Arg{this, static_cast<int>(workers_.size())};
      if (pthread_create(&t, &attr, &Pool::main, arg) != 0) {
        pthread_attr_destroy(&attr);
        delete arg;
        throw std::runtime_error("cannot start a calibration thread");
      }
      pthread_attr_destroy(&attr);
      pthread_detach(t);
      workers_.push_back(t);
    }
  }

  static void* main(void* p) {
    Arg a = *static_cast<Arg*>(p);
    delete static_cast<Arg*>(p);
    set_thread_stack_budget(kWorkerStack - (8u << 20));
    a.pool->loop(a.index);
    return nullptr;
  }

  void loop(int index) {
    VM vm;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int, VM&)>* fn;
      int n;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= wanted_) continue;
        fn = fn_;
        n = n_;
      }
      for (int k; (k = next_.fetch_add(1)) < n;) (*fn)(k, vm);
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
};

}  // namespace

void parallel_for(int n, int threads, const std::function<void(int, VM&)>& fn, const PoolPoll& poll) {
  if (threads <= 0) threads = hardware_threads();
  if (threads > n) threads = n;
  if (n <= 0) return;
  Pool::get().run(n, threads, fn, poll);
}

}  // namespace ndvm
