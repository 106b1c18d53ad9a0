// The front end: Datum trees -> resolved Node trees. Derived forms (let*, cond, case, do, named
// let, when, unless, loop/recur, internal define) are expanded here, names are resolved to lexical
// addresses, constants are pooled, arity against the primitive table is checked statically.
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "error.h"
#include "forms.h"
#include "linear.h"
#include "nesting.h"
#include "prims.h"
#include "program.h"
#include "reader.h"

namespace ndvm {

int find_prim(const char* name) {
  static const std::unordered_map<std::string, int> table = [] {
    std::unordered_map<std::string, int> t;
    for (int i = 0; i < P_COUNT; ++i) t.emplace(kPrims[i].name, i);
    return t;
  }();
  auto it = table.find(name);
  return it == table.end() ? -1 : it->second;
}

const FormInfo kForms[F_COUNT] = {
#define NDVM_FORM_INFO(id, name, supported) {name, supported},
    NDVM_FORMS(NDVM_FORM_INFO)
#undef NDVM_FORM_INFO
};

int find_form(const std::string& name) {
  static const std::unordered_map<std::string, int> table = [] {
    std::unordered_map<std::string, int> t;
    for (int i = 0; i < F_COUNT; ++i) t.emplace(kForms[i].name, i);
    return t;
  }();
  auto it = table.find(name);
  return it == table.end() ? -1 : it->second;
}

int Program::intern(const std::string& s) {
  for (size_t i = 0; i < symbols.size(); ++i)
    if (symbols[i] == s) return static_cast<int>(i);
  symbols.push_back(s);
  return static_cast<int>(symbols.size() - 1);
}

namespace {

bool is_form(const std::string& s) { return find_form(s) >= 0; }

// A named let or loop/recur being compiled as a frame-reusing loop. If its name escapes (used
// other than as a call in tail position) or its body creates a closure, `failed` is set and the
// form is recompiled as an ordinary recursive closure.
struct LoopInfo {
  Node* node = nullptr;
  bool failed = false;
  const Datum* nontail = nullptr;  // a use of the name that is not a call in tail position
};

struct Fn {
  Fn* parent;
  Lambda* lam;
  int nslots = 0;
};

struct Var {
  std::string name;
  int slot;
  LoopInfo* loop;  // non-null: the name of a loop being compiled (not a frame variable)
};

struct Scope {
  Scope* parent;
  Fn* fn;
  std::vector<Var> vars;
  // name -> position of its latest binding in vars, so that a lookup costs the same in a body of
  // 150,000 defines as in one of three (a linear scan made long flat forms quadratic)
  std::unordered_map<std::string, size_t>
      index{};  // {}: Scope{parent, fn, vars} leaves it empty without a -Wextra warning

  void add(Var v) {
    index[v.name] = vars.size();
    vars.push_back(std::move(v));
  }
  const Var* find(const std::string& name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &vars[it->second];
  }
};

// The loops whose body this position is a tail position of: the innermost first. A loop in tail
// position of another keeps the outer one reachable, so (recur ...) of the outer loop may appear
// in the inner loop's exit branch.
struct LoopChain {
  LoopInfo* loop;
  const LoopChain* outer;
  bool contains(const LoopInfo* l) const {
    for (const LoopChain* c = this; c; c = c->outer)
      if (c->loop == l) return true;
    return false;
  }
};

struct Ctx {
  bool tail = false;                 // tail position of the current lambda
  const LoopChain* loops = nullptr;  // tail position of these loops' bodies
  Ctx nontail() const { return Ctx{}; }
};

class Compiler {
 public:
  // `max_bytes` (0: none) bounds the syntax tree (`used`: what the reader charged) plus the nodes.
  Compiler(Program& p, uint64_t max_bytes, uint64_t used) : P(p), max_bytes_(max_bytes), bytes_(used) {}

  // Inputs numbered in this order before any is met (a derived program, such as a basis program,
  // reads the Inputs laid out for the program it came from, whose inputs are numbered by first use).
  void number_inputs(const Program& like) {
    for (size_t i = 0; i < like.inputs.size(); ++i) {
      input_index_.emplace(like.inputs[i], static_cast<int>(i));
      P.inputs.push_back(like.inputs[i]);
      P.input_line.push_back(like.input_line[i]);
      P.input_col.push_back(like.input_col[i]);
    }
  }

  void compile_toplevel(const std::vector<DatumP>& forms) {
    std::vector<DatumP> body;
    for (auto& f : forms) {
      if (f->kind == Datum::List && !f->items.empty() && f->items[0]->is_sym("param")) declare_param(*f);
      else body.push_back(f);
    }
    auto lam = new_lambda("program", 1, 1);
    Fn fn{nullptr, lam, 0};
    Scope scope{nullptr, &fn, {}};
    if (body.empty()) {
      check_error(forms.empty() ? "empty program: there is nothing to evaluate"
                                : "the program only declares parameters: there is no expression to evaluate",
                  forms.empty() ? 1 : forms.back()->line, forms.empty() ? 1 : forms.back()->col);
    } else {
      lam->body = compile_body(body, &scope, Ctx{true, nullptr}, body[0]->line, body[0]->col);
    }
    lam->frame_size = fn.nslots;
    P.top = lam;
  }

