// The evaluation driver: has a VM load parameters and inputs and run the program over a group of
// lanes, and splits the group when its lanes disagree on a branch (Divergence). Each part is run
// again on its own, so a lane's result never depends on the other lanes of the batch. It reaches
// the VM only through its public interface (vm.h); replaying a kept tape is the VM's (replay.cc).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "linear.h"
#include "nesting.h"
#include "simd.h"
#include "vm.h"

namespace ndvm {

std::unique_ptr<VM> make_vm() { return std::make_unique<VM>(); }

namespace {
std::atomic<uint64_t> g_peak_work{0};
// once per evaluation: a relaxed load, and a write only when a new peak is reached
void note_work(uint64_t w) {
  uint64_t cur = g_peak_work.load(std::memory_order_relaxed);
  while (w > cur && !g_peak_work.compare_exchange_weak(cur, w, std::memory_order_relaxed)) {}
}
}  // namespace

uint64_t peak_work(bool reset) {
  return reset ? g_peak_work.exchange(0, std::memory_order_relaxed) : g_peak_work.load(std::memory_order_relaxed);
}

namespace {

void check_inputs(const Program& p, const Inputs& in, int B, const std::vector<int>* lane_map) {
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    bool lane = i < in.per_lane.size() && !in.per_lane[i].empty();
    bool shared = i < in.shared.size() && !in.shared[i].data.empty();
    if (!lane && !shared)
      eval_error("missing input '" + p.inputs[i] + "': pass it in inputs (or lane_inputs)", p.input_line[i],
                 p.input_col[i]);
    if (lane && !lane_map && static_cast<int>(in.per_lane[i].size()) != B)
      eval_error("lane input '" + p.inputs[i] + "' has " + std::to_string(in.per_lane[i].size()) + " lanes, expected " +
                 std::to_string(B));
  }
}

// Lanes per chunk of a wide batch (run_batch). kalman2d_T80 keeps about 60 KB of values and adjoints
// per lane: 256 lanes stay within the last-level cache, 1,024 do not.
constexpr int kChunkLanes = 256;

bool all_inputs_shared(const Program& p, const Inputs& in) {
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (i < in.per_lane.size() && !in.per_lane[i].empty()) return false;
  return true;
}

// sum_e (y[e] - t[e])^2 in the order of simd.h (element e into chain e mod kSumChains, the chains
// combined pairwise), which a tiled replay (tiled.cc) follows across its tiles.
double sum_of_squares(const double* y, const double* t, uint32_t ne) {
  double chain[simd::kSumChains] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t e = 0; e < ne; ++e) chain[e % simd::kSumChains] += (y[e] - t[e]) * (y[e] - t[e]);
  return simd::combine_chains(chain, 1);
}

struct Driver {
  const Program& p;
  VM& vm;
  const double* theta;
  int B, P;
  const Inputs& in;
  bool grad;
  const LossSpec* loss;
  const Limits& lim;
  const std::vector<int>* input_grad_ids;
  const std::vector<int>* lane_map;
  BatchResult res;
  bool shape_set = false;
  int group_lanes = 0;  // lanes of a whole group (B, or a chunk's width): a walk over them is kept for replay
  // project()'s scratch, reused: the basis program's parts, their data, the normal equations
  std::vector<Value> parts_;
  std::vector<const double*> base_;
  std::vector<size_t> stride_;
  std::vector<double> gram_, residual_;

  void run_group(const std::vector<int>& lanes) {
    int L = static_cast<int>(lanes.size());
    vm.reset(p, L, grad, lim);
    size_t params_end = vm.load(theta, P, lanes, in, grad, input_grad_ids, lane_map);
    size_t inputs_end = vm.inputs_end();
    Value out;
    try {
      out = vm.run();
      vm.check_work();  // before a tape over the budget could be kept for replay
      if (grad && !input_grad_ids && L == group_lanes && lim.replay) vm.save_replay(params_end, inputs_end, out);
    } catch (Divergence& d) {
      std::vector<int> yes, no;
      for (int l = 0; l < L; ++l) (d.mask[l] ? yes : no).push_back(lanes[l]);
      run_group(yes);
      run_group(no);
      return;
    }
    store(lanes, out);
  }

