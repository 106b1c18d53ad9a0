// The Kalman benchmark (kalman2d_T80) through the runtime's C++ API, without Python: the number to
// watch when optimizing the VM. Built with -DNDVM_TESTS=ON:
//   cmake -S native -B native/build -DNDVM_TESTS=ON -G Ninja && cmake --build native/build
//   native/build/kalman_ndvm 5000 1      # iterations, lanes
// It prints the time of a walked evaluation (Limits.replay off) and of a replayed one (the same
// program evaluated again with new parameters, as calibration does).
// Timings on a shared VM drift; compare two builds side by side, or count instructions with
//   valgrind --tool=callgrind native/build/kalman_ndvm 200 1
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "program.h"
#include "vm.h"

using namespace ndvm;

int main(int argc, char** argv) {
  int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  int B = argc > 2 ? std::atoi(argv[2]) : 1;
  const char* src = R"(
(param q 0.3 positive) (param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))
)";
  auto p = compile_program(src);
  Inputs in;
  in.shared.resize(1);
  in.per_lane.resize(1);
  in.shared[0].rank = 2;
  in.shared[0].rows = 80;
  in.shared[0].cols = 2;
  std::mt19937 gen(1);
  std::normal_distribution<double> nd;
  double a = 0, b = 0;
  for (int t = 0; t < 80; ++t) {  // a random walk observed with noise
    a += nd(gen) * 0.5;
    b += nd(gen) * 0.5;
    in.shared[0].data.push_back(a + nd(gen) * 0.5);
    in.shared[0].data.push_back(b + nd(gen) * 0.5);
  }
  std::vector<double> theta;
  for (int l = 0; l < B; ++l) theta.insert(theta.end(), {0.3, 0.3});
  auto vm = make_vm();
  Limits lim;
  LossSpec value;
  auto r = run_batch(*p, *vm, theta.data(), B, in, true, &value, lim);
  std::printf("value %.10f  grad %.10f %.10f  tape records %zu\n", r.values[0], r.grads[0], r.grads[1],
              vm->tape_size());
  auto time_per_call = [&](bool grad, const Limits& l) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      theta[0] = 0.3 + 1e-7 * (i % 100);  // new parameters every call, as in calibration
      run_batch(*p, *vm, theta.data(), B, in, grad, grad ? &value : nullptr, l);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters * 1e6;
  };
  Limits walk = lim;
  walk.replay = false;
  if (argc > 3 && std::string(argv[3]) == "walk") {  // only the walked runs (for profiling)
    std::printf("B=%d: value-and-gradient %.2f us walked\n", B, time_per_call(true, walk));
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "replay") {  // only the replayed runs (for profiling)
    std::printf("B=%d: value-and-gradient %.2f us replayed\n", B, time_per_call(true, lim));
    return 0;
  }
  double walked = time_per_call(true, walk);
  double replayed = time_per_call(true, lim);  // repeated with new parameters, as in calibration
  double value_only = time_per_call(false, lim);
  std::printf(
      "B=%d: value-and-gradient %.2f us walked (%.3f us per lane), %.2f us replayed (%.3f us per lane); "
      "value alone %.2f us\n",
      B, walked, walked / B, replayed, replayed / B, value_only);
  return 0;
}
