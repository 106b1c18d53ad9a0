// Runtime values. A Value is a 16-byte structural word: discrete structure (tags, symbols, pairs,
// closures) lives in it directly; a number is only a shape plus an offset into the payload arena,
// where its B lanes lie contiguous (lane-minor), element after element for vectors and matrices.
#pragma once
#include <cstdint>
#include <cstring>

namespace ndvm {

enum Tag : uint8_t {
  T_UNDEF = 0,  // a letrec/define slot read before its initialization
  T_UNSPEC,     // the value of (if #f #f), of define, ...
  T_NIL,
  T_BOOL,
  T_SYM,
  T_NUM,
  T_INT,  // an exact integer (int64 in `i`): counters, indices, sizes; structural, never on the tape
  T_PAIR,
  T_CLOSURE,
  T_PRIM,
};

enum NumFlag : uint8_t {
  NF_UNIFORM = 2,  // one value shared by all lanes: payload holds 1 lane instead of B
  NF_ACTIVE = 4,   // depends on a differentiated quantity: has an adjoint and a tape record
};

struct Lambda;

struct Value {
  uint8_t tag = T_UNSPEC;
  uint8_t flags = 0;
  uint8_t rank = 0;  // T_NUM: 0 scalar, 1 vector, 2 matrix
  uint8_t pad = 0;
  uint32_t rows = 0;  // T_NUM: vector length or matrix rows
  union {
    struct {
      uint32_t cols, off;
    } n;        // T_NUM: matrix columns, payload offset
    void* ptr;  // T_PAIR, T_CLOSURE
    int64_t i;  // T_BOOL, T_SYM, T_PRIM
  };
  Value() : i(0) {}

  bool is_num() const { return tag == T_NUM; }
  bool uniform() const { return flags & NF_UNIFORM; }
  bool active() const { return flags & NF_ACTIVE; }
  bool truthy() const { return !(tag == T_BOOL && i == 0); }
  // a number keeps rows = cols = 1 for a scalar and cols = 1 for a vector (VM::alloc_num and the
  // compiler's constants make them so), so its element count needs no branch on the rank
  uint32_t numel() const { return rows * n.cols; }
  uint32_t cols() const { return rank == 2 ? n.cols : 1u; }

  // clang-format off
  static Value make_bool(bool b) { Value v; v.tag = T_BOOL; v.i = b; return v; }
  static Value make_int(int64_t x) { Value v; v.tag = T_INT; v.rows = 1; v.i = x; return v; }
  static Value make_nil() { Value v; v.tag = T_NIL; return v; }
  static Value make_unspec() { Value v; v.tag = T_UNSPEC; return v; }
  static Value make_undef() { Value v; v.tag = T_UNDEF; return v; }
  static Value make_sym(int64_t id) { Value v; v.tag = T_SYM; v.i = id; return v; }
  static Value make_prim(int64_t id) { Value v; v.tag = T_PRIM; v.i = id; return v; }
  // clang-format on
};
static_assert(sizeof(Value) == 16, "Value must stay one 16-byte word");

struct Pair {
  Value car, cdr;
};

// An activation frame: parameters and every local of the lambda body (let-bound names are
// flattened into the enclosing lambda's frame at compile time).
struct Frame {
  Frame* parent;
  uint32_t size;
  Value slots[1];  // really `size` slots
};

struct Closure {
  const Lambda* lambda;
  Frame* env;
};

}  // namespace ndvm
