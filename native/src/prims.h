// The primitive table, in the manner of Lua's lopcodes.h: one line per primitive procedure with its
// Scheme name and its arity (-1: variadic). The compiler checks arity against it statically; the VM
// dispatches on the enum in one switch (vm.cc, call_prim).
#pragma once

#define NDVM_PRIMS(X)                                                     \
  /* arithmetic (variadic, elementwise, broadcasting) */                  \
  X(ADD, "+", 0, -1) X(SUB, "-", 1, -1) X(MUL, "*", 0, -1) X(DIV, "/", 1, -1) \
  X(NUM_EQ, "=", 1, -1) X(LT, "<", 1, -1) X(GT, ">", 1, -1) X(LE, "<=", 1, -1) X(GE, ">=", 1, -1) \
  X(MIN, "min", 1, -1) X(MAX, "max", 1, -1)                               \
  /* elementwise unary math */                                            \
  X(ABS, "abs", 1, 1) X(FLOOR, "floor", 1, 1) X(CEILING, "ceiling", 1, 1) \
  X(ROUND, "round", 1, 1) X(TRUNCATE, "truncate", 1, 1)                   \
  X(EXP, "exp", 1, 1) X(LOG, "log", 1, 2) X(SQRT, "sqrt", 1, 1)          \
  X(SIN, "sin", 1, 1) X(COS, "cos", 1, 1) X(TAN, "tan", 1, 1)             \
  X(ASIN, "asin", 1, 1) X(ACOS, "acos", 1, 1) X(ATAN, "atan", 1, 2)       \
  X(TANH, "tanh", 1, 1) X(SQUARE, "square", 1, 1) X(SIGMOID, "sigmoid", 1, 1) \
  X(LOGISTIC, "logistic", 1, 1) X(SOFTPLUS, "softplus", 1, 1)             \
  X(EXPT, "expt", 2, 2) X(QUOTIENT, "quotient", 2, 2) X(REMAINDER, "remainder", 2, 2) \
  X(MODULO, "modulo", 2, 2) X(EXACT_TO_INEXACT, "exact->inexact", 1, 1)   \
  X(INEXACT, "inexact", 1, 1) X(INEXACT_TO_EXACT, "inexact->exact", 1, 1) X(EXACT, "exact", 1, 1) \
  /* predicates */                                                        \
  X(ZEROP, "zero?", 1, 1) X(POSITIVEP, "positive?", 1, 1) X(NEGATIVEP, "negative?", 1, 1) \
  X(EVENP, "even?", 1, 1) X(ODDP, "odd?", 1, 1) X(NUMBERP, "number?", 1, 1) \
  X(INTEGERP, "integer?", 1, 1) X(EXACTP, "exact?", 1, 1) X(INEXACTP, "inexact?", 1, 1) \
  X(BOOLEANP, "boolean?", 1, 1) X(SYMBOLP, "symbol?", 1, 1) X(PROCEDUREP, "procedure?", 1, 1) \
  X(NULLP, "null?", 1, 1) X(PAIRP, "pair?", 1, 1) X(LISTP, "list?", 1, 1) \
  X(NOT, "not", 1, 1) X(EQP, "eq?", 2, 2) X(EQVP, "eqv?", 2, 2) X(EQUALP, "equal?", 2, 2) \
  /* pairs and lists */                                                   \
  X(CONS, "cons", 2, 2) X(CAR, "car", 1, 1) X(CDR, "cdr", 1, 1)           \
  X(CAAR, "caar", 1, 1) X(CADR, "cadr", 1, 1) X(CDAR, "cdar", 1, 1) X(CDDR, "cddr", 1, 1) \
  X(CADDR, "caddr", 1, 1) X(CDDDR, "cdddr", 1, 1) X(CADDDR, "cadddr", 1, 1) \
  X(LIST, "list", 0, -1) X(LENGTH, "length", 1, 1) X(LIST_REF, "list-ref", 2, 2) \
  X(LIST_TAIL, "list-tail", 2, 2) X(APPEND, "append", 0, -1) X(REVERSE, "reverse", 1, 1) \
  X(MAP, "map", 2, -1) X(FOR_EACH, "for-each", 2, -1) X(FILTER, "filter", 2, 2) \
  X(FOLD_LEFT, "fold-left", 3, 3) X(FOLD_RIGHT, "fold-right", 3, 3) X(REDUCE, "reduce", 3, 3) \
  X(APPLY, "apply", 2, -1)                                                \
  X(ASSQ, "assq", 2, 2) X(ASSV, "assv", 2, 2) X(ASSOC, "assoc", 2, 2)     \
  X(MEMQ, "memq", 2, 2) X(MEMV, "memv", 2, 2) X(MEMBER, "member", 2, 2)   \
  X(ERROR, "error", 1, -1)                                                \
  /* vectors and matrices (dense, numeric) */                             \
  X(VEC, "vec", 1, -1) X(MAT, "mat", 1, -1) X(REF, "ref", 2, 3)           \
  X(DOT, "dot", 2, 2) X(OUTER, "outer", 2, 2) X(MATVEC, "matvec", 2, 2)   \
  X(MATMUL, "matmul", 2, 2) X(TRANSPOSE, "transpose", 1, 1) X(TRACE, "trace", 1, 1) \
  X(EYE, "eye", 1, 1) X(ZEROS, "zeros", 1, 2) X(ONES, "ones", 1, 2)       \
  X(VSUM, "vsum", 1, 1) X(NORM, "norm", 1, 1) X(INV, "inv", 1, 1)         \
  X(SOLVE, "solve", 2, 2) X(DET, "det", 1, 1) X(LOGDET, "logdet", 1, 1)   \
  X(CHOLESKY, "cholesky", 1, 1) X(ROWS, "rows", 1, 1) X(COLS, "cols", 1, 1) \
  X(SIZE, "size", 1, 1) X(VEC_TO_LIST, "vec->list", 1, 1) X(LIST_TO_VEC, "list->vec", 1, 1)

namespace ndvm {

enum PrimId : int {
#define NDVM_PRIM_ENUM(id, name, lo, hi) P_##id,
  NDVM_PRIMS(NDVM_PRIM_ENUM)
#undef NDVM_PRIM_ENUM
  P_COUNT
};

struct PrimInfo {
  const char* name;
  int min_args, max_args;  // max_args -1: variadic
};

extern const PrimInfo kPrims[P_COUNT];

// -1 when `name` is not a primitive
int find_prim(const char* name);

}  // namespace ndvm