  void store(const std::vector<int>& lanes, const Value& result) {
    int L = static_cast<int>(lanes.size());
    if (loss && !loss->linear.empty()) {  // a basis program's columns
      if (project(lanes, result) && grad) vm.backward();
      if (grad) gather_gradients(lanes);
      return;
    }
    Value out = vm.promote(result);  // an exact integer result is a constant of every lane
    if (out.tag != T_NUM) {
      eval_error("the program's result is " + vm.describe(out) + ", not a number, vector or matrix" +
                 (grad ? " (gradients need a numeric result)" : " (use run() for structured results)"));
    }
    set_shape(out.rank, out.rows, out.cols());
    uint32_t ne = out.numel();
    uint32_t Lo = vm.lanes_of(out);
    const double* d = vm.data(out);
    for (int l = 0; l < L; ++l)
      for (uint32_t e = 0; e < ne; ++e)
        res.values[static_cast<size_t>(lanes[l]) * ne + e] = d[static_cast<size_t>(e) * Lo + (Lo == 1 ? 0 : l)];
    if (!grad && !loss) return;

    // objective per lane and its adjoint seed
    // an inactive result has no zeroed adjoint of its own: seed into a scratch slot instead
    if (grad && !out.active()) vm.zero_adjoint(out);
    double* seed = grad ? vm.adjoint(out) : nullptr;
    seed_loss(lanes, out, seed, ne, Lo);
    if (!grad) return;
    if (out.active()) vm.backward();
    gather_gradients(lanes);
  }

  // After backward: each lane's gradient (and the requested inputs'), into res.
  void gather_gradients(const std::vector<int>& lanes) {
    const int L = static_cast<int>(lanes.size());
    for (int j = 0; j < P; ++j) {
      const double* g = vm.adjoint(vm.param(j));
      for (int l = 0; l < L; ++l)
        res.grads[static_cast<size_t>(lanes[l]) * P + j] = g[l];  // adj was zeroed: 0 when inactive
    }
    if (input_grad_ids) {
      size_t base = 0;
      for (int id : *input_grad_ids) {
        const Value& v = vm.input(id);
        uint32_t ne_in = v.numel(), lanes_in = vm.lanes_of(v);
        for (uint32_t e = 0; e < ne_in; ++e)
          for (uint32_t l = 0; l < lanes_in; ++l)
            res.input_grads[base + e] += vm.adjoint(v)[static_cast<size_t>(e) * lanes_in + l];
        base += ne_in;
      }
    }
  }

  // The target of batch row `lane` and its check against a result of ne values.
  const std::vector<double>& target_of(int lane, const Value& out, uint32_t ne) const {
    const std::vector<double>& tv =
        loss->lane_target.empty() ? loss->target : loss->lane_target[lane_map ? (*lane_map)[lane] : lane];
    if (tv.size() != ne && !(out.rank == 0 && !tv.empty()))
      eval_error("the target has " + std::to_string(tv.size()) + " values but the program returned " +
                 std::to_string(ne));
    return tv;
  }

