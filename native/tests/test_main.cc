// C++ unit tests of the runtime, run by ctest (and by tests/test_native_cpp.py).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "error.h"
#include "optim.h"
#include "program.h"
#include "reader.h"
#include "vm.h"

using namespace ndvm;

static int failures = 0, checks = 0;
#define CHECK(cond)                                                                 \
  do {                                                                              \
    ++checks;                                                                       \
    if (!(cond)) {                                                                  \
      ++failures;                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                               \
  } while (0)

static Limits lim;

static double scalar(const std::string& src, std::vector<double> theta = {}) {
  auto p = compile_program(src);
  auto vm = make_vm();
  Inputs in;
  in.shared.resize(p->inputs.size());
  in.per_lane.resize(p->inputs.size());
  if (theta.empty())
    for (auto& d : p->params) theta.push_back(d.init);
  return run_batch(*p, *vm, theta.data(), 1, in, false, nullptr, lim).values[0];
}

static ErrorKind error_of(const std::string& src) {
  try {
    scalar(src);
  } catch (const Error& e) { return e.kind; }
  return static_cast<ErrorKind>(-1);
}

static void test_reader() {
  auto ds = read_all("(a (b . c) 1 2.5 #t) ; comment\n'x");
  CHECK(ds.size() == 2);
  CHECK(write_datum(*ds[0]) == "(a (b . c) 1 2.5 #t)");
  CHECK(write_datum(*ds[1]) == "(quote x)");
  CHECK(ds[1]->line == 2);
  bool threw = false;
  try {
    read_all("(a (b)");
  } catch (const Error& e) { threw = e.kind == ErrorKind::Parse && e.line == 1; }
  CHECK(threw);
}

static void test_eval() {
  CHECK(scalar("(+ 1 2 3)") == 6);
  CHECK(scalar("(define (f x) (* x x)) (f 7)") == 49);
  CHECK(scalar("(let loop ((i 0) (s 0)) (if (= i 100000) s (loop (+ i 1) (+ s i))))") == 4999950000.0);
  CHECK(scalar("(define (even2? n) (if (= n 0) #t (odd2? (- n 1)))) (define (odd2? n) (if (= n 0) #f (even2? (- n "
               "1)))) (if (even2? 100001) 1 0)") == 0);
  CHECK(scalar("(apply + (map (lambda (x) (* 2 x)) '(1 2 3)))") == 12);
  CHECK(scalar("(loop ((s 1.0) (k 0)) (if (= k 10) s (recur (* s 2) (+ k 1))))") == 1024);
  CHECK(std::fabs(scalar("(logdet (mat (vec 2 0) (vec 0 3)))") - std::log(6.0)) < 1e-15);
}

static void test_errors() {
  CHECK(error_of("(car 1.0)") == ErrorKind::Eval);
  CHECK(error_of("(frobnicate 1)") == ErrorKind::Check);
  CHECK(error_of("(car 1 2)") == ErrorKind::Check);
  CHECK(error_of("(let loop () (loop))") == ErrorKind::Limit);
  CHECK(error_of("(define (f n) (+ 1 (f n))) (f 1)") == ErrorKind::Limit);
  CHECK(error_of("(1 2") == ErrorKind::Parse);
}

// gradient of a closure-heavy program against central differences
static void test_gradient() {
  auto p = compile_program("(param a 0.7) (param b 1.3) (define (f x) (* a (exp (* b x)))) (+ (f 0.5) (sin (* a b)))");
  auto vm = make_vm();
  Inputs in;
  std::vector<double> th{0.7, 1.3};
  LossSpec ls;
  auto r = run_batch(*p, *vm, th.data(), 1, in, true, &ls, lim);
  for (int j = 0; j < 2; ++j) {
    double h = 1e-6;
    auto tp = th, tm = th;
    tp[j] += h;
    tm[j] -= h;
    double fd = (run_batch(*p, *vm, tp.data(), 1, in, false, nullptr, lim).values[0] -
                 run_batch(*p, *vm, tm.data(), 1, in, false, nullptr, lim).values[0]) /
                (2 * h);
    CHECK(std::fabs(fd - r.grads[j]) < 1e-7 * (1 + std::fabs(fd)));
  }
}

// divergent lanes: each lane equals its own one-lane run, bit for bit
static void test_divergence() {
  auto p = compile_program(
      "(param a 0.5) (if (> a 0) (* a a) (let loop ((x a) (k 0)) (if (< x -1) k (loop (* x 1.5) (+ k 1)))))");
  auto vm = make_vm();
  Inputs in;
  std::vector<double> th{-0.3, 0.4, -2.0, 1.5, -0.01};
  auto all = run_batch(*p, *vm, th.data(), 5, in, true, nullptr, lim);
  for (int l = 0; l < 5; ++l) {
    auto one = run_batch(*p, *vm, &th[l], 1, in, true, nullptr, lim);
    CHECK(one.values[0] == all.values[l]);
    CHECK(one.grads[0] == all.grads[l]);
  }
}

static void test_calibrate() {
  // fit a x + b to y = 2 x - 1 (exact)
  auto p = compile_program("(param a 0.1) (param b 0.1) (+ (* a x) b)");
  auto vm = make_vm();
  Inputs in;
  in.shared.resize(1);
  in.per_lane.resize(1);
  in.shared[0].rank = 1;
  in.shared[0].rows = 20;
  CalibSpec spec;
  spec.optimizer = Optimizer::LBFGS;
  spec.steps = 100;
  spec.loss.kind = LossKind::MSE;
  for (int i = 0; i < 20; ++i) {
    in.shared[0].data.push_back(i / 10.0);
    spec.loss.target.push_back(2 * (i / 10.0) - 1);
  }
  std::vector<double> th{0.1, 0.1, 1.0, -2.0};
  auto r = calibrate(*p, *vm, th.data(), 2, in, spec, lim);
  CHECK(std::fabs(r.best_theta[0] - 2) < 1e-6 && std::fabs(r.best_theta[1] + 1) < 1e-6);
  CHECK(r.best_loss[1] < 1e-12);
}

// Tape replay: a second gradient run of the same program re-executes the tape; it must equal a
// walk on a fresh VM bit for bit, and fall back to a walk when a guard fails.
static void test_replay() {
  auto p = compile_program("(param a 0.5) (param b 2.0) (if (< a 1) (* (floor (* 4 b)) (exp (* a b))) (/ b a))");
  auto vm = make_vm();
  Inputs in;
  LossSpec ls;
  std::vector<double> first{0.5, 2.0, 0.25, 1.5}, near{0.6, 2.1, 0.3, 1.4}, far{0.6, 2.1, 1.5, 1.4};
  run_batch(*p, *vm, first.data(), 2, in, true, &ls, lim);  // records
  // near: replayed; far: its lanes now disagree, so it walks (and splits, which records nothing);
  // near again: walked and recorded; and once more: replayed
  const std::vector<double>* order[] = {&near, &far, &near, &near};
  const bool expect_replay[] = {true, false, false, true};
  for (int k = 0; k < 4; ++k) {
    uint64_t replayed = vm->replays_done();
    auto got = run_batch(*p, *vm, order[k]->data(), 2, in, true, &ls, lim);
    auto fresh_vm = make_vm();
    auto want = run_batch(*p, *fresh_vm, order[k]->data(), 2, in, true, &ls, lim);
    CHECK(got.values == want.values && got.grads == want.grads);
    CHECK((vm->replays_done() == replayed + 1) == expect_replay[k]);
  }
  Limits off = lim;
  off.replay = false;
  uint64_t replayed = vm->replays_done();
  run_batch(*p, *vm, near.data(), 2, in, true, &ls, off);
  run_batch(*p, *vm, near.data(), 2, in, true, &ls, off);
  CHECK(vm->replays_done() == replayed);
}

// Issue 17: sizes checked in 64 bits, linear-algebra scratch in the memory budget, the work budget
// and the wall clock. Each returns the LimitError's message ("" when the program ran).
static std::string limit_message(const std::string& src, const Limits& l, int lanes = 1) {
  auto p = compile_program(src);
  auto vm = make_vm();
  Inputs in;
  std::vector<double> theta;
  for (int k = 0; k < lanes; ++k)
    for (auto& d : p->params) theta.push_back(d.init + 0.1 * k);
  try {
    run_batch(*p, *vm, theta.data(), lanes, in, false, nullptr, l);
  } catch (const Error& e) {
    return e.kind == ErrorKind::Limit ? std::string(e.what()) : "not a LimitError: " + std::string(e.what());
  }
  return "";
}

static bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

static void test_limits() {
  Limits huge;  // budgets that do not stop a size: the 64-bit size checks must
  huge.max_bytes = 1ull << 62;
  huge.max_work = 1ull << 62;
  // rows * cols past 32 bits (once a wrapped size, a small buffer and a SIGSEGV)
  std::string m = limit_message("(vsum (outer (ones 70000) (ones 70000)))", lim);
  CHECK(has(m, "'outer'"));
  m = limit_message("(vsum (outer (ones 65536) (ones 65537)))", huge);
  CHECK(has(m, "'outer'") && has(m, "array too large"));
  m = limit_message("(vsum (zeros 4294967297))", huge);  // a dimension past 32 bits (once truncated)
  CHECK(has(m, "'zeros'") && has(m, "past 2^32"));
  m = limit_message("(param a 1.0) (vsum (outer (* a (ones 2000)) (ones 2000)))", lim, 300);  // 300 lanes
  CHECK(has(m, "'outer'") && has(m, "memory budget"));
  // linear-algebra scratch counts: the matrix and its inverse fit in 70 MiB, the work matrices do not
  Limits small = lim;
  small.max_bytes = 70ull << 20;
  small.max_work = 100'000'000'000ull;
  m = limit_message("(vsum (inv (eye 2000)))", small);
  CHECK(has(m, "'inv'") && has(m, "memory budget (max_bytes=70 MiB"));
  // the work budget: linear algebra at n^3, a determinant of 400 x 400 in a loop ends at once
  m = limit_message("(let ((m (+ (eye 400) (ones 400 400)))) (let loop ((s 0.0)) (loop (+ s (det m)))))", lim);
  CHECK(has(m, "'det'") && has(m, "work budget (max_work=500000000 element operations) exceeded"));
  Limits work = lim;
  work.max_work = 1'000'000;
  CHECK(limit_message("(det (eye 99))", work).empty());  // 970,299 + its inputs
  CHECK(has(limit_message("(det (eye 101))", work), "work budget"));
  // the wall clock, on a loop that the step and work budgets would let run for minutes
  Limits clock = lim;
  clock.max_steps = 1ull << 60;
  clock.max_work = 1ull << 60;
  clock.max_seconds = 0.2;
  auto t0 = std::chrono::steady_clock::now();
  m = limit_message("(let loop ((i 0) (s 0.0)) (if (= i 3000000000) s (loop (+ i 1) (+ s 1.0))))", clock);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(has(m, "wall-clock limit (max_seconds=0.2) exceeded"));
  CHECK(took >= 0.2 && took < 5.0);
  // the work of an evaluation, and of its replay (charged as the walk was)
  auto p = compile_program("(param a 1.0) (det (* a (+ (eye 50) (ones 50 50))))");
  auto vm = make_vm();
  Inputs in;
  LossSpec ls;
  double theta[2] = {1.0, 1.5};
  run_batch(*p, *vm, theta, 2, in, true, &ls, lim);
  uint64_t walked = vm->work_used();
  CHECK(walked >= 2ull * 50 * 50 * 50);
  uint64_t replayed = vm->replays_done();
  theta[0] = 1.1;
  run_batch(*p, *vm, theta, 2, in, true, &ls, lim);
  CHECK(vm->replays_done() == replayed + 1);
  CHECK(vm->work_used() >= 2ull * 50 * 50 * 50 && vm->work_used() <= walked);
}

int main() {
  test_reader();
  test_eval();
  test_errors();
  test_gradient();
  test_divergence();
  test_calibrate();
  test_replay();
  test_limits();
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