 private:
  Program& P;
  const uint64_t max_bytes_;
  uint64_t bytes_;  // the read tree plus the nodes made so far, as charged to the memory budget
  // a node, its unique_ptr in P.nodes, its pointer in its parent's kids, the allocator's overhead
  static constexpr uint64_t kNodeBytes = sizeof(Node) + 40;
  const StackProbe probe_;  // taken when compilation starts: bounds the recursion per nesting level
  std::unordered_map<std::string, int> param_index_, input_index_, symbol_index_;
  int gensym_ = 0;
  bool strict_recur_next_ = false;  // the named let being compiled comes from (loop ...)
  // Named lets (by their source datum) that failed to compile as a loop. A failed attempt makes
  // the enclosing loop fail too, and each failure recompiles its body: without this memo nested
  // named lets / do / loop forms took time exponential in their nesting (24 levels: minutes).
  std::unordered_set<const Datum*> not_a_loop_;
  int loop_nesting_ = 0;

  // ---- helpers -------------------------------------------------------------------------------
  Node* node(NodeKind k, const Datum& d) { return node(k, d.line, d.col); }
  Node* node(NodeKind k, int line, int col) {
    bytes_ += kNodeBytes;
    if (max_bytes_ && bytes_ > max_bytes_)
      limit_error("memory budget (max_bytes=" + std::to_string(max_bytes_ >> 20) +
                      " MiB) exceeded while compiling the program: its syntax tree and compiled form need more than "
                      "that; raise Limits.max_bytes for a program this large",
                  line, col);
    P.nodes.push_back(std::make_unique<Node>());
    Node* n = P.nodes.back().get();
    n->kind = k;
    n->line = line;
    n->col = col;
    return n;
  }
  Lambda* new_lambda(const std::string& name, int line, int col) {
    P.lambdas.push_back(std::make_unique<Lambda>());
    Lambda* l = P.lambdas.back().get();
    l->name = name;
    l->line = line;
    l->col = col;
    return l;
  }
  [[noreturn]] void bad(const Datum& d, const std::string& msg) { check_error(msg, d.line, d.col); }

  Value const_num(double x, bool exact, int64_t ix = 0) {
    if (exact) return Value::make_int(ix);
    Value v;
    v.tag = T_NUM;
    v.flags = NF_UNIFORM;
    v.rank = 0;
    v.rows = 1;
    v.n.cols = 1;
    v.n.off = static_cast<uint32_t>(P.const_payload.size());
    P.const_payload.push_back(x);
    return v;
  }
  Node* constant(Value v, int line, int col) {
    Node* n = node(N_CONST, line, col);
    n->k = v;
    return n;
  }

  // Symbol ids through a map: Program::intern scans the table, so a quoted list of 200,000
  // distinct symbols took a minute. The compiler is the only writer of P.symbols while it runs.
  int intern(const std::string& name) {
    auto it = symbol_index_.find(name);
    if (it != symbol_index_.end()) return it->second;
    int id = static_cast<int>(P.symbols.size());
    P.symbols.push_back(name);
    symbol_index_.emplace(name, id);
    return id;
  }

  Value quote(const Datum& d) {
    probe_.check("compiling a quoted datum", d.line, d.col);
    switch (d.kind) {
      case Datum::Number: return const_num(d.num, d.exact, d.inum);
      case Datum::Bool: return Value::make_bool(d.boolean);
      case Datum::Symbol: return Value::make_sym(intern(d.sym));
      case Datum::List: {
        Value tail = d.dotted ? quote(*d.tail) : Value::make_nil();
        for (size_t i = d.items.size(); i-- > 0;) {
          P.const_pairs.push_back(Pair{quote(*d.items[i]), tail});
          Value v;
          v.tag = T_PAIR;
          v.ptr = &P.const_pairs.back();
          tail = v;
        }
        return tail;
      }
    }
    return Value::make_unspec();
  }

  static DatumP sym(const std::string& s, const Datum& at) {
    auto d = std::make_shared<Datum>();
    d->kind = Datum::Symbol;
    d->sym = s;
    d->line = at.line;
    d->col = at.col;
    return d;
  }
  static DatumP list(std::vector<DatumP> items, const Datum& at) {
    auto d = std::make_shared<Datum>();
    d->kind = Datum::List;
    d->items = std::move(items);
    d->line = at.line;
    d->col = at.col;
    return d;
  }

  void declare_param(const Datum& f) {
    // A trailing `shared` marks a parameter shared across the groups of a grouped fit
    // (calibrate_shared): (param NAME INIT [CONSTRAINT] shared).
    std::vector<DatumP> it = f.items;
    bool shared = false;
    if (it.size() >= 4 && it.back()->is_sym("shared")) {
      shared = true;
      it.pop_back();
    }
    for (size_t k = 3; k < it.size(); ++k)
      if (it[k]->is_sym("shared"))
        bad(*it[k], "param declaration: `shared` is given once, last (after the constraint)");
    if (it.size() < 3 || it.size() > 4 || it[1]->kind != Datum::Symbol)
      bad(f, "bad param declaration: expected (param NAME INIT [positive | unit | (between LO HI)] [shared])");
    ParamDecl pd;
    pd.shared = shared;
    pd.name = it[1]->sym;
    if (is_form(pd.name) || find_prim(pd.name.c_str()) >= 0)
      bad(*it[1], "param name '" + pd.name + "' is a special form or primitive");
    if (param_index_.count(pd.name)) bad(*it[1], "parameter '" + pd.name + "' declared twice");
    if (it[2]->kind != Datum::Number)
      bad(*it[2], "param '" + pd.name + "': the initial value must be a number literal");
    pd.init = it[2]->num;
    if (!std::isfinite(pd.init)) bad(*it[2], "param '" + pd.name + "': the initial value must be finite");
    if (it.size() == 4) {
      const Datum& c = *it[3];
      if (c.is_sym("positive")) {
        pd.constraint = C_POSITIVE;
        if (!(pd.init > 0)) bad(c, "param '" + pd.name + "': initial value must be > 0 for a positive parameter");
      } else if (c.is_sym("free")) {
        pd.constraint = C_FREE;
      } else if (c.is_sym("unit")) {
        pd.constraint = C_BETWEEN;
        pd.lo = 0;
        pd.hi = 1;
      } else if (c.kind == Datum::List && c.items.size() == 3 && c.items[0]->is_sym("between") &&
                 c.items[1]->kind == Datum::Number && c.items[2]->kind == Datum::Number) {
        pd.constraint = C_BETWEEN;
        pd.lo = c.items[1]->num;
        pd.hi = c.items[2]->num;
        if (!(pd.lo < pd.hi)) bad(c, "param '" + pd.name + "': (between LO HI) needs LO < HI");
      } else {
        bad(c, "param '" + pd.name + "': unknown constraint " + write_datum(c) +
                   " (expected positive, unit, free or (between LO HI))");
      }
      if (pd.constraint == C_BETWEEN && !(pd.init > pd.lo && pd.init < pd.hi))
        bad(*it[2], "param '" + pd.name + "': initial value must lie strictly inside (between LO HI)");
    }
    param_index_.emplace(pd.name, static_cast<int>(P.params.size()));
    P.params.push_back(pd);
  }