  // A projected batch (LossSpec::linear): the program is a basis program (linear.h) whose result
  // is the list (a b_1 ... b_k) of the prediction's parts, a + sum_j c_j b_j. Per lane: the
  // least-squares c, the loss at that prediction (res.values holds the prediction), and the loss's
  // adjoint seeded into a (weight 1) and each b_j (weight c_j): with c held fixed this is the
  // gradient of the projected loss, by the envelope theorem (the loss is stationary in c at its
  // least squares). Returns whether anything was seeded (a column depends on a parameter).
  bool project(const std::vector<int>& lanes, const Value& result) {
    const int k = static_cast<int>(loss->linear.size()), L = static_cast<int>(lanes.size());
    parts_.clear();
    for (Value cur = result; cur.tag == T_PAIR; cur = static_cast<const Pair*>(cur.ptr)->cdr)
      parts_.push_back(vm.promote(static_cast<const Pair*>(cur.ptr)->car));
    if (static_cast<int>(parts_.size()) != k + 1) eval_error("internal error: a basis program returned no k+1 parts");
    const Value* widest = &parts_[0];
    for (const Value& v : parts_) {
      if (v.tag != T_NUM)
        eval_error("the program's result is " + vm.describe(v) + ", not a number, vector or matrix" +
                   " (gradients need a numeric result)");
      if (v.numel() > widest->numel()) widest = &v;
    }
    const uint32_t ne = widest->numel();
    for (const Value& v : parts_)
      if (v.numel() != 1 && v.numel() != ne) eval_error("the program's terms have different shapes");
    set_shape(widest->rank, widest->rows, widest->cols());
    if (res.linear_solution.empty()) res.linear_solution.assign(static_cast<size_t>(B) * k, NAN);
    bool seeded = false;
    for (int l = 0; l < L; ++l) {
      const int lane = lanes[l];
      const std::vector<double>& tv = target_of(lane, *widest, ne);
      const uint32_t n = static_cast<uint32_t>(tv.size());
      // each part as a base pointer and a stride over points (0: one value for every point)
      base_.resize(static_cast<size_t>(k) + 1);
      stride_.resize(static_cast<size_t>(k) + 1);
      for (int j = 0; j <= k; ++j) {
        const Value& v = parts_[static_cast<size_t>(j)];
        const uint32_t lo = vm.lanes_of(v);
        base_[j] = vm.data(v) + (lo == 1 ? 0 : l);
        stride_[j] = v.numel() == 1 ? 0 : lo;
      }
      double* c = res.linear_solution.data() + static_cast<size_t>(lane) * k;
      double* pred = res.values.data() + static_cast<size_t>(lane) * ne;
      if (!solve_normal_equations(n, k, base_.data(), stride_.data(), tv.data(), gram_, c)) {
        res.losses[lane] = NAN;  // a part that is not finite: the lane's optimizer steps back
        continue;
      }
      residual_.resize(n);
      double sse = 0;
      for (uint32_t e = 0; e < n; ++e) {
        double y = base_[0][static_cast<size_t>(e) * stride_[0]];
        for (int j = 0; j < k; ++j) y += c[j] * base_[j + 1][static_cast<size_t>(e) * stride_[j + 1]];
        if (e < ne) pred[e] = y;
        residual_[e] = y - tv[e];
        sse += residual_[e] * residual_[e];
      }
      // the objective, and its derivative by each prediction: scale * residual
      double obj, scale;
      if (loss->kind == LossKind::MSE) {
        obj = sse / n;
        scale = 2.0 / n;
      } else if (loss->sigma_param >= 0) {
        const double s = vm.data(vm.param(loss->sigma_param))[l];
        obj = 0.5 * sse / (s * s * n) + std::log(s) + 0.5 * std::log(2 * M_PI);
        scale = 1.0 / (s * s * n);
        if (grad) vm.adjoint(vm.param(loss->sigma_param))[l] += -sse / (s * s * s * n) + 1.0 / s;
      } else {  // sigma profiled out: sigma^2 = mse
        obj = 0.5 * std::log(2 * M_PI * sse / n) + 0.5;
        scale = 1.0 / sse;
      }
      res.losses[lane] = obj;
      if (!grad) continue;
      for (int j = 0; j <= k; ++j) {
        const Value& v = parts_[static_cast<size_t>(j)];
        if (!v.active()) continue;  // a constant part (an intercept's 1): nothing flows back
        seeded = true;
        const double w = scale * (j == 0 ? 1.0 : c[j - 1]);
        const uint32_t lo = vm.lanes_of(v);
        double* adj = vm.adjoint(v) + (lo == 1 ? 0 : l);
        for (uint32_t e = 0; e < n; ++e) adj[static_cast<size_t>(v.numel() == 1 ? 0 : e) * lo] += w * residual_[e];
      }
    }
    return seeded;
  }

