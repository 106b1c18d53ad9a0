// The primitive table, in the manner of Lua's lopcodes.h: one line per primitive procedure with
//   name     its Scheme name
//   min max  its arity (max -1: variadic); the compiler checks calls against it statically
//   kind     what it computes (PrimKind below), for the proposers' static analysis:
//            NUMERIC     elementwise numeric: numbers or broadcasting arrays in, the same shape out
//            COMPARISON  a decision on numbers (= < > <= >= and the sign and parity tests)
//            PREDICATE   any other test giving a boolean (types, identity, not)
//            REDUCER     one number from an array or a list (dot, det, norm, length, ...)
//            OTHER       lists, arrays, higher-order procedures, conversions, error
//   flags    FOLD: a pure numeric function of its arguments that simplification may evaluate
//              on literals (proposers/simplify.py folds it with the runtime itself)
//            POSITIVE, UNIT, PM1: its values lie in (0, inf), (0, 1), [-1, 1] (the parameter
//              constraint that replaces a function of lone parameters: positive, unit, (between -1 1))
//            IDX0, IDX1, IDX2: that argument is an integer count or index, not a model quantity
//            REAL: exact integer arguments are made inexact before the call (arrays, linear algebra)
//            TOTAL (numeric only): defined on every real argument, no domain edge or pole (+ * exp
//              sin tanh abs ...; not / log sqrt tan asin expt): it can wrap any term
//            PIECEWISE (numeric only): its value has kinks or jumps (abs min max clamp floor
//              round modulo ...): a decision inside an expression
//            SYNONYM: another name of the line before it (logistic = sigmoid, inexact, exact)
//            LINALG: linear algebra: builds, combines or reduces whole vectors and matrices
//            STRUCT: builds a list or vector from its elements, or takes one apart by position
//              (the structures a model carries its state in)
//            The proposers derive their operator sets and niche features from these
//            (proposers/mutation.py, proposers/niches.py).
//   fn       the function that computes it (prims.cc; one function may serve several lines and
//            tell them apart by the id it is given). call_prim is generated from this column:
//            a new primitive is its line here and its function (see docs/runtime.md).
// The Python binding exports the name, arity, kind and the proposers' flags (_native.PRIMITIVES);
// nothing in Python restates them.
#pragma once
#include <cstdint>

