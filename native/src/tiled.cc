// Tiled replay: a kept tape whose work is elementwise over the points of the data (plus scalar
// code on the parameters, and the loss against a target) re-executed tile by tile over the points,
// forward and backward, with the loss and the parameters' adjoints accumulated across tiles.
//
// The whole-vector replay (replay.cc, then VM::backward) writes every intermediate, N points x L
// lanes, to the arena, zeroes its adjoint, and reads both back in the backward pass: for the data
// sizes of symbolic regression that is memory traffic, not arithmetic. Here a tile's intermediates
// and their adjoints stay in a small workspace (a few KiB per record, reused across evaluations).
//
// The bits are the whole-vector path's, lane for lane: the forward and elementwise adjoint kernels
// are the same functions (kernels.h, simd.h) called on a tile; the adjoint of a value broadcast
// over the points (a parameter) is summed in the order of simd.h (element i into chain i mod
// kSumChains, the chains combined pairwise), the chains carried from tile to tile (tiles are a
// multiple of kSumChains elements); the loss is summed in the same chains (Driver::store uses the
// same order); the adjoints of the parameters and of the scalar records receive their
// contributions in the whole-vector backward's order (the tape in reverse).
//
// What qualifies (VM::plan_tiles, when the run is kept for replay): every record either scalar
// (its output and inputs single elements: parameter code, guards on scalars) or a point record: an
// elementwise op of the SIMD kernels (+ - * / expt, the unary vector-math ops and the C library's
// unary ops) whose output has N elements, reading point records, single elements, or vectors of N
// elements that no record writes (the data). The result is a point record. The loss is mse, or the
// Gaussian likelihood with a sigma parameter. Anything else (linear algebra, reductions, a
// program returning a parameter, float32 programs) keeps the whole-vector replay.
#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "kernels.h"
#include "tiled.h"