  // Each lane's objective and its adjoint seed (an ordinary batch).
  void seed_loss(const std::vector<int>& lanes, const Value& out, double* seed, uint32_t ne, uint32_t Lo) {
    const int L = static_cast<int>(lanes.size());
    const LossKind kind = loss ? loss->kind : LossKind::Value;
    for (int l = 0; l < L; ++l) {
      int lane = lanes[l];
      const double* y = res.values.data() + static_cast<size_t>(lane) * ne;
      const double* t = nullptr;
      if (kind != LossKind::Value) {
        const std::vector<double>& tv = target_of(lane, out, ne);
        t = tv.data();
        if (tv.size() != ne) {  // a scalar result (a constant model) predicts every target value
          res.losses[lane] = broadcast_loss(kind, y[0], t, static_cast<uint32_t>(tv.size()), l,
                                            grad ? seed + (Lo == 1 ? 0 : l) : nullptr);
          continue;
        }
      }
      double obj = 0;
      size_t sl = Lo == 1 ? 0 : l;
      switch (kind) {
        case LossKind::Value:
          if (ne != 1)
            eval_error("a gradient needs a scalar result; the program returned " + vm.describe(out) +
                       " (use a loss such as mse to compare it with a target)");
          obj = y[0];
          if (seed) seed[sl] += 1.0;
          break;
        case LossKind::MSE: {
          obj = sum_of_squares(y, t, ne) / ne;
          if (seed)
            for (uint32_t e = 0; e < ne; ++e) seed[static_cast<size_t>(e) * Lo + sl] += 2.0 * (y[e] - t[e]) / ne;
          break;
        }
        case LossKind::GaussianNLL: {
          const double sse = sum_of_squares(y, t, ne);
          const double log2pi = std::log(2 * M_PI);
          if (loss->sigma_param >= 0) {
            double s = vm.data(vm.param(loss->sigma_param))[l];
            obj = 0.5 * sse / (s * s * ne) + std::log(s) + 0.5 * log2pi;
            if (seed) {
              for (uint32_t e = 0; e < ne; ++e) seed[static_cast<size_t>(e) * Lo + sl] += (y[e] - t[e]) / (s * s * ne);
              vm.adjoint(vm.param(loss->sigma_param))[l] += -sse / (s * s * s * ne) + 1.0 / s;
            }
          } else {  // sigma profiled out: sigma^2 = mse
            double mse = sse / ne;
            obj = 0.5 * std::log(2 * M_PI * mse) + 0.5;
            if (seed)
              for (uint32_t e = 0; e < ne; ++e) seed[static_cast<size_t>(e) * Lo + sl] += (y[e] - t[e]) / (ne * mse);
          }
          break;
        }
      }
      res.losses[lane] = obj;
    }
  }

  // The loss of a scalar result y against n target values (each predicted by y), with its
  // adjoint added to *seed: the formulas of store() with y[e] = y for every e.
  double broadcast_loss(LossKind kind, double y, const double* t, uint32_t n, int l, double* seed) {
    double sse = 0, sum = 0;  // sum_e (y - t_e)^2 and sum_e (y - t_e)
    for (uint32_t e = 0; e < n; ++e) {
      sse += (y - t[e]) * (y - t[e]);
      sum += y - t[e];
    }
    if (kind == LossKind::MSE) {
      if (seed) *seed += 2.0 * sum / n;
      return sse / n;
    }
    if (loss->sigma_param >= 0) {  // Gaussian NLL with a sigma parameter
      double s = vm.data(vm.param(loss->sigma_param))[l];
      if (seed) {
        *seed += sum / (s * s * n);
        vm.adjoint(vm.param(loss->sigma_param))[l] += -sse / (s * s * s * n) + 1.0 / s;
      }
      return 0.5 * sse / (s * s * n) + std::log(s) + 0.5 * std::log(2 * M_PI);
    }
    double mse = sse / n;  // sigma profiled out
    if (seed) *seed += sum / (n * mse);
    return 0.5 * std::log(2 * M_PI * mse) + 0.5;
  }

