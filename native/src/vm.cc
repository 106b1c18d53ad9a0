// The evaluator: one dispatch loop over resolved nodes (eval), where every tail position is a
// `continue` of the loop rather than a C++ call, so tail calls, loops and recursion in tail
// position run in constant C++ stack. Primitives are one switch (call_prim).
#include "vm.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>

#if defined(__SANITIZE_ADDRESS__)  // GCC
#define NDVM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
#define NDVM_ASAN 1
#endif
#endif
#ifdef NDVM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include <vector>
#include "prims.h"

namespace ndvm {

namespace {
constexpr size_t kStackCapacity = 1 << 18;  // argument stack slots per VM (4 MiB)
}

VM::VM() {
  heap.owner = this;
  heap.on_chunk = [](void* vm) { static_cast<VM*>(vm)->check_memory(nullptr); };
  stack_cap = kStackCapacity;
  stack = static_cast<Value*>(std::malloc(stack_cap * sizeof(Value)));
  if (!stack) throw std::bad_alloc();
}

VM::~VM() {
  if (eval_stack_) munmap(eval_stack_, eval_stack_size_);
  std::free(stack);
  std::free(pay);
  std::free(adj);
}

void VM::reset(const Program& p, int lanes, bool rec, const Limits& l) {
  prog = &p;
  L = lanes;
  recording = rec;
  lim = &l;
  work += pay_top;  // the allocations of the lane group before this one (0 after begin_evaluation)
  heap.reset();
  tape.clear();
  targs.clear();
  guard_masks.clear();
  replay.valid = false;  // the arena and the tape are about to be overwritten
  // A run that needed a huge arena should not pin that memory for the life of the thread.
  constexpr size_t kKeepBytes = 64u << 20;
  if (pay_cap * sizeof(double) > kKeepBytes) {
    std::free(pay);
    std::free(adj);
    pay = adj = nullptr;
    pay_cap = adj_cap = 0;
  }
  if (tape.capacity() * sizeof(TapeRec) > kKeepBytes) std::vector<TapeRec>().swap(tape);
  if (targs.capacity() * sizeof(NumRef) > kKeepBytes) std::vector<NumRef>().swap(targs);
  if (scratch.capacity() * sizeof(double) > kKeepBytes) std::vector<double>().swap(scratch);
  sp = 0;
  steps = 0;
  step_check = std::min<uint64_t>(kCheckEvery, l.max_steps);
  op_site = nullptr;
  depth = 0;
  pay_top = 0;
  size_t nconst = p.const_payload.size();
  grow_payload(nconst + 1024);
  if (nconst) std::memcpy(pay, p.const_payload.data(), nconst * sizeof(double));
  pay_top = nconst;
  params.assign(p.params.size(), Value());
  inputs.assign(p.inputs.size(), Value());
}

// Parameters first (lane-varying: one value per lane of the group), then the inputs; a replay
// relies on the same order and offsets (replay.cc).
size_t VM::load(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in, bool grad,
                const std::vector<int>* input_grad_ids, const std::vector<int>* lane_map) {
  const Program& p = *prog;
  auto data_lane = [&](int l) { return lane_map ? (*lane_map)[lanes[l]] : lanes[l]; };
  const int n_lanes = static_cast<int>(lanes.size());
  for (int j = 0; j < P; ++j) {
    Value v = alloc_num(0, 1, 1, false);
    double* d = data(v);
    for (int l = 0; l < n_lanes; ++l) d[l] = theta[static_cast<size_t>(lanes[l]) * P + j];
    if (p.f32)
      for (int l = 0; l < n_lanes; ++l) d[l] = static_cast<float>(d[l]);
    if (grad) {
      v.flags |= NF_ACTIVE;
      zero_adjoint(v);
    }
    params[j] = v;
  }
  const size_t params_end = pay_top;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    Value v;
    if (i < in.per_lane.size() && !in.per_lane[i].empty()) {
      const Array& first = in.per_lane[i][data_lane(0)];
      v = alloc_num(first.rank, first.rows, first.cols, false);
      double* d = data(v);
      uint32_t ne = v.numel();
      for (int l = 0; l < n_lanes; ++l) {
        const Array& a = in.per_lane[i][data_lane(l)];
        if (a.numel() != ne || a.rank != first.rank)
          eval_error("lane input '" + p.inputs[i] + "' has lanes of different shapes");
        for (uint32_t e = 0; e < ne; ++e) d[static_cast<size_t>(e) * n_lanes + l] = a.data[e];
      }
    } else {
      const Array& a = in.shared[i];
      v = alloc_num(a.rank, a.rows, a.cols, true);
      std::memcpy(data(v), a.data.data(), sizeof(double) * a.numel());  // inputs are data: inexact
    }
    if (p.f32) {
      double* d = data(v);
      for (size_t e = 0; e < static_cast<size_t>(v.numel()) * lanes_of(v); ++e) d[e] = static_cast<float>(d[e]);
    }
    if (grad && input_grad_ids)
      for (int id : *input_grad_ids)
        if (id == static_cast<int>(i)) {
          v.flags |= NF_ACTIVE;
          zero_adjoint(v);
        }
    inputs[i] = v;
  }
  return params_end;
}

