// The reader: source text -> Datum trees with source positions.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ndvm {

// A read datum. Lists keep their elements in `items`; a dotted tail is in `tail`.
struct Datum {
  enum Kind : uint8_t { Number, Symbol, Bool, List } kind;
  bool exact = false;   // Number: written as an integer literal
  bool dotted = false;  // List: has a tail after '.'
  double num = 0;
  int64_t inum = 0;  // Number, exact: the integer itself (num is its nearest double)
  bool boolean = false;
  std::string sym;
  std::vector<std::shared_ptr<Datum>> items;
  std::shared_ptr<Datum> tail;
  int line = 0, col = 0;

  bool is_sym(const char* s) const { return kind == Symbol && sym == s; }
  bool is_list() const { return kind == List && !dotted; }
};
using DatumP = std::shared_ptr<Datum>;

// Reads every top-level datum of `src`. Throws Error(Parse) on malformed input. With a
// `max_bytes` budget (0: none), a source whose syntax tree would need more memory throws
// Error(Limit) naming the memory budget; `used` (optional) receives what the tree was charged.
// `max_nesting` (0: kMaxNesting, nesting.h) bounds the levels of nesting; a caller that walks the
// tree with less stack than the runtime (the Python proposers) asks for fewer.
std::vector<DatumP> read_all(const std::string& src, uint64_t max_bytes = 0, uint64_t* used = nullptr,
                             int max_nesting = 0);

// What one datum of a read tree costs, as charged against a memory budget: the struct, the
// shared_ptr control block, its slot in the parent's vector and the allocator's overhead.
constexpr uint64_t kDatumBytes = sizeof(Datum) + 56;

// Writes a datum back in Scheme notation (used by the canonical form and error messages).
std::string write_datum(const Datum& d);

}  // namespace ndvm
