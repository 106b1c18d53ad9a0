// The primitive procedures: one switch over PrimId. Numeric work is delegated to kernels.cc;
// list and structural primitives are here.
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

Value cxr(VM& vm, Value v, const char* path, const Node* site) {
  // path is applied right to left, as in the name: cadr = car of cdr
  size_t n = std::strlen(path);
  for (size_t i = n; i-- > 0;) {
    const Pair* p = pair_of(vm, v, site);
    v = path[i] == 'a' ? p->car : p->cdr;
  }
  return v;
}

}  // namespace

Value VM::call_prim(int id, Value* a, int n, const Node* site) {
  op_site = site;  // names the primitive in a memory or work error raised by a kernel below
  switch (id) {    // array and transcendental primitives see exact integers as inexact numbers
    case P_DOT:
    case P_OUTER:
    case P_MATVEC:
    case P_MATMUL:
    case P_TRANSPOSE:
    case P_TRACE:
    case P_VSUM:
    case P_NORM:
    case P_INV:
    case P_SOLVE:
    case P_DET:
    case P_LOGDET:
    case P_CHOLESKY:
    case P_VEC_TO_LIST:
      for (int i = 0; i < n; ++i)
        if (a[i].tag == T_INT) a[i] = promote(a[i]);  // test the tag alone: no wide reload of a fresh slot
      break;
    default: break;
  }
  switch (id) {
    // ---- arithmetic ----
    case P_ADD:
    case P_MUL: {
      if (n == 0) return Value::make_int(id == P_ADD ? 0 : 1);
      check_num(*this, a[0], site);
      Value acc = a[0];
      for (int i = 1; i < n; ++i) acc = binary(id == P_ADD ? O_ADD : O_MUL, acc, a[i], site);
      return acc;
    }
    case P_SUB:
    case P_DIV: {
      if (n == 1) {
        if (id == P_SUB) return unary(O_NEG, a[0], site);
        return binary(O_DIV, Value::make_int(1), a[0], site);
      }
      Value acc = a[0];
      for (int i = 1; i < n; ++i) acc = binary(id == P_SUB ? O_SUB : O_DIV, acc, a[i], site);
      return acc;
    }
    case P_MIN:
    case P_MAX: {
      check_num(*this, a[0], site);
      Value acc = a[0];
      for (int i = 1; i < n; ++i) acc = binary(id == P_MIN ? O_MIN : O_MAX, acc, a[i], site);
      return acc;
    }
    case P_NUM_EQ:
    case P_LT:
    case P_GT:
    case P_LE:
    case P_GE: return compare(id, a, n, site);
    case P_ABS: return unary(O_ABS, a[0], site);
    case P_FLOOR:
    case P_CEILING:
    case P_ROUND:
    case P_TRUNCATE: return rounding(id, a[0], site);
    case P_EXP: return unary(O_EXP, a[0], site);
    case P_LOG:
      if (n == 2) return binary(O_DIV, unary(O_LOG, a[0], site), unary(O_LOG, a[1], site), site);
      return unary(O_LOG, a[0], site);
    case P_SQRT: return unary(O_SQRT, a[0], site);
    case P_SIN: return unary(O_SIN, a[0], site);
    case P_COS: return unary(O_COS, a[0], site);
    case P_TAN: return unary(O_TAN, a[0], site);
    case P_ASIN: return unary(O_ASIN, a[0], site);
    case P_ACOS: return unary(O_ACOS, a[0], site);
    case P_ATAN: return n == 2 ? binary(O_ATAN2, a[0], a[1], site) : unary(O_ATAN, a[0], site);
    case P_TANH: return unary(O_TANH, a[0], site);
    case P_SQUARE: return unary(O_SQUARE, a[0], site);
    case P_SIGMOID:
    case P_LOGISTIC: return unary(O_SIGMOID, a[0], site);
    case P_SOFTPLUS: return unary(O_SOFTPLUS, a[0], site);
    case P_EXPT: return binary(O_POW, a[0], a[1], site);
    case P_QUOTIENT:
    case P_REMAINDER:
    case P_MODULO: return int_div(id, a[0], a[1], site);
    case P_EXACT_TO_INEXACT:
    case P_INEXACT: check_num(*this, a[0], site); return promote(a[0]);
    case P_INEXACT_TO_EXACT:
    case P_EXACT: {
      check_num(*this, a[0], site);
      if (a[0].tag == T_INT) return a[0];
      if (a[0].rank != 0 || !a[0].uniform()) err_at(site, "'exact' needs a number that is the same in every lane");
      double x = pay[a[0].n.off];
      if (x != std::floor(x) || std::fabs(x) > 9.2e18)
        err_at(site, "'exact': " + std::to_string(x) + " is not an integer (the language has no exact rationals)");
      return Value::make_int(static_cast<int64_t>(x));
    }
    // ---- predicates ----
    case P_ZEROP:
    case P_POSITIVEP:
    case P_NEGATIVEP:
    case P_EVENP:
    case P_ODDP:
    case P_INTEGERP: return num_pred(id, a[0], site);
    case P_NUMBERP: return Value::make_bool(a[0].tag == T_INT || (a[0].tag == T_NUM && a[0].rank == 0));
    case P_EXACTP: check_num(*this, a[0], site); return Value::make_bool(a[0].tag == T_INT);
    case P_INEXACTP: check_num(*this, a[0], site); return Value::make_bool(a[0].tag == T_NUM);
    case P_BOOLEANP: return Value::make_bool(a[0].tag == T_BOOL);
    case P_SYMBOLP: return Value::make_bool(a[0].tag == T_SYM);
    case P_PROCEDUREP: return Value::make_bool(a[0].tag == T_CLOSURE || a[0].tag == T_PRIM);
    case P_NULLP: return Value::make_bool(a[0].tag == T_NIL);
    case P_PAIRP: return Value::make_bool(a[0].tag == T_PAIR);
    case P_LISTP: {
      Value cur = a[0];
      uint64_t len = 0;
      while (cur.tag == T_PAIR) {
        cur = static_cast<const Pair*>(cur.ptr)->cdr;
        ++len;
      }
      charge(len, site);
      return Value::make_bool(cur.tag == T_NIL);
    }
    case P_NOT: return Value::make_bool(!a[0].truthy());
    case P_EQP:
    case P_EQVP:
    case P_EQUALP: {
      uint8_t* m = lane_mask_buf(L);
      std::memset(m, 1, L);
      eqv_into(a[0], a[1], m, id == P_EQUALP, site);
      return lanes_to_bool(m);
    }
    // ---- pairs and lists ----
    case P_CONS: return cons(a[0], a[1]);
    case P_CAR: return pair_of(*this, a[0], site)->car;
    case P_CDR: return pair_of(*this, a[0], site)->cdr;
    case P_CAAR: return cxr(*this, a[0], "aa", site);
    case P_CADR: return cxr(*this, a[0], "ad", site);
    case P_CDAR: return cxr(*this, a[0], "da", site);
    case P_CDDR: return cxr(*this, a[0], "dd", site);
    case P_CADDR: return cxr(*this, a[0], "add", site);
    case P_CDDDR: return cxr(*this, a[0], "ddd", site);
    case P_CADDDR: return cxr(*this, a[0], "addd", site);
    case P_LIST: return list_from(*this, a, n, Value::make_nil());
    case P_LENGTH: {
      std::vector<Value> items;
      list_items(*this, a[0], items, site);
      return Value::make_int(static_cast<int64_t>(items.size()));
    }
    case P_LIST_REF:
    case P_LIST_TAIL: {
      int64_t k = index_arg(*this, a[1], site, "an index");
      if (k < 0) err_at(site, "'" + site->name + "': negative index " + std::to_string(k));
      charge(static_cast<uint64_t>(k), site);
      Value cur = a[0];
      for (int64_t i = 0; i < k; ++i) {
        if (cur.tag != T_PAIR) err_at(site, "'" + site->name + "': index " + std::to_string(k) + " out of range");
        cur = static_cast<const Pair*>(cur.ptr)->cdr;
      }
      if (id == P_LIST_TAIL) return cur;
      if (cur.tag != T_PAIR) err_at(site, "'list-ref': index " + std::to_string(k) + " out of range");
      return static_cast<const Pair*>(cur.ptr)->car;
    }
    case P_APPEND: {
      if (n == 0) return Value::make_nil();
      Value r = a[n - 1];
      for (int i = n - 1; i-- > 0;) {
        std::vector<Value> items;
        list_items(*this, a[i], items, site);
        r = list_from(*this, items.data(), items.size(), r);
      }
      return r;
    }
    case P_REVERSE: {
      std::vector<Value> items;
      list_items(*this, a[0], items, site);
      Value r = Value::make_nil();
      for (auto& v : items) r = cons(v, r);
      return r;
    }
    case P_MAP:
    case P_FOR_EACH: {
      int nl = n - 1;
      std::vector<std::vector<Value>> lists(nl);
      size_t len = SIZE_MAX;
      for (int i = 0; i < nl; ++i) {
        list_items(*this, a[i + 1], lists[i], site);
        len = std::min(len, lists[i].size());
      }
      Value f = a[0];
      std::vector<Value> out(len), args(nl);
      for (size_t k = 0; k < len; ++k) {
        for (int i = 0; i < nl; ++i) args[i] = lists[i][k];
        out[k] = apply(f, args.data(), nl, site);
      }
      if (id == P_FOR_EACH) return Value::make_unspec();
      return list_from(*this, out.data(), out.size(), Value::make_nil());
    }
    case P_FILTER: {
      std::vector<Value> items, keep;
      list_items(*this, a[1], items, site);
      for (auto& v : items)
        if (apply(a[0], &v, 1, site).truthy()) keep.push_back(v);
      return list_from(*this, keep.data(), keep.size(), Value::make_nil());
    }
    case P_FOLD_LEFT:
    case P_FOLD_RIGHT:
    case P_REDUCE: {
      std::vector<Value> items;
      list_items(*this, a[2], items, site);
      Value acc = a[1];
      if (id == P_REDUCE) {  // SRFI 1: (reduce f ridentity list) = (f e_n ... (f e_2 e_1))
        if (items.empty()) return acc;
        acc = items[0];
        for (size_t i = 1; i < items.size(); ++i) {
          Value args[2] = {items[i], acc};
          acc = apply(a[0], args, 2, site);
        }
        return acc;
      }
      if (id == P_FOLD_LEFT) {
        for (auto& v : items) {
          Value args[2] = {acc, v};
          acc = apply(a[0], args, 2, site);
        }
      } else {
        for (size_t i = items.size(); i-- > 0;) {
          Value args[2] = {items[i], acc};
          acc = apply(a[0], args, 2, site);
        }
      }
      return acc;
    }
    case P_APPLY: {
      std::vector<Value> args(a + 1, a + n - 1);
      if (n >= 2) list_items(*this, a[n - 1], args, site);
      return apply(a[0], args.data(), static_cast<int>(args.size()), site);
    }
    case P_ASSQ:
    case P_ASSV:
    case P_ASSOC:
    case P_MEMQ:
    case P_MEMV:
    case P_MEMBER: {
      bool assoc = id == P_ASSQ || id == P_ASSV || id == P_ASSOC;
      bool deep = id == P_ASSOC || id == P_MEMBER;
      Value cur = a[1];
      {  // the traversal is work (charged whole, before it: a miss walks the list anyway)
        uint64_t len = 0;
        for (Value c = cur; c.tag == T_PAIR; c = static_cast<const Pair*>(c.ptr)->cdr) ++len;
        charge(len, site);
      }
      uint8_t* m = lane_mask_buf(L);
      if (a[0].tag == T_SYM || a[0].tag == T_BOOL || a[0].tag == T_INT || a[0].tag == T_NIL) {
        // a key that is the same in every lane (symbols, booleans, integers): compare directly
        while (cur.tag == T_PAIR) {
          const Pair* p = static_cast<const Pair*>(cur.ptr);
          Value key = assoc ? pair_of(*this, p->car, site)->car : p->car;
          if (key.tag == a[0].tag && key.i == a[0].i) return assoc ? p->car : cur;
          cur = p->cdr;
        }
        if (cur.tag != T_NIL) type_error(site, "a proper list", a[1]);
        return Value::make_bool(false);
      }
      while (cur.tag == T_PAIR) {
        const Pair* p = static_cast<const Pair*>(cur.ptr);
        Value key = p->car;
        if (assoc) key = pair_of(*this, p->car, site)->car;
        std::memset(m, 1, L);
        eqv_into(a[0], key, m, deep, site);
        if (lanes_to_bool(m).i) return assoc ? p->car : cur;
        cur = p->cdr;
      }
      if (cur.tag != T_NIL) type_error(site, "a proper list", a[1]);
      return Value::make_bool(false);
    }
    case P_ERROR: {
      std::ostringstream o;
      o << "error:";
      for (int i = 0; i < n; ++i) {
        o << ' ';
        if (a[i].tag == T_SYM) o << prog->symbols[a[i].i];
        else if (a[i].tag == T_INT) o << a[i].i;
        else if (a[i].tag == T_NUM && a[i].rank == 0 && a[i].uniform()) o << pay[a[i].n.off];
        else o << describe(a[i]);
      }
      err_at(site, o.str());
    }
    // ---- vectors and matrices ----
    case P_VEC: {
      for (int i = 0; i < n; ++i) {
        a[i] = promote(a[i]);
        if (a[i].tag != T_NUM || a[i].rank != 0) type_error(site, "numbers", a[i]);
      }
      return concat(a, n, 1, static_cast<uint32_t>(n), 1);
    }
    case P_LIST_TO_VEC: {
      std::vector<Value> items;
      list_items(*this, a[0], items, site);
      if (items.empty()) err_at(site, "'list->vec': empty list");
      for (auto& v : items) {
        v = promote(v);
        if (v.tag != T_NUM || v.rank != 0) type_error(site, "a list of numbers", v);
      }
      return concat(items.data(), static_cast<int>(items.size()), 1, static_cast<uint32_t>(items.size()), 1);
    }
    case P_MAT: {
      std::vector<Value> rows;
      uint32_t cols = 0;
      for (int i = 0; i < n; ++i) {
        Value r = a[i];
        if (r.tag == T_PAIR) {
          std::vector<Value> items;
          list_items(*this, r, items, site);
          for (auto& v : items) {
            v = promote(v);
            if (v.tag != T_NUM || v.rank != 0) type_error(site, "rows of numbers", v);
          }
          r = concat(items.data(), static_cast<int>(items.size()), 1, static_cast<uint32_t>(items.size()), 1);
        }
        if (r.tag != T_NUM || r.rank != 1) type_error(site, "rows given as vectors or lists", a[i]);
        if (i == 0) cols = r.rows;
        else if (r.rows != cols)
          err_at(site, "'mat': row " + std::to_string(i) + " has " + std::to_string(r.rows) + " elements, row 0 has " +
                           std::to_string(cols));
        rows.push_back(r);
      }
      return concat(rows.data(), n, 2, static_cast<uint32_t>(n), cols);
    }
    case P_REF: {
      const Value& v = a[0];  // by reference: a fresh argument slot is read field by field
      if (v.tag != T_NUM || v.rank == 0) type_error(site, "a vector or matrix", v);
      int64_t i = index_arg(*this, a[1], site, "an index");
      if (i < 0 || i >= v.rows) err_at(site, "'ref': index " + std::to_string(i) + " out of range for " + describe(v));
      if (n == 3) {
        if (v.rank != 2) err_at(site, "'ref' with two indices needs a matrix, got " + describe(v));
        int64_t j = index_arg(*this, a[2], site, "an index");
        if (j < 0 || j >= v.n.cols)
          err_at(site, "'ref': column " + std::to_string(j) + " out of range for " + describe(v));
        return slice(v, static_cast<uint32_t>(i * v.n.cols + j), 0, 1, 1);
      }
      if (v.rank == 1) return slice(v, static_cast<uint32_t>(i), 0, 1, 1);
      return slice(v, static_cast<uint32_t>(i * v.n.cols), 1, v.n.cols, 1);
    }
    case P_VEC_TO_LIST: {
      Value v = a[0];
      if (v.tag != T_NUM || v.rank != 1) type_error(site, "a vector", v);
      // a pair, a temporary Value and a scalar per element: refused before the temporary is made
      if (bytes_in_use() +
              static_cast<uint64_t>(v.rows) * lanes_of(v) * (sizeof(Pair) + sizeof(Value) + sizeof(double)) >
          lim->max_bytes)
        memory_error(site,
                     static_cast<uint64_t>(v.rows) * lanes_of(v) * (sizeof(Pair) + sizeof(Value) + sizeof(double)));
      std::vector<Value> items(v.rows);
      for (uint32_t i = 0; i < v.rows; ++i) items[i] = slice(v, i, 0, 1, 1);
      return list_from(*this, items.data(), items.size(), Value::make_nil());
    }
    case P_DOT: {
      if (a[0].tag != T_NUM || a[0].rank != 1) type_error(site, "a vector", a[0]);
      if (a[1].tag != T_NUM || a[1].rank != 1) type_error(site, "a vector", a[1]);
      if (a[0].rows != a[1].rows)
        err_at(site, "'dot': lengths differ (" + std::to_string(a[0].rows) + " and " + std::to_string(a[1].rows) + ")");
      return gemm(a[0], a[1], 1, a[0].rows, 1, 0, 1, 1);
    }
    case P_OUTER: {
      if (a[0].tag != T_NUM || a[0].rank != 1) type_error(site, "a vector", a[0]);
      if (a[1].tag != T_NUM || a[1].rank != 1) type_error(site, "a vector", a[1]);
      return gemm(a[0], a[1], a[0].rows, 1, a[1].rows, 2, a[0].rows, a[1].rows);
    }
    case P_MATVEC:
    case P_MATMUL: {
      const Value &A = a[0], &B = a[1];
      if (A.tag != T_NUM || A.rank != 2) type_error(site, "a matrix", A);
      if (B.tag != T_NUM || B.rank == 0 || (id == P_MATVEC && B.rank != 1))
        type_error(site, id == P_MATVEC ? "a vector" : "a matrix or vector", B);
      if (A.n.cols != B.rows)
        err_at(site, "'" + site->name + "': shape mismatch, " + describe(A) + " times " + describe(B));
      if (B.rank == 1) return gemm(A, B, A.rows, A.n.cols, 1, 1, A.rows, 1);
      return gemm(A, B, A.rows, A.n.cols, B.n.cols, 2, A.rows, B.n.cols);
    }
    case P_TRANSPOSE: {
      if (a[0].tag != T_NUM || a[0].rank == 0) type_error(site, "a matrix", a[0]);
      if (a[0].rank == 1) return a[0];
      return transpose(a[0]);
    }
    case P_TRACE:
    case P_DET:
    case P_LOGDET:
    case P_INV:
    case P_CHOLESKY: {
      const Value& A = a[0];
      if (A.tag != T_NUM || A.rank != 2) type_error(site, "a square matrix", A);
      if (A.rows != A.n.cols) err_at(site, "'" + site->name + "': needs a square matrix, got " + describe(A));
      if (id == P_TRACE) return reduce(O_TRACE, A);
      if (id == P_DET) return reduce(O_DET, A);
      if (id == P_LOGDET) return reduce(O_LOGDET, A);
      if (id == P_INV) return inv(A, site);
      return cholesky(A, site);
    }
    case P_SOLVE: {
      const Value &A = a[0], &B = a[1];
      if (A.tag != T_NUM || A.rank != 2 || A.rows != A.n.cols) type_error(site, "a square matrix", A);
      if (B.tag != T_NUM || B.rank == 0) type_error(site, "a vector or matrix", B);
      if (B.rows != A.rows) err_at(site, "'solve': shape mismatch, " + describe(A) + " and " + describe(B));
      return solve(A, B, site);
    }
    case P_VSUM:
    case P_NORM: {
      if (a[0].tag != T_NUM) type_error(site, "a vector or matrix", a[0]);
      return reduce(id == P_VSUM ? O_VSUM : O_NORM, a[0]);
    }
    case P_EYE:
    case P_ZEROS:
    case P_ONES: {
      int64_t r = index_arg(*this, a[0], site, "a size");
      int64_t c = n == 2 ? index_arg(*this, a[1], site, "a size") : (id == P_EYE ? r : 1);
      if (r <= 0 || c <= 0) err_at(site, "'" + site->name + "': sizes must be positive");
      // in 64 bits and checked: r * c * 8 can overflow even 64 bits, and a dimension past 32 bits
      // would be truncated by the cast below
      uint64_t bytes;
      bool huge = r > UINT32_MAX || c > UINT32_MAX ||
                  __builtin_mul_overflow(static_cast<uint64_t>(r), static_cast<uint64_t>(c), &bytes) ||
                  __builtin_mul_overflow(bytes, uint64_t(sizeof(double)), &bytes);
      if (huge || bytes > lim->max_bytes)
        limit_error("memory budget (max_bytes=" + std::to_string(lim->max_bytes >> 20) +
                        " MiB per evaluation) exceeded: '" + site->name + "' of a " + std::to_string(r) + "x" +
                        std::to_string(c) + " array needs " +
                        (huge ? std::string("more than 2^64 bytes or a dimension past 2^32")
                              : std::to_string(bytes >> 20) + " MiB") +
                        "; raise Limits.max_bytes if the program really needs more",
                    site->line, site->col);
      int rank = (id == P_EYE || n == 2) ? 2 : 1;
      Value v = alloc_num(rank, static_cast<uint32_t>(r), static_cast<uint32_t>(c), true);
      double* p = data(v);
      uint32_t ne = v.numel();
      for (uint32_t i = 0; i < ne; ++i) p[i] = id == P_ONES ? 1.0 : 0.0;
      if (id == P_EYE)
        for (int64_t i = 0; i < r; ++i) p[i * c + i] = 1.0;
      return v;
    }
    case P_ROWS:
    case P_COLS:
    case P_SIZE: {
      if (a[0].tag != T_NUM) type_error(site, "a vector or matrix", a[0]);
      if (a[0].rank == 0) type_error(site, "a vector or matrix", a[0]);
      uint32_t x = id == P_ROWS ? a[0].rows : id == P_COLS ? a[0].cols() : a[0].numel();
      return Value::make_int(x);
    }
  }
  err_at(site, "internal error: unknown primitive");
}

}  // namespace ndvm