// clang-format off
#define NDVM_PRIMS(X)                                                                                               \
  /* arithmetic (variadic, elementwise, broadcasting) and chained comparisons */                                    \
  X(ADD,               "+",                0,  -1,  NUMERIC,     FOLD | TOTAL,                   add_mul)           \
  X(SUB,               "-",                1,  -1,  NUMERIC,     FOLD | TOTAL,                   sub_div)           \
  X(MUL,               "*",                0,  -1,  NUMERIC,     FOLD | TOTAL,                   add_mul)           \
  X(DIV,               "/",                1,  -1,  NUMERIC,     FOLD,                           sub_div)           \
  X(NUM_EQ,            "=",                1,  -1,  COMPARISON,  0,                              compare)           \
  X(LT,                "<",                1,  -1,  COMPARISON,  0,                              compare)           \
  X(GT,                ">",                1,  -1,  COMPARISON,  0,                              compare)           \
  X(LE,                "<=",               1,  -1,  COMPARISON,  0,                              compare)           \
  X(GE,                ">=",               1,  -1,  COMPARISON,  0,                              compare)           \
  X(MIN,               "min",              1,  -1,  NUMERIC,     FOLD | TOTAL | PIECEWISE,       min_max)           \
  X(MAX,               "max",              1,  -1,  NUMERIC,     FOLD | TOTAL | PIECEWISE,       min_max)           \
  X(CLAMP,             "clamp",            3,   3,  NUMERIC,     FOLD | TOTAL | PIECEWISE,       clamp)             \
  /* elementwise unary math */                                                                                      \
  X(ABS,               "abs",              1,   1,  NUMERIC,     FOLD | TOTAL | PIECEWISE,       unary<O_ABS>)      \
  X(FLOOR,             "floor",            1,   1,  NUMERIC,     TOTAL | PIECEWISE,              rounding)          \
  X(CEILING,           "ceiling",          1,   1,  NUMERIC,     TOTAL | PIECEWISE,              rounding)          \
  X(ROUND,             "round",            1,   1,  NUMERIC,     TOTAL | PIECEWISE,              rounding)          \
  X(TRUNCATE,          "truncate",         1,   1,  NUMERIC,     TOTAL | PIECEWISE,              rounding)          \
  X(EXP,               "exp",              1,   1,  NUMERIC,     FOLD | POSITIVE | TOTAL,        unary<O_EXP>)      \
  X(LOG,               "log",              1,   2,  NUMERIC,     FOLD,                           log)               \
  X(SQRT,              "sqrt",             1,   1,  NUMERIC,     FOLD,                           unary<O_SQRT>)     \
  X(SIN,               "sin",              1,   1,  NUMERIC,     FOLD | PM1 | TOTAL,             unary<O_SIN>)      \
  X(COS,               "cos",              1,   1,  NUMERIC,     FOLD | PM1 | TOTAL,             unary<O_COS>)      \
  X(TAN,               "tan",              1,   1,  NUMERIC,     FOLD,                           unary<O_TAN>)      \
  X(ASIN,              "asin",             1,   1,  NUMERIC,     FOLD,                           unary<O_ASIN>)     \
  X(ACOS,              "acos",             1,   1,  NUMERIC,     FOLD,                           unary<O_ACOS>)     \
  X(ATAN,              "atan",             1,   2,  NUMERIC,     FOLD | TOTAL,                   atan)              \
  X(TANH,              "tanh",             1,   1,  NUMERIC,     FOLD | PM1 | TOTAL,             unary<O_TANH>)     \
  X(SQUARE,            "square",           1,   1,  NUMERIC,     FOLD | TOTAL,                   unary<O_SQUARE>)   \
  X(SIGMOID,           "sigmoid",          1,   1,  NUMERIC,     FOLD | UNIT | TOTAL,            unary<O_SIGMOID>)  \
  X(LOGISTIC,          "logistic",         1,   1,  NUMERIC,     FOLD | UNIT | TOTAL | SYNONYM,  unary<O_SIGMOID>)  \
  X(SOFTPLUS,          "softplus",         1,   1,  NUMERIC,     FOLD | POSITIVE | TOTAL,        unary<O_SOFTPLUS>) \
  X(EXPT,              "expt",             2,   2,  NUMERIC,     FOLD,                           expt)              \
  X(QUOTIENT,          "quotient",         2,   2,  NUMERIC,     PIECEWISE,                      int_div)           \
  X(REMAINDER,         "remainder",        2,   2,  NUMERIC,     PIECEWISE,                      int_div)           \
  X(MODULO,            "modulo",           2,   2,  NUMERIC,     PIECEWISE,                      int_div)           \
  X(EXACT_TO_INEXACT,  "exact->inexact",   1,   1,  NUMERIC,     0,                              inexact)           \
  X(INEXACT,           "inexact",          1,   1,  NUMERIC,     SYNONYM,                        inexact)           \
  X(INEXACT_TO_EXACT,  "inexact->exact",   1,   1,  OTHER,       0,                              exact)             \
  X(EXACT,             "exact",            1,   1,  OTHER,       SYNONYM,                        exact)             \
  /* predicates */                                                                                                  \
  X(ZEROP,             "zero?",            1,   1,  COMPARISON,  0,                              num_pred)          \
  X(POSITIVEP,         "positive?",        1,   1,  COMPARISON,  0,                              num_pred)          \
  X(NEGATIVEP,         "negative?",        1,   1,  COMPARISON,  0,                              num_pred)          \
  X(EVENP,             "even?",            1,   1,  COMPARISON,  0,                              num_pred)          \
  X(ODDP,              "odd?",             1,   1,  COMPARISON,  0,                              num_pred)          \
  X(NUMBERP,           "number?",          1,   1,  PREDICATE,   0,                              numberp)           \
  X(INTEGERP,          "integer?",         1,   1,  PREDICATE,   0,                              num_pred)          \
  X(EXACTP,            "exact?",           1,   1,  PREDICATE,   0,                              exactp)            \
  X(INEXACTP,          "inexact?",         1,   1,  PREDICATE,   0,                              inexactp)          \
  X(BOOLEANP,          "boolean?",         1,   1,  PREDICATE,   0,                              booleanp)          \
  X(SYMBOLP,           "symbol?",          1,   1,  PREDICATE,   0,                              symbolp)           \
  X(PROCEDUREP,        "procedure?",       1,   1,  PREDICATE,   0,                              procedurep)        \
  X(NULLP,             "null?",            1,   1,  PREDICATE,   0,                              nullp)             \
  X(PAIRP,             "pair?",            1,   1,  PREDICATE,   0,                              pairp)             \
  X(LISTP,             "list?",            1,   1,  PREDICATE,   0,                              listp)             \
  X(NOT,               "not",              1,   1,  PREDICATE,   0,                              not_)              \
  X(EQP,               "eq?",              2,   2,  PREDICATE,   0,                              eq)                \
  X(EQVP,              "eqv?",             2,   2,  PREDICATE,   0,                              eq)                \
  X(EQUALP,            "equal?",           2,   2,  PREDICATE,   0,                              eq)                \
  /* pairs and lists */                                                                                             \
  X(CONS,              "cons",             2,   2,  OTHER,       STRUCT,                         cons)              \
  X(CAR,               "car",              1,   1,  OTHER,       STRUCT,                         car)               \
  X(CDR,               "cdr",              1,   1,  OTHER,       STRUCT,                         cdr)               \
  X(CAAR,              "caar",             1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CADR,              "cadr",             1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CDAR,              "cdar",             1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CDDR,              "cddr",             1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CADDR,             "caddr",            1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CDDDR,             "cdddr",            1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(CADDDR,            "cadddr",           1,   1,  OTHER,       STRUCT,                         cxr)               \
  X(LIST,              "list",             0,  -1,  OTHER,       STRUCT,                         list)              \
  X(LENGTH,            "length",           1,   1,  REDUCER,     0,                              length)            \
  X(LIST_REF,          "list-ref",         2,   2,  OTHER,       IDX1 | STRUCT,                  list_ref_tail)     \
  X(LIST_TAIL,         "list-tail",        2,   2,  OTHER,       IDX1 | STRUCT,                  list_ref_tail)     \
  X(APPEND,            "append",           0,  -1,  OTHER,       STRUCT,                         append)            \
  X(REVERSE,           "reverse",          1,   1,  OTHER,       0,                              reverse)           \
  X(MAP,               "map",              2,  -1,  OTHER,       0,                              map)               \
  X(FOR_EACH,          "for-each",         2,  -1,  OTHER,       0,                              map)               \
  X(FILTER,            "filter",           2,   2,  OTHER,       0,                              filter)            \
  X(FOLD_LEFT,         "fold-left",        3,   3,  OTHER,       0,                              fold)              \
  X(FOLD_RIGHT,        "fold-right",       3,   3,  OTHER,       0,                              fold)              \
  X(REDUCE,            "reduce",           3,   3,  OTHER,       0,                              fold)              \
  X(APPLY,             "apply",            2,  -1,  OTHER,       0,                              apply)             \
  X(ASSQ,              "assq",             2,   2,  OTHER,       0,                              assoc_member)      \
  X(ASSV,              "assv",             2,   2,  OTHER,       0,                              assoc_member)      \
  X(ASSOC,             "assoc",            2,   2,  OTHER,       0,                              assoc_member)      \
  X(MEMQ,              "memq",             2,   2,  OTHER,       0,                              assoc_member)      \
  X(MEMV,              "memv",             2,   2,  OTHER,       0,                              assoc_member)      \
  X(MEMBER,            "member",           2,   2,  OTHER,       0,                              assoc_member)      \
  X(ERROR,             "error",            1,  -1,  OTHER,       0,                              error)             \
  /* vectors and matrices (dense, numeric) */                                                                       \
  X(VEC,               "vec",              1,  -1,  OTHER,       STRUCT,                         vec)               \
  X(MAT,               "mat",              1,  -1,  OTHER,       LINALG,                         mat)               \
  X(REF,               "ref",              2,   3,  OTHER,       IDX1 | IDX2 | STRUCT,           ref)               \
  X(DOT,               "dot",              2,   2,  REDUCER,     REAL | LINALG,                  dot)               \
  X(OUTER,             "outer",            2,   2,  OTHER,       REAL | LINALG,                  outer)             \
  X(MATVEC,            "matvec",           2,   2,  OTHER,       REAL | LINALG,                  matmul)            \
  X(MATMUL,            "matmul",           2,   2,  OTHER,       REAL | LINALG,                  matmul)            \
  X(TRANSPOSE,         "transpose",        1,   1,  OTHER,       REAL | LINALG,                  transpose)         \
  X(TRACE,             "trace",            1,   1,  REDUCER,     REAL | LINALG,                  square_matrix)     \
  X(EYE,               "eye",              1,   1,  OTHER,       IDX0 | LINALG,                  filled)            \
  X(ZEROS,             "zeros",            1,   2,  OTHER,       IDX0 | IDX1 | LINALG,           filled)            \
  X(ONES,              "ones",             1,   2,  OTHER,       IDX0 | IDX1 | LINALG,           filled)            \
  X(VSUM,              "vsum",             1,   1,  REDUCER,     REAL | LINALG,                  sum_norm)          \
  X(NORM,              "norm",             1,   1,  REDUCER,     REAL | LINALG,                  sum_norm)          \
  X(INV,               "inv",              1,   1,  OTHER,       REAL | LINALG,                  square_matrix)     \
  X(SOLVE,             "solve",            2,   2,  OTHER,       REAL | LINALG,                  solve)             \
  X(DET,               "det",              1,   1,  REDUCER,     REAL | LINALG,                  square_matrix)     \
  X(LOGDET,            "logdet",           1,   1,  REDUCER,     REAL | LINALG,                  square_matrix)     \
  X(CHOLESKY,          "cholesky",         1,   1,  OTHER,       REAL | LINALG,                  square_matrix)     \
  X(ROWS,              "rows",             1,   1,  REDUCER,     0,                              shape)             \
  X(COLS,              "cols",             1,   1,  REDUCER,     0,                              shape)             \
  X(SIZE,              "size",             1,   1,  REDUCER,     0,                              shape)             \
  X(VEC_TO_LIST,       "vec->list",        1,   1,  OTHER,       REAL | STRUCT,                  vec_to_list)       \
  X(LIST_TO_VEC,       "list->vec",        1,   1,  OTHER,       STRUCT,                         list_to_vec)
// clang-format on

// The tape-op table, in the same manner: one line per numeric operation that leaves a tape
// record, with its properties. Replay (forward_record), backward (backward_record), the work
// accounting and the Python binding (_native.tape_ops()) all read them from here; no code tests
// an op's position in the enum except through static_asserts below.
//   arity   inputs of a record (-1: any number, kept in VM::targs when more than two)
//   kind    the kernel family: which forward and backward functions compute it
//   flags   ARITH: one of + - * / (also N_ARITH2 opcodes, with inline one-lane loops)
//           LINEAR: the output is linear in the inputs (its adjoint reads no saved values)
//           NOGRAD: piecewise constant or a decision: nothing flows back
//           LANEADJ: the adjoint is per-lane dense linear algebra (scratch, an LU per lane)
//           EXTRA: costs work beyond its output's elements (record_extra_work)
//           ONELANE: backward_one_lane has a fast path for it (one-lane runs)
//           F32: a float32 program rounds its output (replay rounds what the evaluator rounded)
// Saved values: an op with a gradient that is not LINEAR reads its inputs or output in backward.
// clang-format off
#define NDVM_TAPE_OPS(X)                                                    \
  /* elementwise binary (broadcasting); the first four are N_ARITH2 opcodes: keep their order */ \
  X(ADD, "add", 2, BINARY, ARITH | LINEAR | ONELANE | F32)                  \
  X(SUB, "sub", 2, BINARY, ARITH | LINEAR | ONELANE | F32)                  \
  X(MUL, "mul", 2, BINARY, ARITH | ONELANE | F32)                           \
  X(DIV, "div", 2, BINARY, ARITH | F32)                                     \
  X(POW, "pow", 2, BINARY, F32) X(ATAN2, "atan2", 2, BINARY, F32)           \
  X(MIN, "min", 2, BINARY, F32) X(MAX, "max", 2, BINARY, F32)               \
  /* elementwise unary (fwd1 and der1 in kernels.h) */                      \
  X(NEG, "neg", 1, UNARY, LINEAR | F32) X(EXP, "exp", 1, UNARY, F32)       \
  X(LOG, "log", 1, UNARY, F32) X(SQRT, "sqrt", 1, UNARY, F32)               \
  X(SIN, "sin", 1, UNARY, F32) X(COS, "cos", 1, UNARY, F32)                 \
  X(TAN, "tan", 1, UNARY, F32) X(ASIN, "asin", 1, UNARY, F32)               \
  X(ACOS, "acos", 1, UNARY, F32) X(ATAN, "atan", 1, UNARY, F32)             \
  X(TANH, "tanh", 1, UNARY, F32) X(ABS, "abs", 1, UNARY, F32)               \
  X(SQUARE, "square", 1, UNARY, F32) X(SIGMOID, "sigmoid", 1, UNARY, F32)   \
  X(SOFTPLUS, "softplus", 1, UNARY, F32)                                    \
  /* structure of dense arrays: d0 the first element (slice), the shape (transpose) */ \
  X(SLICE, "slice", 1, SLICE, LINEAR)                                       \
  X(CONCAT, "concat", -1, CONCAT, LINEAR)                                   \
  X(TRANSPOSE, "transpose", 1, TRANSPOSE, LINEAR)                           \
  /* linear algebra: out[d0, d2] = A[d0, d1] B[d1, d2]; d0 the order of a square matrix */ \
  X(GEMM, "gemm", 2, GEMM, ONELANE | EXTRA | F32)                           \
  X(TRACE, "trace", 1, REDUCE, LINEAR | EXTRA | F32)                        \
  X(VSUM, "vsum", 1, REDUCE, LINEAR | EXTRA | F32)                          \
  X(NORM, "norm", 1, REDUCE, EXTRA | F32)                                   \
  X(INV, "inv", 1, INV, LANEADJ | EXTRA | F32)                              \
  X(SOLVE, "solve", 2, SOLVE, LANEADJ | EXTRA | F32)                        \
  X(DET, "det", 1, DET, LANEADJ | EXTRA | F32)                              \
  X(LOGDET, "logdet", 1, DET, LANEADJ | EXTRA | F32)                        \
  X(CHOL, "cholesky", 1, CHOL, LANEADJ | EXTRA)                             \
  /* piecewise constant (gradient zero): recorded only so that a replay recomputes them */ \
  X(FLOOR, "floor", 1, ROUNDING, NOGRAD) X(CEILING, "ceiling", 1, ROUNDING, NOGRAD) \
  X(ROUND, "round", 1, ROUNDING, NOGRAD) X(TRUNCATE, "truncate", 1, ROUNDING, NOGRAD) \
  X(QUOTIENT, "quotient", 2, INTDIV, NOGRAD) X(REMAINDER, "remainder", 2, INTDIV, NOGRAD) \
  X(MODULO, "modulo", 2, INTDIV, NOGRAD)                                    \
  /* a decision that depended on differentiated values (a comparison, a numeric predicate, eqv? \
     of numbers): d0 the primitive, d1 where its lanes' outcomes start in VM::guard_masks. A   \
     replay recomputes the outcomes and gives up when one differs. */       \
  X(GUARD, "guard", -1, GUARD, NOGRAD)
// clang-format on

namespace ndvm {

// Numeric operations that leave a tape record (structural operations never do).
enum Op : uint8_t {
#define NDVM_TAPE_ENUM(id, name, arity, kind, flags) O_##id,
  NDVM_TAPE_OPS(NDVM_TAPE_ENUM)
#undef NDVM_TAPE_ENUM
      O_COUNT
};

// The kernel families of the tape ops (the `kind` column): forward_record (replay.cc) and
// backward_record (backward.cc) dispatch on these, one function per family.
// clang-format off
#define NDVM_TAPE_KINDS(X)                                                                        \
  X(BINARY, "binary") X(UNARY, "unary") X(SLICE, "slice") X(CONCAT, "concat")                    \
  X(TRANSPOSE, "transpose") X(GEMM, "gemm") X(REDUCE, "reduce") X(DET, "det") X(INV, "inv")      \
  X(SOLVE, "solve") X(CHOL, "cholesky") X(ROUNDING, "rounding") X(INTDIV, "intdiv") X(GUARD, "guard")
// clang-format on
enum class TapeKind : uint8_t {
#define NDVM_TAPE_KIND_ENUM(kind, name) kind,
  NDVM_TAPE_KINDS(NDVM_TAPE_KIND_ENUM)
#undef NDVM_TAPE_KIND_ENUM
};
inline constexpr const char* kTapeKindNames[] = {
#define NDVM_TAPE_KIND_NAME(kind, name) name,
    NDVM_TAPE_KINDS(NDVM_TAPE_KIND_NAME)
#undef NDVM_TAPE_KIND_NAME
};

// The `flags` column (in a namespace of their own: the short names would clash in ndvm).
namespace tapeflag {
enum : uint16_t {
  ARITH = 1 << 0,
  LINEAR = 1 << 1,
  NOGRAD = 1 << 2,
  LANEADJ = 1 << 3,
  EXTRA = 1 << 4,
  ONELANE = 1 << 5,
  F32 = 1 << 6,
};
}  // namespace tapeflag

struct TapeOpInfo {
  const char* name;
  int arity;  // -1: any number
  TapeKind kind;
  uint16_t flags;
};

inline constexpr TapeOpInfo kTapeOps[O_COUNT] = {
#define NDVM_TAPE_INFO(id, name, arity, kind, flags) \
  {name, arity, TapeKind::kind, [] {                 \
     using namespace tapeflag;                       \
     return static_cast<uint16_t>(flags);            \
   }()},
    NDVM_TAPE_OPS(NDVM_TAPE_INFO)
#undef NDVM_TAPE_INFO
};

// The ops having every flag of `flags`, as a bit set over the enum.
constexpr uint64_t tape_ops_with(uint16_t flags) {
  uint64_t m = 0;
  for (int i = 0; i < O_COUNT; ++i)
    if ((kTapeOps[i].flags & flags) == flags) m |= uint64_t{1} << i;
  return m;
}

// Whether `op` has the flags F: a shift and a test against a constant (the hot paths of the
// evaluator, replay and backward ask this once per operation).
template <uint16_t F>
inline bool tape_op_has(unsigned op) {
  constexpr uint64_t m = tape_ops_with(F);
  return (m >> op) & 1;
}

inline TapeKind tape_kind(unsigned op) { return kTapeOps[op].kind; }

static_assert(O_COUNT <= 64, "tape_op_has keeps the ops in a 64-bit set");
static_assert(O_ADD == 0 && O_SUB == 1 && O_MUL == 2 && O_DIV == 3 && tape_ops_with(tapeflag::ARITH) == 0xF,
              "+ - * / are the N_ARITH2 opcodes 0..3 (compiler.cc) and the only ARITH ops");
static_assert((tape_ops_with(tapeflag::LINEAR) & tape_ops_with(tapeflag::NOGRAD)) == 0,
              "an op without a gradient is not LINEAR");
static_assert((tape_ops_with(tapeflag::LANEADJ) & ~tape_ops_with(tapeflag::EXTRA)) == 0,
              "per-lane linear algebra is charged as EXTRA work");

enum PrimId : int {
#define NDVM_PRIM_ENUM(id, name, lo, hi, kind, flags, fn) P_##id,
  NDVM_PRIMS(NDVM_PRIM_ENUM)
#undef NDVM_PRIM_ENUM
      P_COUNT
};

// The `kind` column of NDVM_PRIMS.
// clang-format off
#define NDVM_PRIM_KINDS(X) \
  X(NUMERIC, "numeric") X(COMPARISON, "comparison") X(PREDICATE, "predicate") X(REDUCER, "reducer") \
  X(OTHER, "other")
// clang-format on
enum class PrimKind : uint8_t {
#define NDVM_PRIM_KIND_ENUM(kind, name) kind,
  NDVM_PRIM_KINDS(NDVM_PRIM_KIND_ENUM)
#undef NDVM_PRIM_KIND_ENUM
};
inline constexpr const char* kPrimKindNames[] = {
#define NDVM_PRIM_KIND_NAME(kind, name) name,
    NDVM_PRIM_KINDS(NDVM_PRIM_KIND_NAME)
#undef NDVM_PRIM_KIND_NAME
};

// The `flags` column of NDVM_PRIMS (a namespace of their own, as tapeflag).
namespace primflag {
enum : uint16_t {
  FOLD = 1 << 0,
  POSITIVE = 1 << 1,
  UNIT = 1 << 2,
  PM1 = 1 << 3,
  IDX0 = 1 << 4,
  IDX1 = 1 << 5,
  IDX2 = 1 << 6,
  REAL = 1 << 7,
  TOTAL = 1 << 8,
  PIECEWISE = 1 << 9,
  SYNONYM = 1 << 10,
  LINALG = 1 << 11,
  STRUCT = 1 << 12,
  RANGE = POSITIVE | UNIT | PM1,
  INDEX = IDX0 | IDX1 | IDX2,
};
}  // namespace primflag

struct PrimInfo {
  const char* name;
  int min_args, max_args;  // max_args -1: variadic
  PrimKind kind;
  uint16_t flags;
  constexpr bool has(uint16_t f) const { return (flags & f) != 0; }
  // The parameter constraint, as source text, that the primitive's values satisfy ("" if none).
  constexpr const char* range_constraint() const {
    return has(primflag::POSITIVE) ? "positive"
           : has(primflag::UNIT)   ? "unit"
           : has(primflag::PM1)    ? "(between -1 1)"
                                   : "";
  }
};

inline constexpr PrimInfo kPrims[P_COUNT] = {
#define NDVM_PRIM_INFO(id, name, lo, hi, kind, flags, fn) \
  {name, lo, hi, PrimKind::kind, [] {                     \
     using namespace primflag;                            \
     return static_cast<uint16_t>(flags);                 \
   }()},
    NDVM_PRIMS(NDVM_PRIM_INFO)
#undef NDVM_PRIM_INFO
};

// The columns' rules, checked when the table is compiled.
constexpr bool prim_table_consistent() {
  for (const PrimInfo& p : kPrims) {
    const int ranges = !!(p.flags & primflag::POSITIVE) + !!(p.flags & primflag::UNIT) + !!(p.flags & primflag::PM1);
    if (ranges > 1) return false;  // at most one range
    if ((p.flags & (primflag::FOLD | primflag::RANGE | primflag::TOTAL | primflag::PIECEWISE)) &&
        p.kind != PrimKind::NUMERIC)
      return false;
    if ((p.flags & primflag::LINALG) && (p.flags & primflag::STRUCT)) return false;
    // an index argument is one the primitive takes
    const int most = p.max_args < 0 ? 3 : p.max_args;
    for (int k = 0; k < 3; ++k)
      if ((p.flags & (primflag::IDX0 << k)) && k >= most) return false;
  }
  return true;
}
static_assert(prim_table_consistent(),
              "NDVM_PRIMS: at most one range flag; FOLD, ranges, TOTAL and PIECEWISE only on NUMERIC primitives; "
              "not both LINALG and STRUCT; IDXk only for an argument k the primitive takes");

// -1 when `name` is not a primitive
int find_prim(const char* name);

}  // namespace ndvm
