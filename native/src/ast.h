// The compiled form of a program: a tree of resolved nodes. Names are gone: locals are (depth,
// slot) lexical addresses, parameters and inputs are indices, primitives are enum ids, constants
// are pooled Values. The VM (vm.cc) walks this tree in one dispatch loop.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "value.h"

namespace ndvm {

enum NodeKind : uint8_t {
  N_CONST,     // k
  N_LOCAL,     // a = depth (frames up), b = slot
  N_PARAM,     // a = parameter index
  N_INPUT,     // a = input index
  N_IF,        // kids: test, then, else (else may be null: unspecified)
  N_SEQ,       // kids evaluated in order, value of the last
  N_BIND,      // frame slot b (depth 0) := kids[0]; value unspecified
  N_LAMBDA,    // lam: creates a closure over the current frame
  N_CALL,      // kids[0] operator, kids[1..] operands
  N_PRIMCALL,  // a = primitive id, kids operands
  N_AND,       // kids
  N_OR,        // kids
  N_LOOP,      // a frame-reusing loop: slots[i] := kids[i] for the inits, then body = kids.back()
  N_RECUR,     // loop: target N_LOOP; kids are the new values of its slots; jumps to its body
  N_ARITH2,    // a = Op (+ - * / with exactly two operands): skips the generic primitive call
};

struct Lambda;

struct Node {
  NodeKind kind;
  bool tail = false;  // in tail position of its lambda (or of its loop, for N_RECUR)
  int32_t line = 0, col = 0;
  int32_t a = 0, b = 0;
  Value k;
  std::vector<Node*> kids;
  std::vector<int32_t> slots;  // N_LOOP
  const Lambda* lam = nullptr;
  const Node* loop = nullptr;  // N_RECUR
  std::string name;            // the source name (variables, calls): for error messages
};

struct Lambda {
  int nreq = 0;        // required parameters
  bool rest = false;   // a rest parameter collects the remaining arguments as a list
  int frame_size = 0;  // parameters + flattened locals
  Node* body = nullptr;
  std::string name;  // "f" for (define (f ...) ...), "lambda" otherwise
  int line = 0, col = 0;
};

}  // namespace ndvm