  // Resolution result of a name.
  struct Resolved {
    enum { Local, LoopName, Param, Prim, Free } kind;
    int depth = 0, slot = 0, index = 0;
    LoopInfo* loop = nullptr;
  };

  Resolved resolve(const std::string& name, Scope* s) {
    int depth = 0;
    Fn* fn = s ? s->fn : nullptr;
    for (Scope* sc = s; sc; sc = sc->parent) {
      if (sc->fn != fn) {
        ++depth;
        fn = sc->fn;
      }
      if (const Var* v = sc->find(name)) {
        Resolved r;
        if (v->loop) {
          r.kind = Resolved::LoopName;
          r.loop = v->loop;
          r.depth = depth;
        } else {
          r.kind = Resolved::Local;
          r.depth = depth;
          r.slot = v->slot;
        }
        return r;
      }
    }
    Resolved r;
    auto pi = param_index_.find(name);
    if (pi != param_index_.end()) {
      r.kind = Resolved::Param;
      r.index = pi->second;
      return r;
    }
    int pid = find_prim(name.c_str());
    if (pid >= 0) {
      r.kind = Resolved::Prim;
      r.index = pid;
      return r;
    }
    r.kind = Resolved::Free;
    return r;
  }

  int input_index(const std::string& name, const Datum& at) {
    auto it = input_index_.find(name);
    if (it != input_index_.end()) return it->second;
    input_index_.emplace(name, static_cast<int>(P.inputs.size()));
    P.inputs.push_back(name);
    P.input_line.push_back(at.line);
    P.input_col.push_back(at.col);
    return static_cast<int>(P.inputs.size() - 1);
  }

  int new_slot(Scope* s) { return s->fn->nslots++; }

  // ---- expressions ---------------------------------------------------------------------------
  Node* compile(const Datum& d, Scope* s, Ctx cx) {
    probe_.check("compiling", d.line, d.col);
    switch (d.kind) {
      case Datum::Number: return constant(const_num(d.num, d.exact, d.inum), d.line, d.col);
      case Datum::Bool: return constant(Value::make_bool(d.boolean), d.line, d.col);
      case Datum::Symbol: return variable(d, s);
      case Datum::List: break;
    }
    if (d.dotted) bad(d, "a dotted list is not a valid expression: " + write_datum(d));
    if (d.items.empty()) bad(d, "empty combination (): quote it as '() for the empty list");
    const Datum& head = *d.items[0];
    if (head.kind == Datum::Symbol) {
      // Local bindings shadow special forms and primitives; forms shadow primitives and inputs.
      Resolved r = resolve(head.sym, s);
      if (r.kind == Resolved::LoopName) return loop_call(d, r, s, cx);
      if (r.kind == Resolved::Param) bad(head, "'" + head.sym + "' is a parameter (a number), not a procedure");
      if (r.kind != Resolved::Local) {
        if (is_form(head.sym)) return form(d, s, cx);
        if (r.kind == Resolved::Prim) return primcall(d, r.index, s, cx);
        bad(head, "unknown operator '" + head.sym + "'");
      }
    }
    Node* n = node(N_CALL, d);
    n->tail = cx.tail;
    if (head.kind == Datum::Symbol) n->name = head.sym;
    for (auto& it : d.items) n->kids.push_back(compile(*it, s, cx.nontail()));
    return n;
  }

  Node* variable(const Datum& d, Scope* s) {
    if (is_form(d.sym) && resolve(d.sym, s).kind == Resolved::Free)
      bad(d, "special form '" + d.sym + "' used as a value");
    Resolved r = resolve(d.sym, s);
    switch (r.kind) {
      case Resolved::Local: {
        Node* n = node(N_LOCAL, d);
        n->a = r.depth;
        n->b = r.slot;
        n->name = d.sym;
        return n;
      }
      case Resolved::LoopName:
        r.loop->failed = true;  // the loop's name escapes as a value: recompile as a closure
        if (!r.loop->nontail) r.loop->nontail = &d;
        return constant(Value::make_unspec(), d.line, d.col);
      case Resolved::Param: {
        Node* n = node(N_PARAM, d);
        n->a = r.index;
        n->name = d.sym;
        return n;
      }
      case Resolved::Prim: return constant(Value::make_prim(r.index), d.line, d.col);
      case Resolved::Free: {
        Node* n = node(N_INPUT, d);
        n->a = input_index(d.sym, d);
        n->name = d.sym;
        return n;
      }
    }
    return nullptr;
  }

