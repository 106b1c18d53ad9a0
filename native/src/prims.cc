// The primitive procedures: one function per line of NDVM_PRIMS (prims.h), named in the line's
// last column; call_prim below is generated from the table. Numeric work is delegated to the VM's
// kernels (kernels.cc, linalg.cc); list and structural primitives are computed here.
#include <cmath>
#include <sstream>

#include "prims.h"
#include "vm.h"

namespace ndvm {

namespace {

[[noreturn]] void err_at(const Node* site, const std::string& msg) {
  eval_error(msg, site ? site->line : 0, site ? site->col : 0);
}

// An index argument: a number, the same in every lane, with an integral value.
int64_t index_arg(VM& vm, const Value& v, const Node* site, const char* what) {
  if (v.tag == T_INT) return v.i;
  if (v.tag != T_NUM || v.rank != 0) vm.type_error(site, what, v);
  if (!v.uniform()) err_at(site, std::string("'") + site->name + "': " + what + " must be the same in every lane");
  double x = vm.data(v)[0];
  if (x != std::floor(x) || !std::isfinite(x) || std::fabs(x) > 9e18)
    err_at(site, std::string("'") + site->name + "': " + what + " must be an integer");
  return static_cast<int64_t>(x);
}

const Pair* pair_of(VM& vm, const Value& v, const Node* site) {
  if (v.tag != T_PAIR) vm.type_error(site, "a pair", v);
  return static_cast<const Pair*>(v.ptr);
}

// Collects a proper list into `out`; a type error otherwise.
void list_items(VM& vm, Value l, std::vector<Value>& out, const Node* site) {
  Value cur = l;
  const size_t max_items = vm.limits().max_bytes / sizeof(Value);  // the copy counts against the budget
  const size_t before = out.size();
  while (cur.tag == T_PAIR) {
    const Pair* p = static_cast<const Pair*>(cur.ptr);
    out.push_back(p->car);
    cur = p->cdr;
    if (out.size() > max_items)
      limit_error("memory budget (max_bytes=" + std::to_string(vm.limits().max_bytes >> 20) +
                      " MiB per evaluation) exceeded: a list of more than " + std::to_string(max_items) + " elements",
                  site ? site->line : 0, site ? site->col : 0);
  }
  vm.charge(out.size() - before, site);  // a traversal is work: (length l) in a loop over a long list
  if (cur.tag != T_NIL) vm.type_error(site, "a proper list", l);
}

Value list_from(VM& vm, const Value* items, size_t n, Value tail) {
  Value r = tail;
  for (size_t i = n; i-- > 0;) r = vm.cons(items[i], r);
  return r;
}

void check_num(VM& vm, const Value& v, const Node* site) {
  if (v.tag != T_NUM && v.tag != T_INT) vm.type_error(site, "a number", v);
}

Value cxr_path(VM& vm, Value v, const char* path, size_t n, const Node* site) {
  // path is applied right to left, as in the name: cadr = car of cdr
  for (size_t i = n; i-- > 0;) {
    const Pair* p = pair_of(vm, v, site);
    v = path[i] == 'a' ? p->car : p->cdr;
  }
  return v;
}

// The functions of the table's fn column, in a namespace of their own (their short names would
// clash with the VM's members in call_prim).
namespace prim {

// Every primitive's function has this signature: the VM; the primitive's id (a function that
// several lines name tells them apart by it); its n arguments a[0..n), already checked against the
// table's arity (and made inexact for REAL primitives); the call site, which names the primitive in
// errors. A function need not use them all. Each is inlined into its case of call_prim, where its
// id is a constant, as when the cases were written there by hand.
#define NDVM_PRIM_FN(fn)                                                                                              \
  [[gnu::always_inline]] inline Value fn([[maybe_unused]] VM& vm, [[maybe_unused]] int id, [[maybe_unused]] Value* a, \
                                         [[maybe_unused]] int n, [[maybe_unused]] const Node* site)

// ---- arithmetic ----
NDVM_PRIM_FN(add_mul) {
  if (n == 0) return Value::make_int(id == P_ADD ? 0 : 1);
  check_num(vm, a[0], site);
  Value acc = a[0];
  for (int i = 1; i < n; ++i) acc = vm.binary(id == P_ADD ? O_ADD : O_MUL, acc, a[i], site);
  return acc;
}
NDVM_PRIM_FN(sub_div) {
  if (n == 1) {
    if (id == P_SUB) return vm.unary(O_NEG, a[0], site);
    return vm.binary(O_DIV, Value::make_int(1), a[0], site);
  }
  Value acc = a[0];
  for (int i = 1; i < n; ++i) acc = vm.binary(id == P_SUB ? O_SUB : O_DIV, acc, a[i], site);
  return acc;
}
NDVM_PRIM_FN(min_max) {
  check_num(vm, a[0], site);
  Value acc = a[0];
  for (int i = 1; i < n; ++i) acc = vm.binary(id == P_MIN ? O_MIN : O_MAX, acc, a[i], site);
  return acc;
}
// (clamp x lo hi) = (min (max x lo) hi), elementwise and broadcasting as numpy.clip: hi wins
// where lo > hi. Two tape ops, so its gradient, replay and lanes come with them.
NDVM_PRIM_FN(clamp) { return vm.binary(O_MIN, vm.binary(O_MAX, a[0], a[1], site), a[2], site); }
NDVM_PRIM_FN(compare) { return vm.compare(id, a, n, site); }
// An elementwise unary primitive computed by one tape op.
template <Op op>
NDVM_PRIM_FN(unary) {
  return vm.unary(op, a[0], site);
}
NDVM_PRIM_FN(rounding) { return vm.rounding(id, a[0], site); }
NDVM_PRIM_FN(log) {
  if (n == 2) return vm.binary(O_DIV, vm.unary(O_LOG, a[0], site), vm.unary(O_LOG, a[1], site), site);
  return vm.unary(O_LOG, a[0], site);
}
NDVM_PRIM_FN(atan) { return n == 2 ? vm.binary(O_ATAN2, a[0], a[1], site) : vm.unary(O_ATAN, a[0], site); }
NDVM_PRIM_FN(expt) { return vm.binary(O_POW, a[0], a[1], site); }
NDVM_PRIM_FN(int_div) { return vm.int_div(id, a[0], a[1], site); }
NDVM_PRIM_FN(inexact) {
  check_num(vm, a[0], site);
  return vm.promote(a[0]);
}
NDVM_PRIM_FN(exact) {
  check_num(vm, a[0], site);
  if (a[0].tag == T_INT) return a[0];
  if (a[0].rank != 0 || !a[0].uniform()) err_at(site, "'exact' needs a number that is the same in every lane");
  double x = vm.data(a[0])[0];
  if (x != std::floor(x) || std::fabs(x) > 9.2e18)
    err_at(site, "'exact': " + std::to_string(x) + " is not an integer (the language has no exact rationals)");
  return Value::make_int(static_cast<int64_t>(x));
}

// ---- predicates ----
NDVM_PRIM_FN(num_pred) { return vm.num_pred(id, a[0], site); }
NDVM_PRIM_FN(numberp) { return Value::make_bool(a[0].tag == T_INT || (a[0].tag == T_NUM && a[0].rank == 0)); }
NDVM_PRIM_FN(exactp) {
  check_num(vm, a[0], site);
  return Value::make_bool(a[0].tag == T_INT);
}
NDVM_PRIM_FN(inexactp) {
  check_num(vm, a[0], site);
  return Value::make_bool(a[0].tag == T_NUM);
}
NDVM_PRIM_FN(booleanp) { return Value::make_bool(a[0].tag == T_BOOL); }
NDVM_PRIM_FN(symbolp) { return Value::make_bool(a[0].tag == T_SYM); }
NDVM_PRIM_FN(procedurep) { return Value::make_bool(a[0].tag == T_CLOSURE || a[0].tag == T_PRIM); }
NDVM_PRIM_FN(nullp) { return Value::make_bool(a[0].tag == T_NIL); }
NDVM_PRIM_FN(pairp) { return Value::make_bool(a[0].tag == T_PAIR); }
NDVM_PRIM_FN(listp) {
  Value cur = a[0];
  uint64_t len = 0;
  while (cur.tag == T_PAIR) {
    cur = static_cast<const Pair*>(cur.ptr)->cdr;
    ++len;
  }
  vm.charge(len, site);
  return Value::make_bool(cur.tag == T_NIL);
}
NDVM_PRIM_FN(not_) { return Value::make_bool(!a[0].truthy()); }
NDVM_PRIM_FN(eq) {  // eq? eqv? equal?
  uint8_t* m = vm.lane_mask_buf(vm.lane_count());
  std::memset(m, 1, vm.lane_count());
  vm.eqv_into(a[0], a[1], m, id == P_EQUALP, site);
  return vm.lanes_to_bool(m);
}

// ---- pairs and lists ----
NDVM_PRIM_FN(cons) { return vm.cons(a[0], a[1]); }
NDVM_PRIM_FN(car) { return pair_of(vm, a[0], site)->car; }
NDVM_PRIM_FN(cdr) { return pair_of(vm, a[0], site)->cdr; }
// caar ... cadddr: the path is the name's letters between c and r
NDVM_PRIM_FN(cxr) {
  const char* name = kPrims[id].name;
  return cxr_path(vm, a[0], name + 1, std::strlen(name) - 2, site);
}
NDVM_PRIM_FN(list) { return list_from(vm, a, n, Value::make_nil()); }
NDVM_PRIM_FN(length) {  // counted in place: a copy of the items would only be thrown away
  Value cur = a[0];
  uint64_t len = 0;
  while (cur.tag == T_PAIR) {
    cur = static_cast<const Pair*>(cur.ptr)->cdr;
    ++len;
  }
  vm.charge(len, site);  // a traversal is work, as in list_items
  if (cur.tag != T_NIL) vm.type_error(site, "a proper list", a[0]);
  return Value::make_int(static_cast<int64_t>(len));
}
NDVM_PRIM_FN(list_ref_tail) {
  int64_t k = index_arg(vm, a[1], site, "an index");
  if (k < 0) err_at(site, "'" + site->name + "': negative index " + std::to_string(k));
  vm.charge(static_cast<uint64_t>(k), site);
  Value cur = a[0];
  for (int64_t i = 0; i < k; ++i) {
    if (cur.tag != T_PAIR) err_at(site, "'" + site->name + "': index " + std::to_string(k) + " out of range");
    cur = static_cast<const Pair*>(cur.ptr)->cdr;
  }
  if (id == P_LIST_TAIL) return cur;
  if (cur.tag != T_PAIR) err_at(site, "'list-ref': index " + std::to_string(k) + " out of range");
  return static_cast<const Pair*>(cur.ptr)->car;
}
NDVM_PRIM_FN(append) {
  if (n == 0) return Value::make_nil();
  Value r = a[n - 1];
  for (int i = n - 1; i-- > 0;) {
    std::vector<Value> items;
    list_items(vm, a[i], items, site);
    r = list_from(vm, items.data(), items.size(), r);
  }
  return r;
}
NDVM_PRIM_FN(reverse) {
  std::vector<Value> items;
  list_items(vm, a[0], items, site);
  Value r = Value::make_nil();
  for (auto& v : items) r = vm.cons(v, r);
  return r;
}
NDVM_PRIM_FN(map) {  // map for-each
  int nl = n - 1;
  std::vector<std::vector<Value>> lists(nl);
  size_t len = SIZE_MAX;
  for (int i = 0; i < nl; ++i) {
    list_items(vm, a[i + 1], lists[i], site);
    len = std::min(len, lists[i].size());
  }
  Value f = a[0];
  std::vector<Value> out(len), args(nl);
  for (size_t k = 0; k < len; ++k) {
    for (int i = 0; i < nl; ++i) args[i] = lists[i][k];
    out[k] = vm.apply(f, args.data(), nl, site);
  }
  if (id == P_FOR_EACH) return Value::make_unspec();
  return list_from(vm, out.data(), out.size(), Value::make_nil());
}
NDVM_PRIM_FN(filter) {
  std::vector<Value> items, keep;
  list_items(vm, a[1], items, site);
  for (auto& v : items)
    if (vm.apply(a[0], &v, 1, site).truthy()) keep.push_back(v);
  return list_from(vm, keep.data(), keep.size(), Value::make_nil());
}
NDVM_PRIM_FN(fold) {  // fold-left fold-right reduce
  std::vector<Value> items;
  list_items(vm, a[2], items, site);
  Value acc = a[1];
  if (id == P_REDUCE) {  // SRFI 1: (reduce f ridentity list) = (f e_n ... (f e_2 e_1))
    if (items.empty()) return acc;
    acc = items[0];
    for (size_t i = 1; i < items.size(); ++i) {
      Value args[2] = {items[i], acc};
      acc = vm.apply(a[0], args, 2, site);
    }
    return acc;
  }
  if (id == P_FOLD_LEFT) {
    for (auto& v : items) {
      Value args[2] = {acc, v};
      acc = vm.apply(a[0], args, 2, site);
    }
  } else {
    for (size_t i = items.size(); i-- > 0;) {
      Value args[2] = {items[i], acc};
      acc = vm.apply(a[0], args, 2, site);
    }
  }
  return acc;
}
NDVM_PRIM_FN(apply) {
  std::vector<Value> args(a + 1, a + n - 1);
  if (n >= 2) list_items(vm, a[n - 1], args, site);
  return vm.apply(a[0], args.data(), static_cast<int>(args.size()), site);
}
NDVM_PRIM_FN(assoc_member) {  // assq assv assoc memq memv member
  bool assoc = id == P_ASSQ || id == P_ASSV || id == P_ASSOC;
  bool deep = id == P_ASSOC || id == P_MEMBER;
  Value cur = a[1];
  {  // the traversal is work (charged whole, before it: a miss walks the list anyway)
    uint64_t len = 0;
    for (Value c = cur; c.tag == T_PAIR; c = static_cast<const Pair*>(c.ptr)->cdr) ++len;
    vm.charge(len, site);
  }
  uint8_t* m = vm.lane_mask_buf(vm.lane_count());
  if (a[0].tag == T_SYM || a[0].tag == T_BOOL || a[0].tag == T_INT || a[0].tag == T_NIL) {
    // a key that is the same in every lane (symbols, booleans, integers): compare directly
    while (cur.tag == T_PAIR) {
      const Pair* p = static_cast<const Pair*>(cur.ptr);
      Value key = assoc ? pair_of(vm, p->car, site)->car : p->car;
      if (key.tag == a[0].tag && key.i == a[0].i) return assoc ? p->car : cur;
      cur = p->cdr;
    }
    if (cur.tag != T_NIL) vm.type_error(site, "a proper list", a[1]);
    return Value::make_bool(false);
  }
  while (cur.tag == T_PAIR) {
    const Pair* p = static_cast<const Pair*>(cur.ptr);
    Value key = p->car;
    if (assoc) key = pair_of(vm, p->car, site)->car;
    std::memset(m, 1, vm.lane_count());
    vm.eqv_into(a[0], key, m, deep, site);
    if (vm.lanes_to_bool(m).i) return assoc ? p->car : cur;
    cur = p->cdr;
  }
  if (cur.tag != T_NIL) vm.type_error(site, "a proper list", a[1]);
  return Value::make_bool(false);
}
NDVM_PRIM_FN(error) {
  std::ostringstream o;
  o << "error:";
  for (int i = 0; i < n; ++i) {
    o << ' ';
    if (a[i].tag == T_SYM) o << vm.program().symbols[a[i].i];
    else if (a[i].tag == T_INT) o << a[i].i;
    else if (a[i].tag == T_NUM && a[i].rank == 0 && a[i].uniform()) o << vm.data(a[i])[0];
    else o << vm.describe(a[i]);
  }
  err_at(site, o.str());
}

// ---- vectors and matrices ----
NDVM_PRIM_FN(vec) {
  for (int i = 0; i < n; ++i) {
    a[i] = vm.promote(a[i]);
    if (a[i].tag != T_NUM || a[i].rank != 0) vm.type_error(site, "numbers", a[i]);
  }
  return vm.concat(a, n, 1, static_cast<uint32_t>(n), 1);
}
NDVM_PRIM_FN(list_to_vec) {
  std::vector<Value> items;
  list_items(vm, a[0], items, site);
  if (items.empty()) err_at(site, "'list->vec': empty list");
  for (auto& v : items) {
    v = vm.promote(v);
    if (v.tag != T_NUM || v.rank != 0) vm.type_error(site, "a list of numbers", v);
  }
  return vm.concat(items.data(), static_cast<int>(items.size()), 1, static_cast<uint32_t>(items.size()), 1);
}
NDVM_PRIM_FN(mat) {
  std::vector<Value> rows;
  uint32_t cols = 0;
  for (int i = 0; i < n; ++i) {
    Value r = a[i];
    if (r.tag == T_PAIR) {
      std::vector<Value> items;
      list_items(vm, r, items, site);
      for (auto& v : items) {
        v = vm.promote(v);
        if (v.tag != T_NUM || v.rank != 0) vm.type_error(site, "rows of numbers", v);
      }
      r = vm.concat(items.data(), static_cast<int>(items.size()), 1, static_cast<uint32_t>(items.size()), 1);
    }
    if (r.tag != T_NUM || r.rank != 1) vm.type_error(site, "rows given as vectors or lists", a[i]);
    if (i == 0) cols = r.rows;
    else if (r.rows != cols)
      err_at(site, "'mat': row " + std::to_string(i) + " has " + std::to_string(r.rows) + " elements, row 0 has " +
                       std::to_string(cols));
    rows.push_back(r);
  }
  return vm.concat(rows.data(), n, 2, static_cast<uint32_t>(n), cols);
}
NDVM_PRIM_FN(ref) {
  const Value& v = a[0];  // by reference: a fresh argument slot is read field by field
  if (v.tag != T_NUM || v.rank == 0) vm.type_error(site, "a vector or matrix", v);
  int64_t i = index_arg(vm, a[1], site, "an index");
  if (i < 0 || i >= v.rows) err_at(site, "'ref': index " + std::to_string(i) + " out of range for " + vm.describe(v));
  if (n == 3) {
    if (v.rank != 2) err_at(site, "'ref' with two indices needs a matrix, got " + vm.describe(v));
    int64_t j = index_arg(vm, a[2], site, "an index");
    if (j < 0 || j >= v.n.cols)
      err_at(site, "'ref': column " + std::to_string(j) + " out of range for " + vm.describe(v));
    return vm.slice(v, static_cast<uint32_t>(i * v.n.cols + j), 0, 1, 1);
  }
  if (v.rank == 1) return vm.slice(v, static_cast<uint32_t>(i), 0, 1, 1);
  return vm.slice(v, static_cast<uint32_t>(i * v.n.cols), 1, v.n.cols, 1);
}
NDVM_PRIM_FN(vec_to_list) {
  Value v = a[0];
  if (v.tag != T_NUM || v.rank != 1) vm.type_error(site, "a vector", v);
  // a pair, a temporary Value and a scalar per element: refused before the temporary is made
  const uint64_t need =
      static_cast<uint64_t>(v.rows) * vm.lanes_of(v) * (sizeof(Pair) + sizeof(Value) + sizeof(double));
  if (vm.bytes_in_use() + need > vm.limits().max_bytes) vm.memory_error(site, need);
  std::vector<Value> items(v.rows);
  for (uint32_t i = 0; i < v.rows; ++i) {
    if ((i & 4095) == 0) vm.poll_clock(site);  // 10^7 elements take seconds: max_seconds stops them
    items[i] = vm.slice(v, i, 0, 1, 1);
  }
  Value list = Value::make_nil();  // list_from, polling the clock: the first use of the heap is slow
  for (size_t i = items.size(); i-- > 0;) {
    if ((i & 4095) == 0) vm.poll_clock(site);
    list = vm.cons(items[i], list);
  }
  return list;
}
NDVM_PRIM_FN(dot) {
  if (a[0].tag != T_NUM || a[0].rank != 1) vm.type_error(site, "a vector", a[0]);
  if (a[1].tag != T_NUM || a[1].rank != 1) vm.type_error(site, "a vector", a[1]);
  if (a[0].rows != a[1].rows)
    err_at(site, "'dot': lengths differ (" + std::to_string(a[0].rows) + " and " + std::to_string(a[1].rows) + ")");
  return vm.gemm(a[0], a[1], 1, a[0].rows, 1, 0, 1, 1);
}
NDVM_PRIM_FN(outer) {
  if (a[0].tag != T_NUM || a[0].rank != 1) vm.type_error(site, "a vector", a[0]);
  if (a[1].tag != T_NUM || a[1].rank != 1) vm.type_error(site, "a vector", a[1]);
  return vm.gemm(a[0], a[1], a[0].rows, 1, a[1].rows, 2, a[0].rows, a[1].rows);
}
NDVM_PRIM_FN(matmul) {  // matvec matmul
  const Value &A = a[0], &B = a[1];
  if (A.tag != T_NUM || A.rank != 2) vm.type_error(site, "a matrix", A);
  if (B.tag != T_NUM || B.rank == 0 || (id == P_MATVEC && B.rank != 1))
    vm.type_error(site, id == P_MATVEC ? "a vector" : "a matrix or vector", B);
  if (A.n.cols != B.rows)
    err_at(site, "'" + site->name + "': shape mismatch, " + vm.describe(A) + " times " + vm.describe(B));
  if (B.rank == 1) return vm.gemm(A, B, A.rows, A.n.cols, 1, 1, A.rows, 1);
  return vm.gemm(A, B, A.rows, A.n.cols, B.n.cols, 2, A.rows, B.n.cols);
}
NDVM_PRIM_FN(transpose) {
  if (a[0].tag != T_NUM || a[0].rank == 0) vm.type_error(site, "a matrix", a[0]);
  if (a[0].rank == 1) return a[0];
  return vm.transpose(a[0]);
}
NDVM_PRIM_FN(square_matrix) {  // trace det logdet inv cholesky
  const Value& A = a[0];
  if (A.tag != T_NUM || A.rank != 2) vm.type_error(site, "a square matrix", A);
  if (A.rows != A.n.cols) err_at(site, "'" + site->name + "': needs a square matrix, got " + vm.describe(A));
  if (id == P_TRACE) return vm.reduce(O_TRACE, A);
  if (id == P_DET) return vm.reduce(O_DET, A);
  if (id == P_LOGDET) return vm.reduce(O_LOGDET, A);
  if (id == P_INV) return vm.inv(A, site);
  return vm.cholesky(A, site);
}
NDVM_PRIM_FN(solve) {
  const Value &A = a[0], &B = a[1];
  if (A.tag != T_NUM || A.rank != 2 || A.rows != A.n.cols) vm.type_error(site, "a square matrix", A);
  if (B.tag != T_NUM || B.rank == 0) vm.type_error(site, "a vector or matrix", B);
  if (B.rows != A.rows) err_at(site, "'solve': shape mismatch, " + vm.describe(A) + " and " + vm.describe(B));
  return vm.solve(A, B, site);
}
NDVM_PRIM_FN(sum_norm) {  // vsum norm
  if (a[0].tag != T_NUM) vm.type_error(site, "a vector or matrix", a[0]);
  return vm.reduce(id == P_VSUM ? O_VSUM : O_NORM, a[0]);
}
NDVM_PRIM_FN(filled) {  // eye zeros ones
  int64_t r = index_arg(vm, a[0], site, "a size");
  int64_t c = n == 2 ? index_arg(vm, a[1], site, "a size") : (id == P_EYE ? r : 1);
  if (r <= 0 || c <= 0) err_at(site, "'" + site->name + "': sizes must be positive");
  // in 64 bits and checked: r * c * 8 can overflow even 64 bits, and a dimension past 32 bits
  // would be truncated by the cast below
  uint64_t bytes;
  bool huge = r > UINT32_MAX || c > UINT32_MAX ||
              __builtin_mul_overflow(static_cast<uint64_t>(r), static_cast<uint64_t>(c), &bytes) ||
              __builtin_mul_overflow(bytes, uint64_t(sizeof(double)), &bytes);
  const uint64_t max_bytes = vm.limits().max_bytes;
  if (huge || bytes > max_bytes)
    limit_error("memory budget (max_bytes=" + std::to_string(max_bytes >> 20) + " MiB per evaluation) exceeded: '" +
                    site->name + "' of a " + std::to_string(r) + "x" + std::to_string(c) + " array needs " +
                    (huge ? std::string("more than 2^64 bytes or a dimension past 2^32")
                          : std::to_string(bytes >> 20) + " MiB") +
                    "; raise Limits.max_bytes if the program really needs more",
                site->line, site->col);
  int rank = (id == P_EYE || n == 2) ? 2 : 1;
  Value v = vm.alloc_num(rank, static_cast<uint32_t>(r), static_cast<uint32_t>(c), true);
  double* p = vm.data(v);
  uint32_t ne = v.numel();
  for (uint32_t i = 0; i < ne; ++i) p[i] = id == P_ONES ? 1.0 : 0.0;
  if (id == P_EYE)
    for (int64_t i = 0; i < r; ++i) p[i * c + i] = 1.0;
  return v;
}
NDVM_PRIM_FN(shape) {  // rows cols size
  if (a[0].tag != T_NUM) vm.type_error(site, "a vector or matrix", a[0]);
  if (a[0].rank == 0) vm.type_error(site, "a vector or matrix", a[0]);
  uint32_t x = id == P_ROWS ? a[0].rows : id == P_COLS ? a[0].cols() : a[0].numel();
  return Value::make_int(x);
}

#undef NDVM_PRIM_FN

}  // namespace prim
}  // namespace

// One case per line of the table: REAL primitives see exact integers as inexact numbers (the tag
// alone is tested: no wide reload of a fresh argument slot), then the line's function computes it.
Value VM::call_prim(int id, Value* a, int n, const Node* site) {
  op_site = site;  // names the primitive in a memory or work error raised by a kernel below
  switch (id) {
#define NDVM_PRIM_CASE(pid, name, lo, hi, kind, flags, fn) \
  case P_##pid:                                            \
    if constexpr (kPrims[P_##pid].has(primflag::REAL))     \
      for (int i = 0; i < n; ++i)                          \
        if (a[i].tag == T_INT) a[i] = promote(a[i]);       \
    return prim::fn(*this, id, a, n, site);
    NDVM_PRIMS(NDVM_PRIM_CASE)
#undef NDVM_PRIM_CASE
  }
  err_at(site, "internal error: unknown primitive");
}

}  // namespace ndvm
