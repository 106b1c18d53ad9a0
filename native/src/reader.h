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
  bool exact = false;  // Number: written as an integer literal
  bool dotted = false; // List: has a tail after '.'
  double num = 0;
  int64_t inum = 0;    // Number, exact: the integer itself (num is its nearest double)
  bool boolean = false;
  std::string sym;
  std::vector<std::shared_ptr<Datum>> items;
  std::shared_ptr<Datum> tail;
  int line = 0, col = 0;

  bool is_sym(const char* s) const { return kind == Symbol && sym == s; }
  bool is_list() const { return kind == List && !dotted; }
};
using DatumP = std::shared_ptr<Datum>;

// Reads every top-level datum of `src`. Throws Error(Parse) on malformed input.
std::vector<DatumP> read_all(const std::string& src);

// Writes a datum back in Scheme notation (used by the canonical form and error messages).
std::string write_datum(const Datum& d);

}  // namespace ndvm