  Node* primcall(const Datum& d, int pid, Scope* s, Ctx cx) {
    const PrimInfo& pi = kPrims[pid];
    int nargs = static_cast<int>(d.items.size()) - 1;
    if (nargs < pi.min_args || (pi.max_args >= 0 && nargs > pi.max_args)) {
      std::string want = pi.max_args < 0 ? "at least " + std::to_string(pi.min_args)
                         : pi.min_args == pi.max_args
                             ? std::to_string(pi.min_args)
                             : std::to_string(pi.min_args) + " to " + std::to_string(pi.max_args);
      bad(d, std::string("wrong number of arguments to '") + pi.name + "': expected " + want + ", got " +
                 std::to_string(nargs));
    }
    Node* n = node(N_PRIMCALL, d);
    n->a = pid;
    n->name = pi.name;
    n->tail = cx.tail && pid == P_APPLY;  // (apply f args) in tail position is a tail call
    for (size_t i = 1; i < d.items.size(); ++i) n->kids.push_back(compile(*d.items[i], s, Ctx{}));
    if (nargs == 2 && (pid == P_ADD || pid == P_SUB || pid == P_MUL || pid == P_DIV)) {
      n->kind = N_ARITH2;  // the opcode values are fixed in vm.h: O_ADD, O_SUB, O_MUL, O_DIV
      n->a = pid == P_ADD ? 0 : pid == P_SUB ? 1 : pid == P_MUL ? 2 : 3;
    }
    return n;
  }

  Node* loop_call(const Datum& d, const Resolved& r, Scope* s, Ctx cx) {
    LoopInfo* L = r.loop;
    if (!cx.loops || !cx.loops->contains(L) || r.depth != 0) {
      L->failed = true;
      // inside a nested procedure (depth > 0) the call may still be a tail call of the loop as a
      // whole (e.g. from a named let that became a closure): only a same-frame use is an error
      if (r.depth == 0 && !L->nontail) L->nontail = &d;
      return constant(Value::make_unspec(), d.line, d.col);
    }
    Node* loop = L->node;
    size_t nvars = loop->slots.size();
    if (d.items.size() - 1 != nvars)
      bad(d, "loop '" + d.items[0]->sym + "' called with " + std::to_string(d.items.size() - 1) +
                 " arguments, expected " + std::to_string(nvars));
    Node* n = node(N_RECUR, d);
    n->loop = loop;
    n->tail = true;
    for (size_t i = 1; i < d.items.size(); ++i) n->kids.push_back(compile(*d.items[i], s, Ctx{}));
    return n;
  }

  // A body: internal defines (letrec* semantics: all names visible in the whole body), then
  // expressions; the last one is in tail position.
  Node* compile_body(const std::vector<DatumP>& forms_in, Scope* outer, Ctx cx, int line, int col) {
    std::vector<DatumP> forms;
    std::function<void(const DatumP&)> splice = [&](const DatumP& f) {
      if (f->kind == Datum::List && !f->items.empty() && f->items[0]->is_sym("begin") &&
          resolve("begin", outer).kind == Resolved::Free) {
        probe_.check("compiling", f->line, f->col);  // nested (begin (begin ...)) recurses
        for (size_t i = 1; i < f->items.size(); ++i) splice(f->items[i]);
      } else {
        forms.push_back(f);
      }
    };
    for (auto& f : forms_in) splice(f);
    if (forms.empty()) check_error("empty body", line, col);

    Scope scope{outer, outer->fn, {}};
    std::vector<int> def_slot(forms.size(), -1);
    for (size_t i = 0; i < forms.size(); ++i) {
      const Datum& f = *forms[i];
      if (f.kind == Datum::List && !f.items.empty() && f.items[0]->is_sym("define") &&
          resolve("define", outer).kind == Resolved::Free) {
        std::string name = define_name(f);
        if (!outer->parent && outer->vars.empty())  // the top level: a define must not hide a parameter
          for (auto& p : P.params)
            if (p.name == name)
              bad(f, "'" + name + "' is a declared parameter; a define of the same name would hide it (rename one)");
        int slot = -1;
        if (const Var* v = scope.find(name))
          slot = v->slot;  // a redefinition assigns the same variable, as at a Scheme top level
        if (slot < 0) {
          slot = new_slot(&scope);
          scope.add(Var{name, slot, nullptr});
        }
        def_slot[i] = slot;
      }
    }
    Node* seq = node(N_SEQ, line, col);
    for (size_t i = 0; i < forms.size(); ++i) {
      bool last = i + 1 == forms.size();
      const Datum& f = *forms[i];
      if (def_slot[i] >= 0) {
        Node* b = node(N_BIND, f);
        b->b = def_slot[i];
        b->kids.push_back(define_value(f, &scope));
        seq->kids.push_back(b);
        if (last) seq->kids.push_back(constant(Value::make_unspec(), f.line, f.col));
      } else {
        seq->kids.push_back(compile(f, &scope, last ? cx : Ctx{}));
      }
    }
    return seq->kids.size() == 1 ? seq->kids[0] : seq;
  }

