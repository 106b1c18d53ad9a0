#include "reader.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "error.h"
#include "nesting.h"

namespace ndvm {
namespace {

// Nesting deeper than max_nesting (kMaxNesting, nesting.h, unless the caller asks for less) is
// rejected with a ParseError; the reader recurses only per level of nesting (lists, quote
// prefixes, dotted tails), never per element or comment.

class Reader {
 public:
  Reader(const std::string& s, uint64_t max_bytes, int max_nesting)
      : src_(s), max_bytes_(max_bytes), max_nesting_(max_nesting > 0 ? max_nesting : kMaxNesting) {}
  uint64_t charged() const { return datums_ * kDatumBytes; }

  std::vector<DatumP> all() {
    std::vector<DatumP> out;
    for (;;) {
      skip_space(0);
      if (at_end()) break;
      if (peek() == ')') parse_error("unexpected ')'", line_, col_);
      out.push_back(datum(0));
    }
    return out;
  }

 private:
  const StackProbe probe_;
  const std::string& src_;
  const uint64_t max_bytes_;  // 0: no budget
  const int max_nesting_;
  uint64_t datums_ = 0;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;

  bool at_end() const { return pos_ >= src_.size(); }
  char peek() const { return src_[pos_]; }
  char next() {
    char c = src_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  // Skips whitespace, line comments, block comments and datum comments. A datum comment `#;`
  // drops the datum after it; a run of them (`#; #; a b`) is counted, not recursed, so any number
  // costs constant C stack. `depth` is the nesting level of the datum that follows.
  void skip_space(int depth) {
    int pending = 0;     // datum comments still waiting for their datum
    int pl = 0, pc = 0;  // where the first of them is
    for (;;) {
      skip_plain_space();
      if (!at_end() && peek() == '#' && pos_ + 1 < src_.size() && src_[pos_ + 1] == ';') {
        if (pending == 0) {
          pl = line_;
          pc = col_;
        }
        next();
        next();
        ++pending;
        continue;
      }
      if (pending == 0) return;
      if (at_end() || peek() == ')' || peek() == ']') parse_error("#; comment without a datum", pl, pc);
      datum(depth);  // read and drop (it starts here, so its own skip_space returns at once)
      --pending;
    }
  }

  void skip_plain_space() {
    while (!at_end()) {
      char c = peek();
      if (c == ';') {
        while (!at_end() && peek() != '\n') next();
      } else if (c == '#' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '|') {
        int l = line_, co = col_, depth = 0;
        do {
          if (at_end()) parse_error("unterminated block comment #|", l, co);
          if (peek() == '#' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '|') {
            next();
            next();
            ++depth;
          } else if (peek() == '|' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '#') {
            next();
            next();
            --depth;
          } else next();
        } while (depth > 0);
      } else if (isspace(static_cast<unsigned char>(c))) {
        next();
      } else {
        break;
      }
    }
  }

  static bool delimiter(char c) {
    return isspace(static_cast<unsigned char>(c)) || c == '(' || c == ')' || c == '[' || c == ']' || c == '"' ||
           c == ';' || c == '\'';
  }

  DatumP make(Datum::Kind k, int l, int c) {
    // A 4 MB source can need 300 MB of syntax tree: the tree is charged to the memory budget.
    if (max_bytes_ && ++datums_ * kDatumBytes > max_bytes_)
      limit_error("memory budget (max_bytes=" + std::to_string(max_bytes_ >> 20) +
                      " MiB) exceeded while reading the program: its syntax tree needs more than that (" +
                      std::to_string(datums_) + " datums so far); raise Limits.max_bytes for a program this large",
                  l, c);
    auto d = std::make_shared<Datum>();
    d->kind = k;
    d->line = l;
    d->col = c;
    return d;
  }

  DatumP datum(int depth) {
    if (depth > max_nesting_)
      parse_error("nesting deeper than " + std::to_string(max_nesting_) + " levels (the nesting limit)", line_, col_);
    probe_.check("reading", line_, col_);
    skip_space(depth);
    if (at_end()) parse_error("unexpected end of input", line_, col_);
    int l = line_, c = col_;
    char ch = peek();
    if (ch == '(' || ch == '[') {
      char close = ch == '(' ? ')' : ']';
      next();
      auto d = make(Datum::List, l, c);
      for (;;) {
        skip_space(depth + 1);
        if (at_end()) parse_error(std::string("unbalanced '") + ch + "': missing '" + close + "'", l, c);
        char p = peek();
        if (p == ')' || p == ']') {
          if (p != close) parse_error(std::string("'") + ch + "' closed by '" + p + "'", line_, col_);
          next();
          return d;
        }
        if (p == '.' && pos_ + 1 < src_.size() && delimiter(src_[pos_ + 1])) {
          int dl = line_, dc = col_;
          next();
          if (d->items.empty()) parse_error("'.' with nothing before it", dl, dc);
          d->tail = datum(depth + 1);
          d->dotted = true;
          skip_space(depth + 1);
          if (at_end() || (peek() != close))
            parse_error(std::string("expected '") + close + "' after the dotted tail", line_, col_);
          next();
          return d;
        }
        d->items.push_back(datum(depth + 1));
      }
    }
    if (ch == ')' || ch == ']') parse_error(std::string("unexpected '") + ch + "'", l, c);
    if (ch == '\'') {
      next();
      auto d = make(Datum::List, l, c);
      auto q = make(Datum::Symbol, l, c);
      q->sym = "quote";
      d->items.push_back(q);
      d->items.push_back(datum(depth + 1));
      return d;
    }
    if (ch == '"') parse_error("strings are not supported by the language", l, c);
    if (ch == '`' || ch == ',') parse_error("quasiquote is not supported by the language", l, c);
    // '(' ends a token, so "#(" would otherwise read as the token "#"
    if (ch == '#' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '(')
      parse_error("vector literals #( ... ) are not supported; use (vec ...)", l, c);
    // an atom
    size_t start = pos_;
    while (!at_end() && !delimiter(peek())) next();
    std::string tok = src_.substr(start, pos_ - start);
    if (tok.empty()) parse_error(std::string("unreadable character '") + ch + "'", l, c);
    if (tok == ".") parse_error("'.' outside a list", l, c);
    return atom(tok, l, c);
  }

  DatumP atom(const std::string& tok, int l, int c) {
    if (tok[0] == '#') {
      if (tok == "#t" || tok == "#true") {
        auto d = make(Datum::Bool, l, c);
        d->boolean = true;
        return d;
      }
      if (tok == "#f" || tok == "#false") {
        auto d = make(Datum::Bool, l, c);
        d->boolean = false;
        return d;
      }
      if (tok.size() > 1 && tok[1] == '\\') parse_error("characters are not supported by the language", l, c);
      parse_error("unreadable token '" + tok + "'", l, c);
    }
    if (tok == "+inf.0" || tok == "-inf.0" || tok == "+nan.0" || tok == "-nan.0") {
      auto d = make(Datum::Number, l, c);
      d->num = tok[1] == 'i' ? (tok[0] == '-' ? -INFINITY : INFINITY) : NAN;
      return d;
    }
    // C's hexadecimal numbers (0x10, 0x1p3) are no Scheme syntax: read as symbols, as Guile does
    // (strtod below would take them)
    if (looks_numeric(tok) && !looks_hex(tok)) {
      for (char ch : tok)  // decimal syntax only: digits, sign, point, exponent
        if (!(isdigit(static_cast<unsigned char>(ch)) || ch == '+' || ch == '-' || ch == '.' || ch == 'e' || ch == 'E'))
          parse_error("malformed number '" + tok + "'", l, c);
      bool is_int = true;
      for (size_t i = 0; i < tok.size(); ++i) {
        char ch = tok[i];
        if (!(isdigit(static_cast<unsigned char>(ch)) || ((ch == '-' || ch == '+') && i == 0))) {
          is_int = false;
          break;
        }
      }
      char* end = nullptr;
      double v = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size()) parse_error("malformed number '" + tok + "'", l, c);
      auto d = make(Datum::Number, l, c);
      d->num = v;
      if (is_int) {  // exact if it fits in 64 bits (there are no bignums: larger ones are inexact)
        errno = 0;
        long long iv = std::strtoll(tok.c_str(), &end, 10);
        if (errno == 0 && end == tok.c_str() + tok.size()) {
          d->exact = true;
          d->inum = iv;
        }
      }
      return d;
    }
    for (char ch : tok)
      if (ch == '|' || ch == '#' || ch == '[' || ch == ']' || ch == '{' || ch == '}' ||
          static_cast<unsigned char>(ch) < 32)
        parse_error("unreadable symbol '" + tok + "'", l, c);
    auto d = make(Datum::Symbol, l, c);
    d->sym = tok;
    return d;
  }

