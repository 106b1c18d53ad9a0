// The virtual machine: arenas, the tape, and the evaluator. One VM per thread; a Program is
// immutable and shared. Every run starts with reset(): the arenas are rewound, not freed.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ast.h"
#include "error.h"
#include "linalg_small.h"
#include "prims.h"
#include "program.h"
#include "value.h"

namespace ndvm {

struct TilePlan;  // tiled.cc: how a kept tape of point-wise work runs tile by tile
struct TilePlanDeleter {
  void operator()(TilePlan* p) const;
};

// What the tape keeps of a number: its payload offset, its element count and its flags (uniform,
// active). Shapes live in the record's dimensions where an op needs them. The accessors mirror
// Value's, so kernels read either alike.
struct NumRef {
  struct {
    uint32_t off;
  } n;
  uint32_t ne;
  uint8_t flags;
  bool uniform() const { return flags & NF_UNIFORM; }
  bool active() const { return flags & NF_ACTIVE; }
  uint32_t numel() const { return ne; }
};

// One record of a one-lane tape decoded once, when the tape is kept for replay (replay.cc): its
// forward and backward kernels chosen for its op and shape and its operands' offsets resolved, so
// that replay and backward make one call per record instead of deciding op, shape, strides and
// activity again on every evaluation (that dispatch was most of a one-lane Kalman replay). A record
// without decoded kernels (null) goes the general way (forward_record, backward_one_lane/_record).
struct PlanStep {
  using Fwd = void (*)(double* pay, const PlanStep&);
  using Bwd = void (*)(const double* pay, double* adj, const PlanStep&);
  Fwd fwd = nullptr;
  Bwd bwd = nullptr;
  uint32_t out = 0, a = 0, b = 0;  // arena offsets (payload and adjoint alike) of the output and inputs
  uint32_t n = 0;                  // elements of the output
  bool a_active = false, b_active = false;
  kern::GemmFwd gemm_fwd = nullptr;  // a small product's kernels (one-lane copies)
  kern::GemmBwd gemm_bwd = nullptr;
};
// The decoded kernels of a one-lane record (backward.cc), or nulls for one without them.
PlanStep::Bwd plan_backward(int op, uint32_t n, uint32_t sa, uint32_t sb);

// One tape record: op, output, inputs, dimensions. Up to two inputs are kept in the record; an
// O_CONCAT of more keeps them in VM::targs. Written field by field from registers (see record1).
struct TapeRec {
  uint8_t op;
  uint8_t nin;
  uint32_t args;        // first input in VM::targs when nin > 2
  uint32_t d0, d1, d2;  // op-specific dimensions
  NumRef out;
  NumRef in[2];
};

// Bump allocator for frames, pairs and closures. Chunks are kept across resets.
class Heap {
 public:
  ~Heap() {
    for (auto& c : chunks_) std::free(c.p);
  }
  void reset() {
    // keep the first chunks for the next run; give back what a large run took beyond 64 MiB
    size_t kept = 0, i = 0;
    for (; i < chunks_.size() && kept < (64u << 20); ++i) kept += chunks_[i].size;
    for (size_t j = i; j < chunks_.size(); ++j) std::free(chunks_[j].p);
    chunks_.resize(i);
    cur_ = 0;
    used_ = 0;
    if (!chunks_.empty()) chunks_[0].top = 0;
  }
  // called before each new chunk is touched: lets the VM enforce its memory budget
  void (*on_chunk)(void*) = nullptr;
  void* owner = nullptr;
  size_t used() const { return used_; }
  void* alloc(size_t bytes) {
    bytes = (bytes + 15) & ~size_t(15);
    used_ += bytes;
    while (cur_ < chunks_.size()) {
      Chunk& c = chunks_[cur_];
      if (c.top + bytes <= c.size) {
        void* p = c.p + c.top;
        c.top += bytes;
        return p;
      }
      if (++cur_ < chunks_.size()) {
        chunks_[cur_].top = 0;
        if (on_chunk) on_chunk(owner);
      }
    }
    if (on_chunk) on_chunk(owner);
    size_t size = bytes > (1u << 20) ? bytes : (1u << 20);
    char* p = static_cast<char*>(std::malloc(size));
    if (!p) throw std::bad_alloc();
    chunks_.push_back(Chunk{p, size, bytes});
    cur_ = chunks_.size() - 1;
    return p;
  }