  std::string define_name(const Datum& f) {
    if (f.items.size() < 2) bad(f, "bad define: expected (define NAME EXPR) or (define (NAME ARGS...) BODY...)");
    const Datum& t = *f.items[1];
    if (t.kind == Datum::Symbol) {
      if (f.items.size() != 3) bad(f, "bad define: (define NAME EXPR) takes exactly one expression");
      return t.sym;
    }
    if (t.kind == Datum::List && !t.items.empty() && t.items[0]->kind == Datum::Symbol) {
      if (f.items.size() < 3) bad(f, "bad define: the procedure '" + t.items[0]->sym + "' has no body");
      return t.items[0]->sym;
    }
    bad(f, "bad define: expected a name or (NAME ARGS...)");
  }

  Node* define_value(const Datum& f, Scope* s) {
    const Datum& t = *f.items[1];
    if (t.kind == Datum::Symbol) return compile(*f.items[2], s, Ctx{});
    // (define (name . formals) body...) == (define name (lambda formals body...))
    std::vector<DatumP> body(f.items.begin() + 2, f.items.end());
    auto formals = std::make_shared<Datum>(t);
    formals->items.erase(formals->items.begin());
    if (formals->items.empty() && formals->dotted) formals = formals->tail;  // (define (f . args) ...)
    return lambda(*formals, body, s, t.items[0]->sym, f);
  }

  Node* lambda(const Datum& formals, const std::vector<DatumP>& body, Scope* s, const std::string& name,
               const Datum& at) {
    Lambda* lam = new_lambda(name, at.line, at.col);
    Fn fn{s ? s->fn : nullptr, lam, 0};
    Scope scope{s, &fn, {}};
    auto add = [&](const Datum& p) {
      if (p.kind != Datum::Symbol) bad(p, "a lambda parameter must be a name, got " + write_datum(p));
      if (scope.find(p.sym)) bad(p, "duplicate parameter '" + p.sym + "'");
      scope.add(Var{p.sym, fn.nslots++, nullptr});
    };
    if (formals.kind == Datum::Symbol) {
      lam->rest = true;
      add(formals);
    } else if (formals.kind == Datum::List) {
      for (auto& p : formals.items) add(*p);
      lam->nreq = static_cast<int>(formals.items.size());
      if (formals.dotted) {
        lam->rest = true;
        add(*formals.tail);
      }
    } else {
      bad(formals, "bad lambda parameter list " + write_datum(formals));
    }
    if (body.empty()) bad(at, "lambda without a body");
    lam->body = compile_body(body, &scope, Ctx{true, nullptr}, at.line, at.col);
    lam->frame_size = fn.nslots;
    Node* n = node(N_LAMBDA, at);
    n->lam = lam;
    return n;
  }

  // ---- special forms -------------------------------------------------------------------------
  Node* form(const Datum& d, Scope* s, Ctx cx) {
    const std::string& f = d.items[0]->sym;
    auto& it = d.items;
    size_t n = it.size();
    // One case per row of the forms table (forms.h); no default, so -Wswitch names a missing one.
    switch (static_cast<FormId>(find_form(f))) {
      case F_QUOTE:
        if (n != 2) bad(d, "bad quote: expected (quote DATUM)");
        return constant(quote(*it[1]), d.line, d.col);
      case F_IF: {
        if (n != 3 && n != 4) bad(d, "bad if: expected (if TEST THEN [ELSE])");
        Node* x = node(N_IF, d);
        x->kids.push_back(compile(*it[1], s, Ctx{}));
        x->kids.push_back(compile(*it[2], s, cx));
        x->kids.push_back(n == 4 ? compile(*it[3], s, cx) : constant(Value::make_unspec(), d.line, d.col));
        return x;
      }
      case F_DEFINE: bad(d, "define is only allowed at top level or at the start of a body");
      case F_LAMBDA:
        if (n < 3) bad(d, "bad lambda: expected (lambda FORMALS BODY...)");
        return lambda(*it[1], std::vector<DatumP>(it.begin() + 2, it.end()), s, "lambda", d);
      case F_BEGIN: {
        if (n == 1) bad(d, "(begin) with no expressions is not an expression");
        Node* x = node(N_SEQ, d);
        for (size_t i = 1; i < n; ++i) x->kids.push_back(compile(*it[i], s, i + 1 == n ? cx : Ctx{}));
        return x;
      }
      case F_LET:
        if (n >= 2 && it[1]->kind == Datum::Symbol) return named_let(d, s, cx);
        return let(d, s, cx, false);
      case F_LET_STAR: return let(d, s, cx, true);
      case F_LETREC:
      case F_LETREC_STAR: return letrec(d, s, cx);
      case F_AND:
      case F_OR: {
        if (n == 1) return constant(Value::make_bool(f == "and"), d.line, d.col);
        if (n == 2) return compile(*it[1], s, cx);
        Node* x = node(f == "and" ? N_AND : N_OR, d);
        for (size_t i = 1; i < n; ++i) x->kids.push_back(compile(*it[i], s, i + 1 == n ? cx : Ctx{}));
        return x;
      }
      case F_WHEN:
      case F_UNLESS: {
        if (n < 3) bad(d, "bad " + f + ": expected (" + f + " TEST BODY...)");
        Node* x = node(N_IF, d);
        Node* test = compile(*it[1], s, Ctx{});
        Node* body = node(N_SEQ, d);
        for (size_t i = 2; i < n; ++i) body->kids.push_back(compile(*it[i], s, i + 1 == n ? cx : Ctx{}));
        Node* none = constant(Value::make_unspec(), d.line, d.col);
        x->kids = {test, f == "when" ? body : none, f == "when" ? none : body};
        return x;
      }
      case F_COND: return cond(d, s, cx);
      case F_CASE: return case_form(d, s, cx);
      case F_DO: return do_form(d, s, cx);
      case F_LOOP: return loop_form(d, s, cx);
      case F_RECUR: bad(d, "recur outside the tail position of a (loop ...)");
      case F_PARAM: bad(d, "param declarations are only allowed at top level");
      case F_SET: bad(d, "set! is not supported: the language has no mutation (bind a new name instead)");
      case F_NAMED_LAMBDA:
      case F_DEFINE_SYNTAX:
      case F_LET_VALUES:
      case F_QUASIQUOTE:
      case F_DELAY:
      case F_GUARD:
      case F_COUNT: break;
    }
    bad(d, "the special form '" + f + "' is not supported by the language");
  }

