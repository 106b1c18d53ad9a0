// A compiled program and the public C++ API of the runtime: compile, evaluate a population of
// parameter vectors, value and gradient. The Python module (native/python/module.cc) wraps this.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ast.h"
#include "value.h"

namespace ndvm {

enum Constraint : int { C_FREE = 0, C_POSITIVE = 1, C_BETWEEN = 2 };

struct ParamDecl {
  std::string name;
  double init = 0;
  Constraint constraint = C_FREE;
  double lo = 0, hi = 0;
  bool shared = false;  // `(param NAME INIT [CONSTRAINT] shared)`: one value for every group of a grouped fit
};

// Budgets of one evaluation (one run_batch or run_one call, all its lanes and lane groups
// together); exceeding any raises LimitError naming the limit (docs/reliability.md, "Limits").
struct Limits {
  uint64_t max_steps = 20'000'000;  // evaluation steps (node visits) per run
  int max_depth = 100'000;          // nested evaluations (also bounded by C stack bytes)
  uint64_t max_bytes = 1ull << 30;  // payload + heap + tape + linear-algebra scratch per run
  bool replay = true;               // re-execute the last tape when only parameters changed
  bool tiled = true;                // a replayed point-wise tape runs tile by tile (tiled.cc)
  // Element operations, summed over lanes: every numeric result counts its elements, a product
  // m*k*n, det/inv/logdet/cholesky of an n x n matrix n^3, solve n^3 + n^2*m, a reduction its
  // input, a list traversal its length. Replayed records count as walked ones. 5e8 is 0.1-1.5 s of
  // the slowest kinds of work on an idle machine; the largest realistic model measured uses 2.5e7.
  uint64_t max_work = 500'000'000;
  double max_seconds = 0;  // wall-clock limit per evaluation, checked cooperatively; 0: off
};

struct Program {
  std::string source;
  bool f32 = false;  // float32: every numeric result is rounded to float32
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::unique_ptr<Lambda>> lambdas;
  const Lambda* top = nullptr;        // the whole program as a lambda of no arguments
  std::vector<double> const_payload;  // payload of pooled numeric constants (offset 0.. in every run)
  std::deque<Pair> const_pairs;       // quoted list structure (immutable)
  std::vector<std::string> symbols;   // symbol id -> name
  std::vector<ParamDecl> params;
  // The parameters the result is affine in (linear.h, found at compile time), ascending: what a
  // projected calibration solves, when basis() exists.
  std::vector<int> linear_params;
  // Its basis program (linear.h, basis_source): the same parameters, the result's parts as a list;
  // what a projected calibration walks. Built on first use (most programs are never projected:
  // the pipeline searches by default), once, from any thread; null when the result cannot be split.
  const Program* basis() const;
  mutable std::once_flag basis_once;
  mutable std::shared_ptr<const Program> basis_program;
  std::vector<std::string> inputs;  // free variables, first-use order
  std::vector<int> input_line, input_col;
  std::string canonical;  // canonical form (see canonical.cc)
  uint64_t serial = 0;    // unique per compiled program: a VM's replay is keyed on it

  int intern(const std::string& s);
};

// source -> Program. Throws Error(Parse|Check), and Error(Limit) when the syntax tree and the
// compiled form would need more than `max_bytes` (Limits::max_bytes; 0: no budget) or nesting
// would overflow the C stack of the calling thread.
std::shared_ptr<Program> compile_program(const std::string& source, bool f32 = false, uint64_t max_bytes = 0);

// Canonical form for deduplication: alpha-renamed, inexact literals abstracted, commutative
// arguments ordered. Computed at compile time.
std::string canonical_form(const std::string& source);

// A numeric array handed to the runtime: rank 0, 1 or 2, row-major doubles.
struct Array {
  int rank = 0;
  uint32_t rows = 1, cols = 1;
  std::vector<double> data;
  // in 64 bits: a rows x cols product need not fit in 32 (the module refuses such inputs)
  uint64_t numel() const { return rank == 0 ? 1u : rank == 1 ? rows : static_cast<uint64_t>(rows) * cols; }
};

// The data of one evaluation request. Shared inputs are the same for every lane; a lane input
// holds one Array per lane (all of one shape).
struct Inputs {
  std::vector<Array> shared;                 // indexed like Program::inputs (unused where lane-given)
  std::vector<std::vector<Array>> per_lane;  // per input: empty, or one Array per lane
};

// A structural result converted out of the VM for one lane (what Program.run returns in Python).
struct OutValue {
  enum Kind { Unspec, Nil, Bool, Sym, Int, Real, Array_, List, Pair_, Procedure } kind = Unspec;
  double num = 0;
  int64_t inum = 0;  // Int
  bool b = false;
  std::string sym;
  Array arr;
  std::vector<OutValue> items;  // List items; Pair_: the elements of an improper list, then its tail
};

enum class LossKind { Value, MSE, GaussianNLL };

// How one lane's scalar objective is formed from the program's result.
struct LossSpec {
  LossKind kind = LossKind::Value;
  std::vector<double> target;                    // MSE / NLL: one target per output element (shared by lanes)
  std::vector<std::vector<double>> lane_target;  // or one target vector per lane
  int sigma_param = -1;                          // NLL: index of a declared `sigma` parameter, or -1 (profiled)
  // Variable projection (MSE and NLL; calibrate's solve_linear): the program run is a basis
  // program (Program::basis()) whose result is the list (a b_1 ... b_k) of the prediction
  // a + sum_j c_j b_j, c the values of these k parameters of the program it was made from. A
  // lane's loss is the loss at their least-squares values (BatchResult::linear_solution); its
  // gradient is the projected loss's. Empty: an ordinary batch.
  std::vector<int> linear;
};

// Results of a batched run over B lanes.
struct BatchResult {
  std::vector<double> values;  // [B, numel]
  int rank = 0;
  uint32_t rows = 1, cols = 1;
  std::vector<double> losses;           // [B] objective per lane (when a loss or gradient was asked for)
  std::vector<double> grads;            // [B, P] when requested
  std::vector<double> input_grads;      // per requested shared input: numel doubles, summed over lanes
  std::vector<double> linear_solution;  // [B, k] a projected batch's solved values
};

class VM;

// Evaluates `theta` [B, P] (natural units). With `grad`, also d(objective)/d(theta) where the
// objective is the scalar result (LossKind::Value) or the loss against a target.
// Lanes that disagree on a branch are split into groups and each group is re-run on its own, so
// every lane computes exactly what a one-lane run computes.
// `lane_map` (optional): row k of theta is lane lane_map[k] of the per-lane inputs and targets,
// so a subset of lanes is evaluated without copying their data.
// `want_values` false: the caller reads only losses and gradients (values may be left empty).
BatchResult run_batch(const Program& p, VM& vm, const double* theta, int B, const Inputs& in, bool grad,
                      const LossSpec* loss, const Limits& lim, const std::vector<int>* input_grad_ids = nullptr,
                      const std::vector<int>* lane_map = nullptr, bool want_values = true);

// One lane, any result type.
OutValue run_one(const Program& p, VM& vm, const double* theta, const Inputs& in, const Limits& lim);

// A VM owns the arenas (payload, heap, tape) reused across runs; one per thread.
std::unique_ptr<VM> make_vm();

// The most work (Limits::max_work units) any successful evaluation in this process has used, on
// any thread: how far realistic programs stay below the budget. `reset` starts it again at 0.
uint64_t peak_work(bool reset = false);

}  // namespace ndvm