 private:
  struct Chunk {
    char* p;
    size_t size, top;
  };
  std::vector<Chunk> chunks_;
  size_t cur_ = 0, used_ = 0;
};

class VM {
 public:
  VM();
  ~VM();
  VM(const VM&) = delete;
  VM& operator=(const VM&) = delete;

  // ---- the driver (program.cc, optim.cc, the binding) ----------------------------------------
  // Per lane group: reset, load, run, check_work, then the result, its adjoints and the
  // parameters' through the accessors below; begin_evaluation once per evaluation.
  void reset(const Program& p, int lanes, bool recording, const Limits& lim);
  // Loads the parameters of `lanes` (rows of theta; lane-varying, active when `grad`) and the
  // inputs (per lane, through lane_map when set, or shared) into the arena after reset(). Returns
  // where the parameters end; the inputs follow them up to inputs_end().
  size_t load(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in, bool grad,
              const std::vector<int>* input_grad_ids, const std::vector<int>* lane_map);
  size_t inputs_end() const { return pay_top; }  // right after load(): the arena's top
  Value run();                                   // evaluates the program's top level (on the VM's own large stack)
  void backward();                               // replays the tape; call after seeding adjoints with adjoint()
  // After run(): the allocations since the last checkpoint, before the run's tape is kept or its
  // work reported.
  void check_work() {
    if (over_work()) work_error(nullptr);
  }
  // Starts the budgets of one evaluation (Limits.max_work, max_seconds), once per run_batch /
  // run_one: the lane groups of a divergent batch, a replay and the walk it falls back to all share
  // one budget.
  void begin_evaluation(const Limits& l);
  // Work (element operations, Limits::max_work) is `work` plus the values allocated in the arena by
  // the current lane group (pay_top): every numeric result's elements count through its
  // allocation, without a counter on that hot path; reset() folds a finished group's pay_top into
  // `work`, and a replay, whose arena is the recorded walk's, counts as that walk did. `work` holds
  // what allocation does not show: products, linear algebra, reductions, list traversals.
  uint64_t work_used() const { return work > UINT64_MAX - pay_top ? UINT64_MAX : work + pay_top; }
  void zero_adjoint(const Value& v) {
    size_t n = static_cast<size_t>(v.numel()) * lanes_of(v);
    double* g = adj + v.n.off;
    switch (n) {  // the common small sizes with constant-size stores (a loop here becomes rep stos)
      case 1: std::memset(g, 0, 8); break;
      case 2: std::memset(g, 0, 16); break;
      case 4: std::memset(g, 0, 32); break;
      default: std::memset(g, 0, sizeof(double) * n);
    }
  }

  // The current run, read-only.
  const Program& program() const { return *prog; }
  int lane_count() const { return L; }  // lanes of the current group
  const Limits& limits() const { return *lim; }
  const Value& param(size_t j) const { return params[j]; }
  const Value& input(size_t i) const { return inputs[i]; }
  size_t tape_size() const { return tape.size(); }
  uint64_t steps_taken() const { return steps; }  // evaluation steps of the current run

  // Replay (replay.cc).
  // Keeps the run just walked (all lanes, no divergence, recording) for replay: its tape, arena
  // offsets, inputs and limits. params_end is load()'s result, inputs_end inputs_end()'s.
  void save_replay(size_t params_end, size_t inputs_end, const Value& result);
  // Re-executes the kept tape with new parameters when the program p, lanes, inputs and limits are
  // the recorded ones and every guard still holds; false (the state as after a failed attempt,
  // ready for reset) when the caller must walk the program instead. The result is replay_result().
  bool try_replay(const Program& p, const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                  const std::vector<int>* lane_map, const Limits& lim);
  const Value& replay_result() const { return replay.result; }
  // Tiled replay (tiled.cc): when the kept tape is point-wise (elementwise over the data's points,
  // plus scalar parameter code) and the loss is mse or a likelihood with a sigma parameter,
  // re-executes it tile by tile over the points, forward, loss and backward together, and fills
  // res (losses, grads; values, sized by the caller, when want_values) for `lanes`, with the bits
  // of try_replay followed by the driver's loss and backward. False (the state as after a failed
  // attempt) otherwise.
  bool try_replay_tiled(const Program& p, const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                        const std::vector<int>* lane_map, const Limits& lim, const LossSpec& loss, BatchResult& res,
                        bool want_values);
  // The points of the kept tape when a try_replay_tiled of p over `lanes` lanes could run (its
  // values are [lanes][points]; the caller sizes them), else 0.
  uint32_t tiled_points(const Program& p, int lanes, const Limits& lim) const;
  uint64_t tiled_replays_done() const;                             // statistics of this VM: replays run tile by tile
  uint64_t replays_done() const { return replay.replayed; }        // statistics of this VM
  uint64_t replays_abandoned() const { return replay.fell_back; }  // a guard failed, other inputs, an error