  Node* let(const Datum& d, Scope* s, Ctx cx, bool sequential) {
    const std::string& f = d.items[0]->sym;
    if (d.items.size() < 3 || d.items[1]->kind != Datum::List || d.items[1]->dotted)
      bad(d, "bad " + f + ": expected (" + f + " ((NAME EXPR) ...) BODY...)");
    // One scope for all the names. let*: each name is added after its init is compiled, so the
    // init sees the names before it (and a repeated name shadows the earlier one); let: the names
    // are added after all inits. Either way lookups stay O(1) however many bindings there are.
    Scope inner{s, s->fn, {}};
    Node* seq = node(N_SEQ, d);
    std::vector<std::pair<std::string, int>> bound;
    std::unordered_map<std::string, int> seen;  // let: duplicate names
    for (auto& b : d.items[1]->items) {
      if (b->kind != Datum::List || b->dotted || b->items.size() != 2 || b->items[0]->kind != Datum::Symbol)
        bad(*b, "bad binding in " + f + ": expected (NAME EXPR), got " + write_datum(*b));
      const std::string& name = b->items[0]->sym;
      if (!sequential && !seen.emplace(name, 0).second) bad(*b, "duplicate name '" + name + "' in let");
      Node* init = compile(*b->items[1], sequential ? &inner : s, Ctx{});
      int slot = new_slot(s);
      Node* bind = node(N_BIND, *b);
      bind->b = slot;
      bind->kids.push_back(init);
      seq->kids.push_back(bind);
      if (sequential) inner.add(Var{name, slot, nullptr});
      else bound.emplace_back(name, slot);
    }
    for (auto& p : bound) inner.add(Var{p.first, p.second, nullptr});
    std::vector<DatumP> body(d.items.begin() + 2, d.items.end());
    seq->kids.push_back(compile_body(body, &inner, cx, d.line, d.col));
    return seq;
  }

  Node* letrec(const Datum& d, Scope* s, Ctx cx) {
    if (d.items.size() < 3 || d.items[1]->kind != Datum::List)
      bad(d, "bad letrec: expected (letrec ((NAME EXPR) ...) BODY...)");
    Scope inner{s, s->fn, {}};
    std::vector<int> slots;
    for (auto& b : d.items[1]->items) {
      if (b->kind != Datum::List || b->items.size() != 2 || b->items[0]->kind != Datum::Symbol)
        bad(*b, "bad binding in letrec: expected (NAME EXPR), got " + write_datum(*b));
      slots.push_back(new_slot(s));
      inner.add(Var{b->items[0]->sym, slots.back(), nullptr});
    }
    Node* seq = node(N_SEQ, d);
    for (size_t i = 0; i < slots.size(); ++i) {
      Node* bind = node(N_BIND, *d.items[1]->items[i]);
      bind->b = slots[i];
      bind->kids.push_back(compile(*d.items[1]->items[i]->items[1], &inner, Ctx{}));
      seq->kids.push_back(bind);
    }
    std::vector<DatumP> body(d.items.begin() + 2, d.items.end());
    seq->kids.push_back(compile_body(body, &inner, cx, d.line, d.col));
    return seq;
  }

  // (let name ((v init) ...) body...): first try a frame-reusing loop; fall back to
  // ((letrec ((name (lambda (v ...) body...))) name) init ...).
  // `key` identifies the source form (the (do ...) or (loop ...) a named let was derived from).
  Node* named_let(const Datum& d, Scope* s, Ctx cx, const Datum* key = nullptr) {
    if (!key) key = &d;
    if (d.items.size() < 4 || d.items[2]->kind != Datum::List)
      bad(d, "bad named let: expected (let NAME ((VAR INIT) ...) BODY...)");
    const std::string& name = d.items[1]->sym;
    std::vector<std::string> vars;
    std::vector<DatumP> inits;
    for (auto& b : d.items[2]->items) {
      if (b->kind != Datum::List || b->items.size() != 2 || b->items[0]->kind != Datum::Symbol)
        bad(*b, "bad binding in named let: expected (VAR INIT), got " + write_datum(*b));
      vars.push_back(b->items[0]->sym);
      inits.push_back(b->items[1]);
    }
    std::vector<DatumP> body(d.items.begin() + 3, d.items.end());
    Node* loop = not_a_loop_.count(key) ? nullptr : try_loop(d, name, vars, inits, body, s, cx, strict_recur_next_);
    if (loop) {
      strict_recur_next_ = false;
      return loop;
    }
    strict_recur_next_ = false;
    not_a_loop_.insert(key);
    // closure form
    std::vector<DatumP> formals;
    for (auto& v : vars) formals.push_back(sym(v, d));
    std::vector<DatumP> lam_items{sym("lambda", d), list(formals, d)};
    lam_items.insert(lam_items.end(), body.begin(), body.end());
    Scope inner{s, s->fn, {}};
    int slot = new_slot(s);
    inner.add(Var{name, slot, nullptr});
    Node* seq = node(N_SEQ, d);
    Node* bind = node(N_BIND, d);
    bind->b = slot;
    bind->kids.push_back(lambda(*list(formals, d), body, &inner, name, d));
    seq->kids.push_back(bind);
    Node* call = node(N_CALL, d);
    call->tail = cx.tail;
    call->name = name;
    Node* fref = node(N_LOCAL, d);
    fref->a = 0;
    fref->b = slot;
    fref->name = name;
    call->kids.push_back(fref);
    for (auto& i : inits) call->kids.push_back(compile(*i, s, Ctx{}));
    seq->kids.push_back(call);
    (void)lam_items;
    return seq;
  }