  static std::string shape_text(int rank, uint32_t rows, uint32_t cols) {
    if (rank == 0) return "a number";
    if (rank == 1) return "a vector of " + std::to_string(rows);
    return "a " + std::to_string(rows) + "x" + std::to_string(cols) + " matrix";
  }

  void set_shape(int rank, uint32_t rows, uint32_t cols) {
    if (!shape_set) {
      res.rank = rank;
      res.rows = rows;
      res.cols = cols;
      size_t ne = rank == 0 ? 1 : rank == 1 ? rows : static_cast<size_t>(rows) * cols;
      // B lanes of a result that is the same in every lane are B copies outside the arena: the
      // memory budget bounds them too (ne <= 2^32 and B < 2^31: no overflow in 64 bits)
      if (static_cast<uint64_t>(B) * ne * sizeof(double) > lim.max_bytes)
        limit_error("memory budget (max_bytes=" + std::to_string(lim.max_bytes >> 20) +
                    " MiB per evaluation) exceeded: the result, " + std::to_string(ne) + " values in each of " +
                    std::to_string(B) + " lanes, needs " + std::to_string((static_cast<uint64_t>(B) * ne * 8) >> 20) +
                    " MiB; raise Limits.max_bytes if the program really needs more");
      res.values.assign(static_cast<size_t>(B) * ne, 0.0);
      shape_set = true;
      return;
    }
    if (res.rank != rank || (rank >= 1 && res.rows != rows) || (rank == 2 && res.cols != cols))
      eval_error("lanes returned results of different shapes (" + shape_text(res.rank, res.rows, res.cols) + " and " +
                 shape_text(rank, rows, cols) + ")");
  }
};

}  // namespace

BatchResult run_batch(const Program& p, VM& vm, const double* theta, int B, const Inputs& in, bool grad,
                      const LossSpec* loss, const Limits& lim, const std::vector<int>* input_grad_ids,
                      const std::vector<int>* lane_map, bool want_values) {
  if (B <= 0) eval_error("theta must have at least one row (lane)");
  check_inputs(p, in, B, lane_map);
  int P = static_cast<int>(p.params.size());
  Driver d{p, vm, theta, B, P, in, grad, loss, lim, input_grad_ids, lane_map, {}, false};
  if (grad) d.res.grads.assign(static_cast<size_t>(B) * P, 0.0);
  if (grad || loss) d.res.losses.assign(B, 0.0);
  if (input_grad_ids) {
    size_t total = 0;
    for (int id : *input_grad_ids) total += in.shared[id].numel();
    d.res.input_grads.assign(total, 0.0);
  }
  vm.begin_evaluation(lim);  // one work budget and one deadline for every lane group and a replay
  const bool replayable = grad && !input_grad_ids;
  // A wide batch of a replayable program with shared inputs runs in chunks of equal width: the first
  // chunk walks (or replays the last call's tape), the others replay it, so one chunk's values and
  // adjoints stay in the caches where the whole batch's arena would not. A lane's bits do not depend
  // on the lanes beside it, so chunking changes no result. The last chunk is padded with copies of
  // its last lane (computed and stored again, identically) to keep the width, and so the tape.
  const int chunks =
      replayable && lim.replay && B > kChunkLanes && all_inputs_shared(p, in) ? (B + kChunkLanes - 1) / kChunkLanes : 1;
  const int width = (B + chunks - 1) / chunks;
  d.group_lanes = width;
  std::vector<int> lanes(width);
  for (int c = 0; c < chunks; ++c) {
    for (int l = 0; l < width; ++l) lanes[l] = std::min(c * width + l, B - 1);
    // a point-wise tape: forward, loss and backward tile by tile (tiled.cc), values into d.res
    if (replayable && loss && want_values && !d.shape_set && vm.tiled_points(p, width, lim))
      d.set_shape(1, vm.tiled_points(p, width, lim), 1);
    // (a basis program's list result is never tiled: VM::plan_tiles keeps numeric vectors only)
    if (replayable && loss && vm.try_replay_tiled(p, theta, P, lanes, in, lane_map, lim, *loss, d.res, want_values))
      continue;
    if (replayable && vm.try_replay(p, theta, P, lanes, in, lane_map, lim)) d.store(lanes, vm.replay_result());
    else d.run_group(lanes);
  }
  note_work(vm.work_used());
  return std::move(d.res);
}