// The adjoint buffer mirrors the payload arena (same offsets), so it grows with it.
void VM::grow_payload(size_t need) {
  if (need <= pay_cap) return;
  size_t cap = pay_cap ? pay_cap : 4096;
  while (cap < need) cap *= 2;
  double* p = static_cast<double*>(std::realloc(pay, cap * sizeof(double)));
  if (!p) throw std::bad_alloc();
  pay = p;
  double* a = static_cast<double*>(std::realloc(adj, cap * sizeof(double)));
  if (!a) throw std::bad_alloc();
  adj = a;
  pay_cap = adj_cap = cap;
}

// The accounting of the budgets (memory, work, steps, wall clock) and their errors: limits.cc.

Value VM::make_real(double x) {
  Value v = alloc_num(0, 1, 1, true);
  pay[v.n.off] = x;
  return v;
}

// Adjoints are zeroed where they are needed and when the memory is hot: an active output when its
// tape record is written (record1/2/n), a parameter or differentiated input when it is loaded
// (zero_adjoint). Inactive values never receive an adjoint, so nothing else needs clearing.

void VM::record_n(Op op, Value& out, const Value* in, int n, uint32_t d0, uint32_t d1, uint32_t d2) {
  if (n <= 2) {  // kept in the record
    if (n == 1) record1(op, out, in[0], d0, d1, d2);
    else record2(op, out, in[0], in[1], d0, d1, d2);
    return;
  }
  if (targs.size() + n > targs.capacity()) check_memory(nullptr);
  uint32_t at = static_cast<uint32_t>(targs.size());
  for (int i = 0; i < n; ++i) targs.push_back(ref(in[i]));
  TapeRec& t = new_record(op, out, n > 255 ? 255 : n, d0, d1,
                          n > 255 ? static_cast<uint32_t>(n) : d2);  // many parts: count in d2
  t.args = at;
}

void VM::record_guard(int prim, const Value* in, int n, const uint8_t* outcome, uint32_t flag) {
  if (tape.size() == tape.capacity() || targs.size() + n > targs.capacity()) check_memory(nullptr);
  tape.emplace_back();
  TapeRec& t = tape.back();
  t.op = O_GUARD;
  t.d0 = static_cast<uint32_t>(prim);
  t.d1 = static_cast<uint32_t>(guard_masks.size());
  t.d2 = flag;
  t.out = NumRef{{0}, 0, 0};
  guard_masks.insert(guard_masks.end(), outcome, outcome + L);
  if (n <= 2) {
    t.nin = static_cast<uint8_t>(n);
    for (int i = 0; i < n; ++i) t.in[i] = ref(in[i]);
  } else {  // a chained comparison of more than two numbers
    t.nin = static_cast<uint8_t>(n > 255 ? 255 : n);
    t.args = static_cast<uint32_t>(targs.size());
    if (n > 255) t.d2 = static_cast<uint32_t>(n);
    for (int i = 0; i < n; ++i) targs.push_back(ref(in[i]));
  }
}