  // ---- for the primitives (prims.cc): the operations they compute with ---------------------
  Value apply(Value f, const Value* args, int nargs, const Node* site);  // non-tail call
  // numeric operations (kernels.cc, linalg.cc): compute, and record a tape op when recording
  Value binary(Op op, Value a, Value b, const Node* site);
  Value unary(Op op, Value a, const Node* site);
  Value rounding(int prim, Value a, const Node* site);          // floor ceiling round truncate: no gradient
  Value int_div(int prim, Value a, Value b, const Node* site);  // quotient remainder modulo
  Value compare(int prim, const Value* args, int n, const Node* site);
  Value num_pred(int prim, Value a, const Node* site);
  Value slice(const Value& a, uint32_t start, int rank, uint32_t rows, uint32_t cols);
  Value concat(const Value* parts, int n, int rank, uint32_t rows, uint32_t cols);
  Value gemm(const Value& a, const Value& b, uint32_t m, uint32_t k, uint32_t n, int out_rank, uint32_t out_rows,
             uint32_t out_cols);
  Value transpose(const Value& a);
  Value reduce(Op op, const Value& a);  // trace vsum norm det logdet
  Value inv(const Value& a, const Node* site);
  Value solve(const Value& a, const Value& b, const Node* site);
  Value cholesky(const Value& a, const Node* site);
  uint8_t* lane_mask_buf(size_t n) {
    if (mask_.size() < n) mask_.resize(n);
    return mask_.data();
  }
  // Turns a per-lane truth mask into a boolean, or signals divergence when the lanes disagree.
  Value lanes_to_bool(const uint8_t* m);
  // eqv? on two values: per-lane mask accumulation (AND) into m
  void eqv_into(Value a, Value b, uint8_t* m, bool deep, const Node* site);
  // A number of the given shape in the arena. Its size is computed in 64 bits (rows * cols * lanes
  // can exceed 32, and wrapped it would allocate a small buffer that the kernel then overruns);
  // grow_for refuses what exceeds the memory budget or the arena's 32-bit offsets, so every
  // number's numel() * lanes fits in 32 bits. `site` names the operation in that error (the
  // primitive being called when null). The elements count as work through pay_top (work_used).
  Value alloc_num(int rank, uint32_t rows, uint32_t cols, bool uniform, const Node* site = nullptr) {
    Value v;
    v.tag = T_NUM;
    v.rank = static_cast<uint8_t>(rank);
    v.rows = rank == 0 ? 1 : rows;
    v.n.cols = rank == 2 ? cols : 1;
    v.flags = uniform ? NF_UNIFORM : 0;
    uint64_t n = static_cast<uint64_t>(v.rows) * v.n.cols;  // < 2^64: two 32-bit factors
    if (!uniform && __builtin_mul_overflow(n, static_cast<uint64_t>(L), &n)) n = UINT64_MAX;
    if (n > pay_cap - pay_top) grow_for(n, site);  // pay_top <= pay_cap: no wrap-around
    v.n.off = static_cast<uint32_t>(pay_top);
    pay_top += n;
    return v;
  }
  Value promote(Value v) { return v.tag == T_INT ? make_real(static_cast<double>(v.i)) : v; }
  Value cons(Value a, Value b);
  uint64_t bytes_in_use() const;  // what the memory budget counts: payload, heap, tape, guard masks
  // Adds `w` (an operation's cost, computed before it runs) and raises LimitError past the budget.
  void charge(uint64_t w, const Node* site = nullptr) {
    if (__builtin_add_overflow(work, w, &work)) work = UINT64_MAX;  // a cost that overflowed is over any budget
    if (over_work()) work_error(site);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void memory_error(const Node* site, uint64_t more_bytes);
  std::string describe(const Value& v);
  [[noreturn, gnu::cold, gnu::noinline]] void type_error(const Node* site, const char* what, const Value& got);

  // ---- for the kernels, replay and backward (kernels.h, linalg.h, replay.cc, backward.cc) -----
  double* data(const Value& v) { return pay + v.n.off; }
  double* data(const NumRef& v) { return pay + v.n.off; }
  uint32_t lanes_of(const Value& v) const { return v.uniform() ? 1u : static_cast<uint32_t>(L); }
  uint32_t lanes_of(const NumRef& v) const { return v.uniform() ? 1u : static_cast<uint32_t>(L); }
  // The adjoint of a number (a Value or a tape record's NumRef): the same offset in the adjoint
  // arena as its payload in the payload arena (valid for active values, and once backward is set up).
  template <class V>
  double* adjoint(const V& v) {
    return adj + v.n.off;
  }
  // A record's inputs: kept in the record, or in targs when it has more than two.
  const NumRef* record_inputs(const TapeRec& t) const { return t.nin > 2 ? targs.data() + t.args : t.in; }
  // The lanes' outcomes a guard record (O_GUARD) recorded, one byte per lane.
  const uint8_t* guard_outcomes(const TapeRec& t) const { return guard_masks.data() + t.d1; }
  // Linear-algebra scratch of `doubles` values (and `ints` pivots), charged to the memory budget
  // on top of what the run holds; raises LimitError (naming `site`) past it. A small request that
  // the kept buffers already hold is not checked (it is below any budget that leaves room to run).
  double* scratch_for(uint64_t doubles, uint64_t ints = 0, const Node* site = nullptr) {
    if (doubles <= 4096 && doubles <= scratch.size() && ints <= pivots_.size()) return scratch.data();
    return scratch_grow(doubles, ints, site);
  }
  int* pivots() { return pivots_.data(); }  // the `ints` of the last scratch_for
  // Raises LimitError past Limits.max_seconds (long kernels poll it).
  void poll_clock(const Node* site) {
    if (has_deadline_ && std::chrono::steady_clock::now() > deadline_) clock_error(site);
  }

  // Everything below is the VM's own: its evaluator, tape recording, budget checks and state,
  // reached only by its members (vm.cc, limits.cc, call_prim in prims.cc, kernels.cc, linalg.cc,
  // replay.cc); the driver, the primitives and the kernels' free functions use the interface above.
 private:
  void grow_for(uint64_t n, const Node* site);  // grows the payload arena or raises LimitError
  Value make_real(double x);                    // an inexact uniform scalar

  // Appends a record for an operation of one or two inputs and marks `out` active. Inline, and
  // the record is written field by field in place: built as a temporary and copied, or with the
  // 16-byte Values copied whole, the record was written by narrow stores and read back by wide
  // loads, which defeats store forwarding; those stalls were a quarter of the time of a one-lane
  // Kalman value-and-gradient.
  static NumRef ref(const Value& v) { return NumRef{{v.n.off}, v.numel(), v.flags}; }
  TapeRec& new_record(Op op, Value& out, int nin, uint32_t d0, uint32_t d1, uint32_t d2) {
    out.flags |= NF_ACTIVE;
    zero_adjoint(out);
    if (tape.size() == tape.capacity()) check_memory(nullptr);
    tape.emplace_back();
    TapeRec& t = tape.back();
    t.op = op;
    t.nin = static_cast<uint8_t>(nin);
    t.d0 = d0;
    t.d1 = d1;
    t.d2 = d2;
    t.out.n.off = out.n.off;
    t.out.ne = out.numel();
    t.out.flags = out.flags;
    return t;
  }
  void record1(Op op, Value& out, const Value& a, uint32_t d0 = 0, uint32_t d1 = 0, uint32_t d2 = 0) {
    TapeRec& t = new_record(op, out, 1, d0, d1, d2);
    t.in[0].n.off = a.n.off;
    t.in[0].ne = a.numel();
    t.in[0].flags = a.flags;
  }
  void record2(Op op, Value& out, const Value& a, const Value& b, uint32_t d0 = 0, uint32_t d1 = 0, uint32_t d2 = 0) {
    TapeRec& t = new_record(op, out, 2, d0, d1, d2);
    t.in[0].n.off = a.n.off;
    t.in[0].ne = a.numel();
    t.in[0].flags = a.flags;
    t.in[1].n.off = b.n.off;
    t.in[1].ne = b.numel();
    t.in[1].flags = b.flags;
  }
  void record_n(Op op, Value& out, const Value* in, int n, uint32_t d0 = 0, uint32_t d1 = 0, uint32_t d2 = 0);
  // Records a value-dependent decision: the primitive, its numeric arguments, the lanes' outcomes.
  void record_guard(int prim, const Value* in, int n, const uint8_t* outcome, uint32_t flag = 0);

  Value eval(const Node* n, Frame* env);
  Value operand(const Node* n, Frame* env);
  size_t push_operands(const Node* n, size_t k, Frame* env);
  void spread_apply(Value& f, std::vector<Value>& args, const Node* site);
  [[noreturn]] void depth_error(const Node* site);
  Value call_prim(int id, Value* args, int nargs, const Node* site);

  [[gnu::noinline]] Value binary_general(Op op, Value a, Value b, const Node* site);
  Value compare_num(int prim, const Value* args, int n, const Node* site);
  // eqv? of two numbers inside a structure comparison (whose own mask is lane_mask_buf)
  uint8_t* leaf_mask_buf(size_t n) {
    if (leaf_mask_.size() < n) leaf_mask_.resize(n);
    return leaf_mask_.data();
  }

  Frame* new_frame(uint32_t size, Frame* parent);
  Frame* bind_args(const Lambda* lam, Frame* env, const Value* args, int nargs, const Node* site);  // a closure's frame
  void check_memory(const Node* site);

  bool over_work() const { return work > lim->max_work || pay_top > lim->max_work - work; }
  // The cost of one primitive call (a product, linear algebra, a reduction): a small one is only
  // added, and checked at the next checkpoint (at most kCheckEvery steps away, so at most
  // kCheckEvery * kDeferWork = 1.7e7 past the budget), which keeps the check off the small
  // products of state-space models; a large one is checked before it runs.
  static constexpr uint64_t kDeferWork = 4096;
  void charge_op(uint64_t w, const Node* site = nullptr) {
    if (w < kDeferWork) work += w;
    else charge(w, site);
  }
  // Checks the work budget and the wall clock (when Limits.max_seconds is set): every
  // kCheckEvery steps, every few replayed or backward records, and inside long kernels.
  void check_budgets(const Node* site) {
    if (over_work()) work_error(site);
    if (has_deadline_) poll_clock(site);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void work_error(const Node* site);
  [[noreturn, gnu::cold, gnu::noinline]] void clock_error(const Node* site);
  [[gnu::noinline]] void step_checkpoint(const Node* site);  // eval's slow path, every kCheckEvery steps
  static constexpr uint64_t kCheckEvery = 4096;
  double* scratch_grow(uint64_t doubles, uint64_t ints, const Node* site);

  // state
  const Program* prog = nullptr;
  int L = 1;  // lanes of the current group
  const Limits* lim = nullptr;
  std::vector<Value> params, inputs;
  double* pay = nullptr;  // the payload arena (reached through data())
  size_t pay_top = 0;
  std::vector<TapeRec> tape;
  uint64_t work = 0;       // what allocation does not show of the work (see work_used)
  uint64_t steps = 0;      // evaluation steps of the current run
  bool recording = false;  // build the tape
  double* adj = nullptr;   // adjoints, same offsets as pay (reached through adjoint())
  size_t pay_cap = 0, adj_cap = 0;
  std::vector<NumRef> targs;         // inputs of records with more than two (record_inputs())
  std::vector<uint8_t> guard_masks;  // the outcomes of guard records (guard_outcomes())
  Heap heap;
  uint64_t step_check = 0;        // eval calls step_checkpoint when steps passes this
  const Node* op_site = nullptr;  // the primitive being called (names it in a memory error)
  Value* stack = nullptr;         // argument stack (fixed capacity: pointers into it stay valid)
  size_t sp = 0, stack_cap = 0;
  int depth = 0;
  const char* stack_base = nullptr;  // C stack address at the start of run(): bounds recursion in bytes
  size_t stack_budget = 0;
  std::vector<double> scratch;  // per-lane small dense linear algebra
  std::vector<int> pivots_;
  std::vector<uint8_t> mask_, leaf_mask_;
  bool has_deadline_ = false;
  std::chrono::steady_clock::time_point start_, deadline_;
  // The last recorded run, kept so that the next evaluation of the same program over the same
  // lanes and inputs can re-execute its tape instead of walking the program again (replay.cc).
  // Any reset() drops it: the arena and the tape it describes are overwritten.
  struct Replay {
    bool valid = false;
    const Program* prog = nullptr;
    uint64_t serial = 0;
    int lanes = 0;
    size_t params_end = 0, inputs_end = 0, top = 0;  // arena offsets of the recorded run
    std::vector<double> inputs;                      // the arena's input region when recorded
    Value result;
    Limits limits;
    uint64_t extra_work = 0;     // what the tape's products and linear algebra cost beyond their outputs
    bool zero_span = false;      // zero the adjoints of [inputs_end, top) at once, not record by record
    std::vector<PlanStep> plan;  // one lane, float64: the tape decoded, a step per record; else empty
    // Several lanes: per record, 0, or kFoldedProduct / kScaledAdd for a pair (* s U) (+ X that) run
    // as one (find_scaled_adds); else empty
    std::vector<uint8_t> fused;
    uint64_t replayed = 0, fell_back = 0;  // statistics: runs replayed, replays abandoned
  } replay;

  void build_plan();        // replay.plan for the tape just kept
  void find_scaled_adds();  // replay.fused for the tape just kept
  static constexpr uint8_t kFoldedProduct = 1, kScaledAdd = 2;
  void scaled_add_backward(size_t r);                              // the pair ending at record r (backward.cc)
  [[gnu::noinline]] bool replay_record(size_t i, bool zero_each);  // record i; false: a guard fails
  bool replay_tape(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                   const std::vector<int>* lane_map, const Limits& lim);
  // whether the kept run can be replayed for program p over `lanes` lanes under limits l
  bool replay_matches(const Program& p, int lanes, const Limits& l) const;
  void plan_tiles(const Value& result);  // at save_replay: whether and how the tape runs tile by tile
  bool replay_tiles(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                    const std::vector<int>* lane_map, const Limits& lim, const LossSpec& loss, BatchResult& res,
                    bool want_values);
  std::unique_ptr<TilePlan, TilePlanDeleter> tiles_;  // with its workspace, reused across evaluations
  std::vector<const double*> tile_targets_;           // the lanes' targets of a tiled replay
  std::vector<double> tile_scales_;                   // and their likelihood's scale
  void grow_payload(size_t need);
  Value run_here();
  // makecontext's entry point (vm.cc): run_here on the VM's own stack, for run()
  static void run_trampoline(unsigned hi, unsigned lo);
  // Evaluation runs on a stack of its own (reserved, committed only where touched), so deep
  // non-tail recursion is bounded by Limits, not by the calling thread's stack.
  char* eval_stack_ = nullptr;
  size_t eval_stack_size_ = 0;
  size_t stack_peak_ = 0;  // deepest C stack use of the current run, in bytes
};

// C stack bytes a run may use on the current thread (pool threads have large stacks).
size_t thread_stack_budget();
void set_thread_stack_budget(size_t bytes);

// Kernels for backward (kernels.cc)
void backward_record(VM& vm, const TapeRec& t);
void backward_one_lane(VM& vm, const TapeRec& t);  // L == 1 and op + - * or O_GEMM
// Replay (kernels.cc): recomputes a record's output from its inputs, with the same kernels as the
// evaluator (the same bits); for an O_GUARD, whether the lanes' outcomes are still the recorded ones.
void forward_record(VM& vm, const TapeRec& t);
// The work a record costs beyond its output's elements (products, linear algebra, reductions), as
// the evaluator charged it; replay charges it again.
uint64_t record_extra_work(const VM& vm, const TapeRec& t);

// a * b * c * d, saturating at UINT64_MAX (a cost that overflows is over any budget)
inline uint64_t cost_of(uint64_t a, uint64_t b, uint64_t c = 1, uint64_t d = 1) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r) || __builtin_mul_overflow(r, d, &r))
    return UINT64_MAX;
  return r;
}
bool guard_holds(VM& vm, const TapeRec& t);

}  // namespace ndvm