namespace ndvm {

using namespace kern;

namespace {
constexpr uint32_t kChains = simd::kSumChains;
// Elements x lanes per tile: the intermediates of a ~10-record tape and their adjoints stay in the
// second-level cache (128-2,048 measured alike within 5% at 8 lanes; below 512, slower at one lane:
// more kernel calls per evaluation).
constexpr uint32_t kTileValues = 1024;

constexpr size_t kMaxWorkspace = 8u << 20;  // bytes

enum : uint8_t { SRC_ARENA = 0, SRC_POINT = 1 };  // where a point record's input lives
}  // namespace

struct TilePlan {
  bool ok = false;
  uint32_t n = 0;      // points: the elements of every point record's output
  uint32_t tile = 0;   // elements per tile (a multiple of kChains)
  uint32_t lanes = 0;  // lanes of the run (L)
  struct Point {
    uint32_t rec;      // tape index
    uint32_t lo;       // lanes of its output
    uint8_t src[2];    // SRC_ARENA or SRC_POINT, per input
    int32_t point[2];  // SRC_POINT: the input's point index
    int32_t chain[2];  // an active single-element input: its chain accumulators (index), else -1
  };
  std::vector<Point> points;
  std::vector<int32_t> point_of;                   // tape index -> point index, or -1 (a scalar record)
  std::unordered_map<uint32_t, int32_t> point_at;  // arena offset of a point record's output -> its index
  std::vector<uint32_t> scalars;                   // tape indices of the scalar records, in order
  int32_t result = -1;                             // the point record whose output is the result
  uint32_t chain_sets = 0;                         // broadcast operands summed in chains: kChains x L each
  // workspace: values and adjoints of the point records for one tile, the broadcast operand's
  // expansion and contributions, the chains and the loss's chains; reused across evaluations
  std::vector<double> work;
  uint64_t tiled_runs = 0;
};

void TilePlanDeleter::operator()(TilePlan* p) const { delete p; }

// Called by save_replay: decides whether the kept tape can run tile by tile, and how.
void VM::plan_tiles(const Value& result) {
  if (!tiles_) tiles_.reset(new TilePlan());
  TilePlan& tp = *tiles_;
  tp.ok = false;
  tp.points.clear();
  tp.point_at.clear();
  tp.scalars.clear();
  tp.point_of.assign(tape.size(), -1);
  tp.chain_sets = 0;
  tp.result = -1;
  if (prog->f32 || result.tag != T_NUM || result.rank != 1 || !result.active()) return;
  const uint32_t n = result.numel();
  if (n < 2 * kChains) return;
  const simd::Kernels& k = simd::active();
  // which arena offsets hold a point record's output (the record writing it)
  for (size_t r = 0; r < tape.size(); ++r) {
    const TapeRec& t = tape[r];
    const NumRef* in = record_inputs(t);
    const int nin = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
    bool scalar = t.out.ne <= 1;
    for (int i = 0; i < nin && scalar; ++i) scalar = in[i].ne == 1;
    if (scalar) {
      tp.scalars.push_back(static_cast<uint32_t>(r));
      continue;
    }
    const TapeKind kind = tape_kind(t.op);
    if (t.out.ne != n || t.nin > 2) return;
    if (kind == TapeKind::BINARY) {
      if (!k.has_binary(t.op)) return;  // min, max: the whole-vector backward's own loops
    } else if (kind != TapeKind::UNARY) {
      return;
    }
    TilePlan::Point pt{static_cast<uint32_t>(r), lanes_of(t.out), {SRC_ARENA, SRC_ARENA}, {-1, -1}, {-1, -1}};
    for (int i = 0; i < t.nin; ++i) {
      const NumRef& a = in[i];
      if (a.ne != 1 && a.ne != n) return;
      // the point record writing this offset (an arena offset is written once per run)
      const auto it = tp.point_at.find(a.n.off);
      const int32_t from = it == tp.point_at.end() ? -1 : it->second;
      if (from >= 0) {
        pt.src[i] = SRC_POINT;
        pt.point[i] = from;
      } else if (a.active()) {
        if (a.ne != 1) return;  // an active vector no point record wrote (an input's gradient)
        pt.chain[i] = static_cast<int32_t>(tp.chain_sets++);
      }
      if (kind == TapeKind::UNARY && (pt.src[0] != SRC_POINT || lanes_of(a) != pt.lo)) return;
    }
    tp.point_of[r] = static_cast<int32_t>(tp.points.size());
    tp.point_at[t.out.n.off] = tp.point_of[r];
    tp.points.push_back(pt);
    if (t.out.n.off == result.n.off) tp.result = tp.point_of[r];
  }
  if (tp.result < 0 || tp.points.empty()) return;
  // the result is the last point record's output (nothing reads a point record but point records),
  // one value per lane
  if (tp.result != static_cast<int32_t>(tp.points.size()) - 1 || tp.points[tp.result].lo != static_cast<uint32_t>(L))
    return;
  tp.n = n;
  tp.lanes = static_cast<uint32_t>(L);
  // a long tape gets shorter tiles: the workspace stays within kMaxWorkspace (outside the memory
  // budget's count, like the kernels' stack buffers); too long a tape keeps the whole-vector path
  const size_t per_value = sizeof(double) * (2 * tp.points.size() + 2);
  uint32_t tile = static_cast<uint32_t>(std::min<size_t>(kTileValues, kMaxWorkspace / per_value)) / L;
  tile = std::max(tile - tile % kChains, kChains);  // at least one chain block per lane
  if (per_value * tile * L > kMaxWorkspace) return;
  tp.tile = tile;
  const size_t tv = static_cast<size_t>(tp.tile) * L;
  tp.work.assign(tv * (2 * tp.points.size() + 2) + static_cast<size_t>(kChains) * L * (tp.chain_sets + 2), 0.0);
  tp.ok = true;
}

const tiled::Kernels& tiled::active() {
  // the variant of the elementwise kernels' instruction set, chosen once
  static const tiled::Kernels& chosen = [] {
    const char* isa = simd::isa_name();
    if (std::strcmp(isa, "avx512") == 0) return std::cref(tiled::kernels_avx512);
    if (std::strcmp(isa, "avx2") == 0) return std::cref(tiled::kernels_avx2);
    return std::cref(tiled::kernels_baseline);
  }();
  return chosen;
}

uint32_t VM::tiled_points(const Program& p, int lanes, const Limits& l) const {
  return tiles_ && tiles_->ok && l.tiled && replay_matches(p, lanes, l) ? tiles_->n : 0;
}

uint64_t VM::tiled_replays_done() const { return tiles_ ? tiles_->tiled_runs : 0; }

namespace {

// The contributions c[i, l] (i < m elements, Lo lanes) of a tile starting at a multiple of kChains
// added into the chains acc[k, l] (element i into chain i mod kChains).
inline void add_to_chains(double* acc, const double* c, uint32_t m, uint32_t Lo) {
  if (Lo == 1) {
    uint32_t i = 0;
    for (; i + kChains <= m; i += kChains)
      for (uint32_t k = 0; k < kChains; ++k) acc[k] += c[i + k];
    for (uint32_t k = 0; i + k < m; ++k) acc[k] += c[i + k];
    return;
  }
  for (uint32_t i = 0; i < m; ++i) {
    double* a = acc + static_cast<size_t>(i % kChains) * Lo;
    const double* ci = c + static_cast<size_t>(i) * Lo;
    for (uint32_t l = 0; l < Lo; ++l) a[l] += ci[l];
  }
}

// The chains of one lane combined (simd::combine_chains with the lanes' stride).
inline double combine(const double* acc, uint32_t l, uint32_t Lo) { return simd::combine_chains(acc + l, Lo); }

}  // namespace

bool VM::try_replay_tiled(const Program& p, const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                          const std::vector<int>* lane_map, const Limits& l, const LossSpec& loss, BatchResult& res,
                          bool want_values) {
  if (!tiles_ || !tiles_->ok || !l.tiled || !replay_matches(p, static_cast<int>(lanes.size()), l)) return false;
  if (loss.kind == LossKind::Value || (loss.kind == LossKind::GaussianNLL && loss.sigma_param < 0)) return false;
  const uint32_t n = tiles_->n;
  // a target of another length: the whole-vector path reports it
  if (loss.lane_target.empty() ? loss.target.size() != n : loss.lane_target.size() < lanes.size()) return false;
  for (size_t k = 0; k < lanes.size() && !loss.lane_target.empty(); ++k) {
    const int lane = lane_map ? (*lane_map)[lanes[k]] : lanes[k];
    if (lane < 0 || static_cast<size_t>(lane) >= loss.lane_target.size() || loss.lane_target[lane].size() != n)
      return false;
  }
  work += pay_top;  // the lane group before this one (a chunk of the same batch; 0 after begin_evaluation)
  pay_top = 0;
  const uint64_t work0 = work;
  if (replay_tiles(theta, P, lanes, in, lane_map, l, loss, res, want_values)) return true;
  work = work0;
  pay_top = 0;
  return false;
}

bool VM::replay_tiles(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                      const std::vector<int>* lane_map, const Limits& l, const LossSpec& loss, BatchResult& res,
                      bool want_values) {
  Replay& r = replay;
  TilePlan& tp = *tiles_;
  r.valid = false;  // until the replay has succeeded: the arena is being rewritten
  ++r.fell_back;
  lim = &l;
  pay_top = prog->const_payload.size();
  size_t params_end = load(theta, P, lanes, in, true, nullptr, lane_map);
  if (params_end != r.params_end || pay_top != r.inputs_end ||
      (!r.inputs.empty() && std::memcmp(pay + r.params_end, r.inputs.data(), sizeof(double) * r.inputs.size()) != 0))
    return false;
  pay_top = r.top;
  const uint32_t Lr = static_cast<uint32_t>(L);
  const uint32_t n = tp.n, T = tp.tile;
  const size_t tv = static_cast<size_t>(T) * Lr;
  const size_t np = tp.points.size();
  double* vals = tp.work.data();  // [point][T * Lo]
  double* adjs = vals + tv * np;  // [point][T * Lo]
  double* xbuf = adjs + tv * np;  // a broadcast operand expanded over the tile
  double* cbuf = xbuf + tv;       // its contributions
  double* chains = cbuf + tv;     // [chain set][kChains][L]
  double* lchain = chains + static_cast<size_t>(kChains) * Lr * tp.chain_sets;  // loss: [kChains][L]
  std::memset(chains, 0, sizeof(double) * kChains * Lr * (tp.chain_sets + 1));
  const simd::Kernels& k = simd::active();
  const tiled::Kernels& tk = tiled::active();
  const TilePlan::Point& rp = tp.points[tp.result];
  // per lane: the target, and the loss's scale factors (as Driver::store computes them)
  std::vector<const double*>& targets = tile_targets_;
  targets.resize(Lr);
  for (uint32_t q = 0; q < Lr; ++q) {
    const int lane = lane_map ? (*lane_map)[lanes[q]] : lanes[q];
    targets[q] = (loss.lane_target.empty() ? loss.target : loss.lane_target[lane]).data();
  }
  double* out = data(tape[rp.rec].out);
  const bool nll = loss.kind == LossKind::GaussianNLL;
  const double* sigma = nll ? data(params[loss.sigma_param]) : nullptr;
  const double nd = n;
  std::vector<double>& scales = tile_scales_;  // nll: s * s * n per lane, as Driver::store
  scales.assign(Lr, 0.0);
  for (uint32_t q = 0; nll && q < Lr; ++q) scales[q] = sigma[q] * sigma[q] * n;
  try {
    charge(r.extra_work);
    // scalar records, forward, in tape order (guards included); their adjoints zeroed
    for (uint32_t s : tp.scalars) {
      const TapeRec& t = tape[s];
      if (t.op == O_GUARD) {
        if (!guard_holds(*this, t)) return false;
        continue;
      }
      double* g = adjoint(t.out);
      for (size_t i = 0, m = static_cast<size_t>(t.out.numel()) * lanes_of(t.out); i < m; ++i) g[i] = 0.0;
      forward_record(*this, t);
    }
    auto input_view = [&](const TilePlan::Point& pt, int i, uint32_t e0) -> View {
      const NumRef& a = record_inputs(tape[pt.rec])[i];
      if (pt.src[i] == SRC_POINT) {
        const uint32_t lo = tp.points[pt.point[i]].lo;
        return View{vals + tv * pt.point[i], lo, a.uniform() ? 0u : 1u};
      }
      View v = view(*this, a, true);
      if (v.es) v.p += static_cast<size_t>(e0) * v.es;
      return v;
    };
    for (uint32_t e0 = 0; e0 < n; e0 += T) {
      const uint32_t m = n - e0 < T ? n - e0 : T;
      // forward
      for (size_t q = 0; q < np; ++q) {
        const TilePlan::Point& pt = tp.points[q];
        const TapeRec& t = tape[pt.rec];
        double* o = vals + tv * q;
        if (tape_kind(t.op) == TapeKind::BINARY) {
          const View va = input_view(pt, 0, e0), vb = input_view(pt, 1, e0);
          if (!tk.binary(t.op, o, m, pt.lo, va, vb)) fwd2(static_cast<Op>(t.op), o, m, pt.lo, va, vb);
        } else unary_loop(static_cast<Op>(t.op), vals + tv * pt.point[0], o, static_cast<size_t>(m) * pt.lo);
      }
      // the result's values into the arena, the loss's sums, and its seed
      const double* y = vals + tv * tp.result;
      double* seed = adjs + tv * tp.result;
      if (want_values) std::memcpy(out + static_cast<size_t>(e0) * Lr, y, sizeof(double) * m * Lr);
      std::memset(adjs, 0, sizeof(double) * tv * np);
      tk.loss(y, targets.data(), e0, scales.data(), nll, nd, lchain, seed, m, Lr);
      // backward over the tile
      for (size_t q = np; q-- > 0;) {
        const TilePlan::Point& pt = tp.points[q];
        const TapeRec& t = tape[pt.rec];
        const double* go = adjs + tv * q;
        const double* z = vals + tv * q;
        const size_t mt = static_cast<size_t>(m) * pt.lo;
        if (tape_kind(t.op) == TapeKind::UNARY) {
          const double* x = vals + tv * pt.point[0];
          double* ga = adjs + tv * pt.point[0];
          const Op op = static_cast<Op>(t.op);
          if (k.has_unary(op)) k.unary_adjoint(op, x, z, go, ga, mt);
          else
            for (size_t i = 0; i < mt; ++i)
              if (go[i] != 0) ga[i] += go[i] * der1(op, x[i], z[i]);
          continue;
        }
        const View va = input_view(pt, 0, e0), vb = input_view(pt, 1, e0);
        double* gv[2] = {nullptr, nullptr};
        for (int i = 0; i < 2; ++i)
          if (pt.src[i] == SRC_POINT) gv[i] = adjs + tv * pt.point[i];
        if ((gv[0] || gv[1]) && !tk.binary_adjoint(t.op, va, vb, gv[0], gv[1], go, z, m, pt.lo))
          k.binary_adjoint(t.op, va, vb, gv[0], gv[1], go, z, m, pt.lo);
        for (int i = 0; i < 2; ++i) {
          if (pt.chain[i] < 0) continue;
          double* acc = chains + static_cast<size_t>(kChains) * Lr * pt.chain[i];
          if (tk.bcast(t.op, i, acc, va, vb, go, z, m, pt.lo)) { continue; }
          // other ops: the broadcast operand expanded over the tile: the kernel's elementwise adjoint gives
          // each element's contribution, which the chains then sum
          const View mine = i == 0 ? va : vb;
          for (uint32_t e = 0; e < m; ++e)
            for (uint32_t q2 = 0; q2 < pt.lo; ++q2)
              xbuf[static_cast<size_t>(e) * pt.lo + q2] = mine.p[mine.ls ? q2 : 0];
          std::memset(cbuf, 0, sizeof(double) * mt);
          const View vx{xbuf, pt.lo, mine.ls};
          if (i == 0) k.binary_adjoint(t.op, vx, vb, cbuf, nullptr, go, z, m, pt.lo);
          else k.binary_adjoint(t.op, va, vx, nullptr, cbuf, go, z, m, pt.lo);
          add_to_chains(acc, cbuf, m, pt.lo);
        }
      }
      if (has_deadline_) poll_clock(nullptr);
    }
    // the loss per lane, then the adjoints of the single elements in the whole-vector backward's
    // order: the loss's own term (sigma), then the tape in reverse
    for (uint32_t q = 0; q < Lr; ++q) {
      const double sse = combine(lchain, q, Lr);
      const int lane = lanes[q];
      if (nll) {
        const double s = sigma[q];
        res.losses[lane] = 0.5 * sse / (s * s * n) + std::log(s) + 0.5 * std::log(2 * M_PI);
        adjoint(params[loss.sigma_param])[q] += -sse / (s * s * s * n) + 1.0 / s;
      } else {
        res.losses[lane] = sse / n;
      }
    }
    for (size_t rr = tape.size(); rr-- > 0;) {
      const int32_t q = tp.point_of[rr];
      if (q < 0) {
        const TapeRec& t = tape[rr];
        if (L == 1 && tape_op_has<tapeflag::ONELANE>(t.op)) backward_one_lane(*this, t);
        else backward_record(*this, t);
        continue;
      }
      const TilePlan::Point& pt = tp.points[q];
      for (int i = 0; i < 2; ++i) {
        if (pt.chain[i] < 0) continue;
        const double* acc = chains + static_cast<size_t>(kChains) * Lr * pt.chain[i];
        double* g = adjoint(record_inputs(tape[pt.rec])[i]);
        for (uint32_t q2 = 0; q2 < pt.lo; ++q2) g[q2] += combine(acc, q2, pt.lo);
      }
    }
    check_budgets(nullptr);
  } catch (...) { return false; }
  for (int j = 0; j < P; ++j) {
    const double* g = adjoint(params[j]);
    for (uint32_t q = 0; q < Lr; ++q) res.grads[static_cast<size_t>(lanes[q]) * P + j] = g[q];
  }
  if (want_values)  // into the batch's values, sized [B, n] by the caller
    for (uint32_t q = 0; q < Lr; ++q)
      for (uint32_t e = 0; e < n; ++e)
        res.values[static_cast<size_t>(lanes[q]) * n + e] = out[static_cast<size_t>(e) * Lr + q];
  r.valid = true;
  --r.fell_back;
  ++r.replayed;
  ++tp.tiled_runs;
  return true;
}

}  // namespace ndvm