// The backward pass is not charged to the work budget (its cost is a small multiple of the
// recorded forward work, which was), but it honours the wall clock.
void VM::backward() {
  constexpr size_t kPoll = 1024;  // records between clock checks
  if (L == 1) {
    // the decoded tape (replay.cc) while it describes this tape: kept for replay, not yet reset
    const PlanStep* plan = replay.valid && replay.plan.size() == tape.size() ? replay.plan.data() : nullptr;
    for (size_t r = tape.size(); r-- > 0;) {
      const TapeRec& t = tape[r];
      if (plan && plan[r].bwd) plan[r].bwd(pay, adj, plan[r]);
      else if (tape_op_has<tapeflag::ONELANE>(t.op)) backward_one_lane(*this, t);
      else backward_record(*this, t);
      if (r % kPoll == 0) poll_clock(nullptr);
    }
    return;
  }
  // pairs run as one (replay.cc, find_scaled_adds) while the pairs found describe this tape
  const uint8_t* fused = replay.valid && replay.fused.size() == tape.size() ? replay.fused.data() : nullptr;
  for (size_t r = tape.size(); r-- > 0;) {
    if (!fused || !fused[r]) backward_record(*this, tape[r]);
    else if (fused[r] == kScaledAdd) scaled_add_backward(r);
    if (r % kPoll == 0) poll_clock(nullptr);
  }
}

Value VM::cons(Value a, Value b) {
  Pair* p = static_cast<Pair*>(heap.alloc(sizeof(Pair)));
  p->car = a;
  p->cdr = b;
  Value v;
  v.tag = T_PAIR;
  v.ptr = p;
  return v;
}

Frame* VM::new_frame(uint32_t size, Frame* parent) {
  size_t bytes = sizeof(Frame) + (size ? size - 1 : 0) * sizeof(Value);
  Frame* f = static_cast<Frame*>(heap.alloc(bytes));
  f->parent = parent;
  f->size = size;
  for (uint32_t i = 0; i < size; ++i) f->slots[i] = Value::make_undef();
  return f;
}

// ---- error helpers ---------------------------------------------------------------------------

std::string VM::describe(const Value& v) {
  switch (v.tag) {
    case T_UNDEF: return "an undefined value";
    case T_UNSPEC: return "an unspecified value";
    case T_NIL: return "the empty list";
    case T_BOOL: return v.i ? "#t" : "#f";
    case T_SYM: return "the symbol " + prog->symbols[v.i];
    case T_INT: return "the integer " + std::to_string(static_cast<long long>(v.i));
    case T_NUM:
      if (v.rank == 0) return "a number";
      if (v.rank == 1) return "a vector of " + std::to_string(v.rows);
      return "a " + std::to_string(v.rows) + "x" + std::to_string(v.n.cols) + " matrix";
    case T_PAIR: return "a pair";
    case T_CLOSURE: return "a procedure";
    case T_PRIM: return std::string("the primitive ") + kPrims[v.i].name;
  }
  return "a value";
}

void VM::type_error(const Node* site, const char* what, const Value& got) {
  eval_error(std::string(site && !site->name.empty() ? "'" + site->name + "': " : "") + "expected " + what + ", got " +
                 describe(got),
             site ? site->line : 0, site ? site->col : 0);
}

// ---- the evaluator ---------------------------------------------------------------------------

namespace {
thread_local size_t t_stack_budget = 6u << 20;  // the default 8 MiB thread stack, with margin
constexpr size_t kEvalStack = 1ull << 30;       // reserved address space, not memory

struct RunCtx {
  VM* vm;
  Value result;
  std::exception_ptr error;
  ucontext_t caller, callee;
#ifdef NDVM_ASAN
  void* fake_stack = nullptr;
  const void* caller_bottom = nullptr;
  size_t caller_size = 0;
#endif
};

}  // namespace

void VM::run_trampoline(unsigned hi, unsigned lo) {
  RunCtx* c = reinterpret_cast<RunCtx*>((static_cast<uintptr_t>(hi) << 32) | lo);
#ifdef NDVM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &c->caller_bottom, &c->caller_size);
#endif
  try {
    c->result = c->vm->run_here();
  } catch (...) {
    c->error = std::current_exception();  // exceptions must not unwind across the stack switch
  }
#ifdef NDVM_ASAN
  __sanitizer_start_switch_fiber(nullptr, c->caller_bottom, c->caller_size);
#endif
}

size_t thread_stack_budget() { return t_stack_budget; }
void set_thread_stack_budget(size_t bytes) { t_stack_budget = bytes; }

Value VM::run_here() {
  char here;
  stack_base = &here;
  return eval(prog->top->body, new_frame(prog->top->frame_size, nullptr));
}