  Node* try_loop(const Datum& d, const std::string& name, const std::vector<std::string>& vars,
                 const std::vector<DatumP>& inits, const std::vector<DatumP>& body, Scope* s, Ctx cx,
                 bool strict_recur = false) {
    // Each failed attempt recompiles the body; bound the nesting so compile time stays linear.
    if (loop_nesting_ >= 6) return nullptr;
    struct Nest {
      int& n;
      explicit Nest(int& x) : n(x) { ++n; }
      ~Nest() { --n; }
    } nest(loop_nesting_);
    size_t lambdas_before = P.lambdas.size();
    int slots_before = s->fn->nslots;
    LoopInfo info;
    Node* loop = node(N_LOOP, d);
    info.node = loop;
    for (auto& i : inits) loop->kids.push_back(compile(*i, s, Ctx{}));
    Scope inner{s, s->fn, {}};
    inner.add(Var{name, -1, &info});
    for (auto& v : vars) {
      int slot = new_slot(s);
      loop->slots.push_back(slot);
      inner.add(Var{v, slot, nullptr});
    }
    loop->tail = cx.tail;
    LoopChain chain{&info, cx.loops};
    Node* b = compile_body(body, &inner, Ctx{cx.tail, &chain}, d.line, d.col);
    if (info.nontail && strict_recur) bad(*info.nontail, "recur must be in tail position of its (loop ...)");
    if (info.failed || P.lambdas.size() != lambdas_before) {
      s->fn->nslots = slots_before;  // discard: the closure form is compiled instead
      return nullptr;
    }
    loop->kids.push_back(b);
    return loop;
  }

  // (loop ((v init) ...) body) with (recur e ...) in tail position == a named let whose name is
  // only reachable as `recur`.
  Node* loop_form(const Datum& d, Scope* s, Ctx cx) {
    if (d.items.size() < 3 || d.items[1]->kind != Datum::List)
      bad(d, "bad loop: expected (loop ((VAR INIT) ...) BODY...)");
    std::vector<DatumP> items{sym("let", d), sym("recur", d)};
    items.insert(items.end(), d.items.begin() + 1, d.items.end());
    auto as_let = list(items, d);
    // `recur` is bound as the loop name inside and must be called in tail position; a closure in
    // the body (which could capture the loop variables) makes the loop a recursive closure instead.
    strict_recur_next_ = true;
    return named_let(*as_let, s, cx, &d);
  }

  // (cond clause ...) -> a chain of N_IF / N_OR nodes. The clauses are compiled in order (so
  // inputs keep their first-use numbering) and linked from the last one back: no recursion per
  // clause, so a cond of any length compiles in constant C stack.
  Node* cond(const Datum& d, Scope* s, Ctx cx) {
    struct Clause {
      Node* head;
    };  // an N_IF (kids: test, body) or N_OR (kids: test) to link
    std::vector<Clause> chain;
    Node* rest = nullptr;  // the else clause, if any
    for (size_t i = 1; i < d.items.size(); ++i) {
      const Datum& clause = *d.items[i];
      if (clause.kind != Datum::List || clause.dotted || clause.items.empty())
        bad(clause, "bad cond clause: expected (TEST EXPR...), got " + write_datum(clause));
      if (clause.items[0]->is_sym("else")) {
        if (i + 1 != d.items.size()) bad(clause, "else must be the last cond clause");
        if (clause.items.size() < 2) bad(clause, "empty else clause");
        Node* x = node(N_SEQ, clause);
        for (size_t k = 1; k < clause.items.size(); ++k)
          x->kids.push_back(compile(*clause.items[k], s, k + 1 == clause.items.size() ? cx : Ctx{}));
        rest = x->kids.size() == 1 ? x->kids[0] : x;
        break;
      }
      if (clause.items.size() >= 2 && clause.items[1]->is_sym("=>"))
        bad(clause, "cond clauses with => are not supported");
      if (clause.items.size() == 1) {  // (cond (test) ...) yields the test's value when true
        Node* x = node(N_OR, clause);
        x->kids.push_back(compile(*clause.items[0], s, Ctx{}));
        chain.push_back({x});
        continue;
      }
      Node* x = node(N_IF, clause);
      x->kids.push_back(compile(*clause.items[0], s, Ctx{}));
      Node* body = node(N_SEQ, clause);
      for (size_t k = 1; k < clause.items.size(); ++k)
        body->kids.push_back(compile(*clause.items[k], s, k + 1 == clause.items.size() ? cx : Ctx{}));
      x->kids.push_back(body->kids.size() == 1 ? body->kids[0] : body);
      chain.push_back({x});
    }
    if (!rest) rest = constant(Value::make_unspec(), d.line, d.col);
    for (size_t i = chain.size(); i-- > 0;) {
      chain[i].head->kids.push_back(rest);  // the else branch (N_IF) or the alternative (N_OR)
      rest = chain[i].head;
    }
    return rest;
  }