namespace {
// What converting a result has used: it counts against the evaluation's budgets, since a
// 10^7-element list takes seconds and gigabytes as OutValues (then as Python objects).
struct ConvertBudget {
  VM& vm;
  uint64_t max_bytes;
  uint64_t bytes = 0, nodes = 0;
  void charge(uint64_t more) {
    bytes += more;
    if (bytes > max_bytes)
      limit_error("memory budget (max_bytes=" + std::to_string(max_bytes >> 20) +
                  " MiB) exceeded while converting the result (" + std::to_string(nodes) +
                  " values so far): return less data, or a vector rather than a list");
    if ((++nodes & 4095) == 0) vm.poll_clock(nullptr);  // Limits.max_seconds covers the conversion
  }
};

// Results share the nesting limit of programs (nesting.h): conversion recurses per level of
// nesting (a list inside a list), never per element (the spine of a list is iterated).
OutValue convert(ConvertBudget& budget, const Value& v, int depth, const StackProbe& probe) {
  if (depth > kMaxNesting)
    limit_error("the result is nested more than " + std::to_string(kMaxNesting) +
                " levels deep (the nesting limit); return a flatter structure");
  probe.check("converting the result", 0, 0);
  VM& vm = budget.vm;
  budget.charge(sizeof(OutValue));
  OutValue o;
  switch (v.tag) {
    case T_INT:
      o.kind = OutValue::Int;
      o.inum = v.i;
      o.num = static_cast<double>(v.i);
      break;
    case T_UNDEF:
    case T_UNSPEC: o.kind = OutValue::Unspec; break;
    case T_NIL: o.kind = OutValue::Nil; break;
    case T_BOOL:
      o.kind = OutValue::Bool;
      o.b = v.i != 0;
      break;
    case T_SYM:
      o.kind = OutValue::Sym;
      o.sym = vm.program().symbols[v.i];
      break;
    case T_CLOSURE:
    case T_PRIM: o.kind = OutValue::Procedure; break;
    case T_NUM:
      if (v.rank == 0) {
        o.kind = OutValue::Real;
        o.num = vm.data(v)[0];
      } else {
        o.kind = OutValue::Array_;
        o.arr.rank = v.rank;
        o.arr.rows = v.rows;
        o.arr.cols = v.cols();
        budget.charge(sizeof(double) * v.numel());
        o.arr.data.assign(vm.data(v), vm.data(v) + v.numel());
      }
      break;
    case T_PAIR: {
      Value cur = v;
      while (cur.tag == T_PAIR) {
        const Pair* p = static_cast<const Pair*>(cur.ptr);
        o.items.push_back(convert(budget, p->car, depth + 1, probe));
        cur = p->cdr;
      }
      if (cur.tag == T_NIL) {
        o.kind = OutValue::List;
      } else {  // improper: the elements, then the tail as the last item
        o.kind = OutValue::Pair_;
        o.items.push_back(convert(budget, cur, depth + 1, probe));
      }
      break;
    }
  }
  return o;
}
}  // namespace

OutValue run_one(const Program& p, VM& vm, const double* theta, const Inputs& in, const Limits& lim) {
  check_inputs(p, in, 1, nullptr);
  vm.begin_evaluation(lim);
  vm.reset(p, 1, false, lim);
  std::vector<int> lanes{0};
  vm.load(theta, static_cast<int>(p.params.size()), lanes, in, false, nullptr, nullptr);
  Value v = vm.run();
  vm.check_work();
  note_work(vm.work_used());
  const StackProbe probe;
  ConvertBudget budget{vm, lim.max_bytes};
  return convert(budget, v, 0, probe);
}

}  // namespace ndvm