Value VM::run() {
  if (!eval_stack_) {
    void* p = mmap(nullptr, kEvalStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {  // no address space for a private stack: evaluate on the caller's stack
      stack_budget = t_stack_budget;
      return run_here();
    }
    eval_stack_ = static_cast<char*>(p);
    eval_stack_size_ = kEvalStack;
  }
  stack_budget = eval_stack_size_ - (16u << 20);
#ifdef NDVM_ASAN
  // ASan gives up unpoisoning more than 64 MiB of stack when an exception unwinds it
  stack_budget = std::min<size_t>(stack_budget, 48u << 20);
#endif
  RunCtx c;
  c.vm = this;
  getcontext(&c.callee);
  c.callee.uc_stack.ss_sp = eval_stack_;
  c.callee.uc_stack.ss_size = eval_stack_size_;
  c.callee.uc_link = &c.caller;
  uintptr_t addr = reinterpret_cast<uintptr_t>(&c);
  makecontext(&c.callee, reinterpret_cast<void (*)()>(run_trampoline), 2, static_cast<unsigned>(addr >> 32),
              static_cast<unsigned>(addr & 0xffffffffu));
#ifdef NDVM_ASAN
  __sanitizer_start_switch_fiber(&c.fake_stack, eval_stack_, eval_stack_size_);
#endif
  stack_peak_ = 0;
  swapcontext(&c.caller, &c.callee);
#ifdef NDVM_ASAN
  __sanitizer_finish_switch_fiber(c.fake_stack, nullptr, nullptr);
#endif
  // A deep recursion leaves its stack pages resident: give them back, keeping the top few MiB.
  constexpr size_t kKeep = 4u << 20;
  if (stack_peak_ > 2 * kKeep) madvise(eval_stack_, eval_stack_size_ - kKeep, MADV_DONTNEED);
  if (c.error) std::rethrow_exception(c.error);
  return c.result;
}

namespace {
struct DepthGuard {
  int& d;
  explicit DepthGuard(int& x) : d(x) { ++d; }
  ~DepthGuard() { --d; }
};
}  // namespace

// Binds a closure's arguments into a fresh frame.
Frame* VM::bind_args(const Lambda* lam, Frame* env, const Value* args, int nargs, const Node* site) {
  if (nargs < lam->nreq || (!lam->rest && nargs != lam->nreq)) {
    std::string want = lam->rest ? "at least " + std::to_string(lam->nreq) : std::to_string(lam->nreq);
    eval_error("procedure '" + lam->name + "' (line " + std::to_string(lam->line) + ") expects " + want + " argument" +
                   (lam->nreq == 1 && !lam->rest ? "" : "s") + ", got " + std::to_string(nargs),
               site ? site->line : 0, site ? site->col : 0);
  }
  Frame* fr = new_frame(lam->frame_size, env);
  for (int i = 0; i < lam->nreq; ++i) fr->slots[i] = args[i];
  if (lam->rest) {
    Value rest = Value::make_nil();
    for (int i = nargs; i-- > lam->nreq;) rest = cons(args[i], rest);
    fr->slots[lam->nreq] = rest;
  }
  return fr;
}

// Operands that are leaves (constants, variables, parameters, inputs) are read inline instead of
// through a recursive eval: most operands of numeric code are leaves.
inline Value VM::operand(const Node* k, Frame* env) {
  switch (k->kind) {
    case N_CONST: return k->k;
    case N_PARAM: return params[k->a];
    case N_INPUT: return inputs[k->a];
    case N_ARITH2: {
      Value x = operand(k->kids[0], env);
      Value y = operand(k->kids[1], env);
      return binary(static_cast<Op>(k->a), x, y, k);
    }
    case N_LOCAL: {
      Frame* f = env;
      for (int d = k->a; d > 0; --d) f = f->parent;
      const Value& v = f->slots[k->b];
      if (v.tag == T_UNDEF) eval_error("'" + k->name + "' is used before its definition", k->line, k->col);
      return v;
    }
    case N_PRIMCALL: {
      // a primitive call of a few operands, such as (matmul A B) inside an expression, is called
      // directly with its operands in a local array, without a round trip through eval and the
      // argument stack (nesting is bounded by the reader, so the C stack is too)
      size_t n = k->kids.size();
      if (n <= 3 && k->a != P_APPLY) {
        Value args[3];
        for (size_t i = 0; i < n; ++i) args[i] = operand(k->kids[i], env);
        return call_prim(k->a, args, static_cast<int>(n), k);
      }
      return eval(k, env);
    }
    default: return eval(k, env);
  }
}

// (apply f a ... lst) -> f with arguments a ... and the elements of lst; repeated while f is
// itself apply. On entry `f` is apply and `args` its arguments.
void VM::spread_apply(Value& f, std::vector<Value>& args, const Node* site) {
  while (f.tag == T_PRIM && f.i == P_APPLY) {
    if (args.size() < 2)
      eval_error("wrong number of arguments to 'apply': expected at least 2, got " + std::to_string(args.size()),
                 site->line, site->col);
    std::vector<Value> spread(args.begin() + 1, args.end() - 1);
    Value cur = args.back();
    while (cur.tag == T_PAIR) {
      spread.push_back(static_cast<const Pair*>(cur.ptr)->car);
      cur = static_cast<const Pair*>(cur.ptr)->cdr;
    }
    if (cur.tag != T_NIL) type_error(site, "a proper list as the last argument of apply", args.back());
    f = args[0];
    args.swap(spread);
  }
}

// Evaluates the first k operands of n onto the argument stack; returns where they start.
size_t VM::push_operands(const Node* n, size_t k, Frame* env) {
  size_t base = sp;
  if (sp + k >= stack_cap) limit_error("argument stack exhausted", n->line, n->col);
  for (size_t i = 0; i < k; ++i) {
    Value v = operand(n->kids[i], env);
    stack[sp++] = v;
  }
  return base;
}

Value VM::eval(const Node* n, Frame* env) {
  char probe;
  size_t used = static_cast<size_t>(stack_base - &probe);
  if (used > stack_peak_) {
    stack_peak_ = used;
    if (used > stack_budget)
      limit_error("recursion too deep for the evaluation stack; use a tail call", n->line, n->col);
  }
  // Steps are compared with step_check (at most kCheckEvery ahead); the slow path checks the
  // step budget, the work budget and the clock. A local copy keeps the compare in a register; a
  // nested eval that moved step_check on only makes this one take the slow path once more.
  uint64_t check_at = step_check;
  for (;;) {
    if (++steps > check_at) {
      step_checkpoint(n);
      check_at = step_check;
    }
    switch (n->kind) {
      case N_CONST: return n->k;
      case N_LOCAL: {
        Frame* f = env;
        for (int d = n->a; d > 0; --d) f = f->parent;
        const Value& v = f->slots[n->b];
        if (v.tag == T_UNDEF) eval_error("'" + n->name + "' is used before its definition", n->line, n->col);
        return v;
      }
      case N_PARAM: return params[n->a];
      case N_INPUT: return inputs[n->a];
      case N_IF: {
        Value t = operand(n->kids[0], env);
        n = t.truthy() ? n->kids[1] : n->kids[2];
        continue;
      }
      case N_SEQ: {
        size_t k = n->kids.size();
        for (size_t i = 0; i + 1 < k; ++i) {
          const Node* kid = n->kids[i];
          if (kid->kind == N_BIND) env->slots[kid->b] = operand(kid->kids[0], env);  // a let* binding, inline
          else eval(kid, env);
        }
        n = n->kids[k - 1];
        continue;
      }
      case N_BIND: env->slots[n->b] = operand(n->kids[0], env); return Value::make_unspec();
      case N_LAMBDA: {
        Closure* c = static_cast<Closure*>(heap.alloc(sizeof(Closure)));
        c->lambda = n->lam;
        c->env = env;
        Value v;
        v.tag = T_CLOSURE;
        v.ptr = c;
        return v;
      }
      case N_AND: {
        size_t k = n->kids.size();
        size_t i = 0;
        for (; i + 1 < k; ++i) {
          Value v = eval(n->kids[i], env);
          if (!v.truthy()) return v;
        }
        n = n->kids[i];
        continue;
      }
      case N_OR: {
        size_t k = n->kids.size();
        size_t i = 0;
        for (; i + 1 < k; ++i) {
          Value v = eval(n->kids[i], env);
          if (v.truthy()) return v;
        }
        n = n->kids[i];
        continue;
      }
      case N_PRIMCALL: {
        size_t k = n->kids.size();
        size_t base = push_operands(n, k, env);
        if (n->tail && n->a == P_APPLY) {  // (apply f ...) in tail position: a proper tail call
          std::vector<Value> args(stack + base, stack + base + k);
          sp = base;
          Value f = Value::make_prim(P_APPLY);
          spread_apply(f, args, n);
          if (f.tag == T_CLOSURE) {
            const Closure* c = static_cast<const Closure*>(f.ptr);
            env = bind_args(c->lambda, c->env, args.data(), static_cast<int>(args.size()), n);
            n = c->lambda->body;
            continue;
          }
          return apply(f, args.data(), static_cast<int>(args.size()), n);
        }
        Value r = call_prim(n->a, stack + base, static_cast<int>(k), n);
        sp = base;
        return r;
      }
      case N_ARITH2: {
        Value x = operand(n->kids[0], env);
        Value y = operand(n->kids[1], env);
        return binary(static_cast<Op>(n->a), x, y, n);
      }
      case N_LOOP:
      case N_RECUR: {
        const Node* loop = n->kind == N_LOOP ? n : n->loop;
        size_t k = loop->slots.size();
        size_t base = push_operands(n, k, env);
        for (size_t i = 0; i < k; ++i) env->slots[loop->slots[i]] = stack[base + i];
        sp = base;
        n = loop->kids.back();
        continue;
      }
      case N_CALL: {
        size_t k = n->kids.size();
        size_t base = push_operands(n, k, env);
        Value f = stack[base];
        int nargs = static_cast<int>(k - 1);
        if (f.tag == T_PRIM && f.i == P_APPLY && nargs >= 2) {
          // apply reached as a value, possibly (apply apply ...): spread, then call in place
          std::vector<Value> args(stack + base + 1, stack + base + 1 + nargs);
          spread_apply(f, args, n);
          sp = base;
          if (f.tag == T_CLOSURE && n->tail) {
            const Closure* c = static_cast<const Closure*>(f.ptr);
            env = bind_args(c->lambda, c->env, args.data(), static_cast<int>(args.size()), n);
            n = c->lambda->body;
            continue;
          }
          return apply(f, args.data(), static_cast<int>(args.size()), n);
        }
        if (f.tag == T_PRIM) {
          const PrimInfo& pi = kPrims[f.i];
          if (nargs < pi.min_args || (pi.max_args >= 0 && nargs > pi.max_args))
            eval_error(std::string("wrong number of arguments to '") + pi.name + "': got " + std::to_string(nargs),
                       n->line, n->col);
          Value r = call_prim(static_cast<int>(f.i), stack + base + 1, nargs, n);
          sp = base;
          return r;
        }
        if (f.tag != T_CLOSURE)
          eval_error("attempt to call " + describe(f) + (n->name.empty() ? "" : " ('" + n->name + "')") +
                         ", which is not a procedure",
                     n->line, n->col);
        const Closure* c = static_cast<const Closure*>(f.ptr);
        Frame* fr = bind_args(c->lambda, c->env, stack + base + 1, nargs, n);
        sp = base;
        if (n->tail) {
          env = fr;
          n = c->lambda->body;
          continue;
        }
        DepthGuard guard(depth);  // a nested (non-tail) procedure call
        if (depth > lim->max_depth) depth_error(n);
        return eval(c->lambda->body, fr);
      }
    }
    eval_error("internal error: unknown node kind", n->line, n->col);
  }
}

Value VM::apply(Value f, const Value* args, int nargs, const Node* site) {
  if (f.tag == T_PRIM) {
    const PrimInfo& pi = kPrims[f.i];
    if (nargs < pi.min_args || (pi.max_args >= 0 && nargs > pi.max_args))
      eval_error(std::string("wrong number of arguments to '") + pi.name + "': got " + std::to_string(nargs),
                 site ? site->line : 0, site ? site->col : 0);
    size_t base = sp;
    if (sp + nargs >= stack_cap) limit_error("argument stack exhausted");
    for (int i = 0; i < nargs; ++i) stack[sp++] = args[i];
    Value r = call_prim(static_cast<int>(f.i), stack + base, nargs, site);
    sp = base;
    return r;
  }
  if (f.tag != T_CLOSURE) type_error(site, "a procedure", f);
  const Closure* c = static_cast<const Closure*>(f.ptr);
  Frame* fr = bind_args(c->lambda, c->env, args, nargs, site);
  DepthGuard guard(depth);
  if (depth > lim->max_depth) depth_error(site);
  return eval(c->lambda->body, fr);
}

void VM::depth_error(const Node* site) {
  limit_error("recursion depth exceeded (" + std::to_string(lim->max_depth) +
                  " nested calls); use a tail call or raise Limits.max_depth",
              site ? site->line : 0, site ? site->col : 0);
}

}  // namespace ndvm