  Node* case_form(const Datum& d, Scope* s, Ctx cx) {
    if (d.items.size() < 3) bad(d, "bad case: expected (case KEY ((DATUM ...) EXPR...) ... [(else EXPR...)])");
    Scope inner{s, s->fn, {}};
    int slot = new_slot(s);
    inner.add(Var{" case-key", slot, nullptr});
    Node* seq = node(N_SEQ, d);
    Node* bind = node(N_BIND, d);
    bind->b = slot;
    bind->kids.push_back(compile(*d.items[1], s, Ctx{}));
    seq->kids.push_back(bind);
    Node* chain = constant(Value::make_unspec(), d.line, d.col);
    for (size_t i = d.items.size(); i-- > 2;) {
      const Datum& clause = *d.items[i];
      if (clause.kind != Datum::List || clause.items.size() < 2)
        bad(clause, "bad case clause: expected ((DATUM ...) EXPR...)");
      Node* body = node(N_SEQ, clause);
      for (size_t k = 1; k < clause.items.size(); ++k)
        body->kids.push_back(compile(*clause.items[k], &inner, k + 1 == clause.items.size() ? cx : Ctx{}));
      if (clause.items[0]->is_sym("else")) {
        if (i + 1 != d.items.size()) bad(clause, "else must be the last case clause");
        chain = body;
        continue;
      }
      if (clause.items[0]->kind != Datum::List) bad(clause, "bad case clause: the data must be a list");
      Node* test = node(N_PRIMCALL, clause);
      test->a = P_MEMV;
      test->name = "memv";
      Node* key = node(N_LOCAL, clause);
      key->b = slot;
      key->name = "case key";
      test->kids = {key, constant(quote(*clause.items[0]), clause.line, clause.col)};
      Node* x = node(N_IF, clause);
      x->kids = {test, body, chain};
      chain = x;
    }
    seq->kids.push_back(chain);
    return seq;
  }

  // (do ((var init step) ...) (test expr ...) body ...) -> a named let
  Node* do_form(const Datum& d, Scope* s, Ctx cx) {
    if (d.items.size() < 3 || d.items[1]->kind != Datum::List || d.items[2]->kind != Datum::List ||
        d.items[2]->items.empty())
      bad(d, "bad do: expected (do ((VAR INIT [STEP]) ...) (TEST EXPR ...) BODY ...)");
    std::string name = " do" + std::to_string(gensym_++);
    std::vector<DatumP> bindings, steps;
    for (auto& b : d.items[1]->items) {
      if (b->kind != Datum::List || b->items.size() < 2 || b->items.size() > 3 || b->items[0]->kind != Datum::Symbol)
        bad(*b, "bad do binding: expected (VAR INIT [STEP])");
      bindings.push_back(list({b->items[0], b->items[1]}, *b));
      steps.push_back(b->items.size() == 3 ? b->items[2] : b->items[0]);
    }
    const Datum& exit = *d.items[2];
    std::vector<DatumP> result{sym("begin", exit)};
    for (size_t i = 1; i < exit.items.size(); ++i) result.push_back(exit.items[i]);
    if (exit.items.size() == 1) {  // no result expressions: the value is unspecified, (if #f #f)
      auto f = std::make_shared<Datum>();
      f->kind = Datum::Bool;
      f->line = exit.line;
      f->col = exit.col;
      result.push_back(list({sym("if", exit), f, f}, exit));
    }
    std::vector<DatumP> again{sym("begin", d)};
    for (size_t i = 3; i < d.items.size(); ++i) again.push_back(d.items[i]);
    std::vector<DatumP> call{sym(name, d)};
    call.insert(call.end(), steps.begin(), steps.end());
    again.push_back(list(call, d));
    auto body = list({sym("if", d), exit.items[0], list(result, exit), list(again, d)}, d);
    auto as_let = list({sym("let", d), sym(name, d), list(bindings, d), body}, d);
    return named_let(*as_let, s, cx, &d);
  }
};

}  // namespace

namespace {
// `numbered_like`: a program whose input numbering this one takes (see Compiler::number_inputs)
std::shared_ptr<Program> compile(const std::string& source, bool f32, uint64_t max_bytes,
                                 const Program* numbered_like) {
  static std::atomic<uint64_t> next_serial{1};
  auto p = std::make_shared<Program>();
  p->serial = next_serial++;
  p->source = source;
  p->f32 = f32;
  uint64_t used = 0;
  auto forms = read_all(source, max_bytes, &used);
  Compiler c(*p, max_bytes, used);
  if (numbered_like) c.number_inputs(*numbered_like);
  c.compile_toplevel(forms);
  p->linear_params = find_linear_params(*p);
  return p;
}
}  // namespace

std::shared_ptr<Program> compile_program(const std::string& source, bool f32, uint64_t max_bytes) {
  return compile(source, f32, max_bytes, nullptr);
}

const Program* Program::basis() const {
  std::call_once(basis_once, [this] {
    if (linear_params.empty()) return;
    // the source compiled once already (within its memory budget); its basis is about its size
    try {
      std::string text = basis_source(*this, read_all(source));
      if (text.empty()) return;
      // the basis reads this program's Inputs: the same numbering
      std::shared_ptr<Program> b = compile(text, f32, 0, this);
      if (b->params.size() == params.size() && b->inputs == inputs) basis_program = std::move(b);
    } catch (const Error&) {
      // ours, not the program's (the basis reads the same declarations): no projection then
    }
  });
  return basis_program.get();
}

}  // namespace ndvm