  static bool looks_hex(const std::string& t) {
    size_t i = (t[0] == '+' || t[0] == '-') ? 1 : 0;
    return t.size() > i + 1 && t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X');
  }
  static bool looks_numeric(const std::string& t) {
    size_t i = 0;
    if (t[0] == '+' || t[0] == '-') i = 1;
    if (i >= t.size()) return false;
    if (isdigit(static_cast<unsigned char>(t[i]))) return true;
    return t[i] == '.' && i + 1 < t.size() && isdigit(static_cast<unsigned char>(t[i + 1]));
  }
};

void write_rec(const Datum& d, std::ostringstream& o, const StackProbe& probe) {
  probe.check("writing a datum", d.line, d.col);
  switch (d.kind) {
    case Datum::Number: {
      if (d.exact) {
        o << static_cast<long long>(d.inum);
        break;
      }
      char buf[64];
      snprintf(buf, sizeof buf, "%.17g", d.num);
      o << buf;
      break;
    }
    case Datum::Symbol: o << d.sym; break;
    case Datum::Bool: o << (d.boolean ? "#t" : "#f"); break;
    case Datum::List:
      o << '(';
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) o << ' ';
        write_rec(*d.items[i], o, probe);
      }
      if (d.dotted) {
        o << " . ";
        write_rec(*d.tail, o, probe);
      }
      o << ')';
      break;
  }
}

}  // namespace

std::vector<DatumP> read_all(const std::string& src, uint64_t max_bytes, uint64_t* used, int max_nesting) {
  Reader r(src, max_bytes, max_nesting);
  auto forms = r.all();
  if (used) *used = r.charged();
  return forms;
}

std::string write_datum(const Datum& d) {
  std::ostringstream o;
  const StackProbe probe;
  write_rec(d, o, probe);
  return o.str();
}

}  // namespace ndvm
