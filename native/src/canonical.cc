// The canonical form of a program, for deduplication: local names alpha-renamed in binding order
// (v0, v1, ...), parameters renamed in order of first use (p0, p1, ...) with their constraints
// kept and their initial values dropped, inexact literals abstracted to C (exact integers are
// structure: loop bounds, indices), arguments of commutative operators (+ * min max) sorted.
#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>

#include "error.h"
#include "nesting.h"
#include "prims.h"
#include "program.h"
#include "reader.h"

namespace ndvm {
namespace {

class Canon {
 public:
  std::string run(const std::vector<DatumP>& forms) {
    std::vector<DatumP> body;
    for (auto& f : forms) {
      if (f->kind == Datum::List && !f->items.empty() && f->items[0]->is_sym("param") && f->items.size() >= 3 &&
          f->items[1]->kind == Datum::Symbol) {
        param_constraint_[f->items[1]->sym] = param_kind(f->items);
      } else {
        body.push_back(f);
      }
    }
    std::string b = body_forms(body);
    std::ostringstream o;
    o << "(params";
    for (auto& p : param_order_) o << " (" << param_name_[p] << ' ' << param_constraint_[p] << ')';
    o << ") " << b;
    return o.str();
  }

 private:
  // A parameter's constraint, with " shared" when it is shared across groups: (param NAME INIT
  // [CONSTRAINT] [shared]). A shared and a per-group parameter are different models.
  static std::string param_kind(const std::vector<DatumP>& items) {
    size_t n = items.size();
    const bool shared = n >= 4 && items.back()->is_sym("shared");
    if (shared) --n;
    std::string c = n == 4 ? write_datum(*items[3]) : "free";
    return shared ? c + " shared" : c;
  }

  const StackProbe probe_;  // the walk recurses per nesting level: bounded by the thread's stack
  std::vector<std::map<std::string, std::string>> scopes_;
  std::map<std::string, std::string> param_constraint_, param_name_;
  std::vector<std::string> param_order_;
  int next_var_ = 0;
  // While computing sort keys for commutative arguments, names are masked (P, V) so that the order
  // does not depend on which parameter happened to be named first.
  bool masking_ = false;

  // Masked keys by datum: a datum's key does not depend on where the walk comes from (bound names
  // are all V, parameters all P), and without the memo nested commutative operators recomputed
  // every inner key once per level above it (quadratic in the nesting depth).
  std::unordered_map<const Datum*, std::string> key_memo_;

  std::string sort_key(const Datum& d) {
    auto hit = key_memo_.find(&d);
    if (hit != key_memo_.end()) return hit->second;
    bool was = masking_;
    int saved = next_var_;
    masking_ = true;
    std::string k = expr(d);
    masking_ = was;
    next_var_ = saved;
    key_memo_.emplace(&d, k);
    return k;
  }

  std::string bind(const std::string& name) {
    std::string v = "v" + std::to_string(next_var_++);
    scopes_.back()[name] = v;
    return masking_ ? "V" : v;
  }
  bool bound(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (it->count(name)) return true;
    return false;
  }
  std::string ref(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return masking_ ? "V" : f->second;
    }
    if (param_constraint_.count(name)) {
      if (masking_) return "P";
      if (!param_name_.count(name)) {
        param_name_[name] = "p" + std::to_string(param_order_.size());
        param_order_.push_back(name);
      }
      return param_name_[name];
    }
    return name;  // inputs, primitives
  }
  bool head_is(const Datum& d, const char* s) const {
    return d.kind == Datum::List && !d.items.empty() && d.items[0]->is_sym(s) && !bound(s);
  }

  std::string body_forms(const std::vector<DatumP>& forms) {
    if (!forms.empty()) probe_.check("computing the canonical form", forms[0]->line, forms[0]->col);
    scopes_.emplace_back();
    for (auto& f : forms)
      if (head_is(*f, "define") && f->items.size() >= 2) {
        const Datum& t = *f->items[1];
        if (t.kind == Datum::Symbol) bind(t.sym);
        else if (t.kind == Datum::List && !t.items.empty() && t.items[0]->kind == Datum::Symbol) bind(t.items[0]->sym);
      }
    std::string out;
    for (auto& f : forms) {
      if (!out.empty()) out += ' ';
      if (head_is(*f, "define") && f->items.size() >= 3) {
        const Datum& t = *f->items[1];
        if (t.kind == Datum::Symbol) {
          out += "(define " + ref(t.sym) + ' ' + expr(*f->items[2]) + ')';
        } else if (t.kind == Datum::List && !t.items.empty()) {
          std::string name = ref(t.items[0]->sym);
          auto formals = std::make_shared<Datum>(t);
          formals->items.erase(formals->items.begin());
          std::vector<DatumP> body(f->items.begin() + 2, f->items.end());
          out += "(define " + name + ' ' + lambda(*formals, body) + ')';
        } else {
          out += expr(*f);
        }
      } else {
        out += expr(*f);
      }
    }
    scopes_.pop_back();
    return out;
  }

  std::string lambda(const Datum& formals, const std::vector<DatumP>& body) {
    scopes_.emplace_back();
    std::string f;
    if (formals.kind == Datum::Symbol) f = bind(formals.sym);
    else {
      f = "(";
      for (size_t i = 0; i < formals.items.size(); ++i) {
        if (i) f += ' ';
        f += formals.items[i]->kind == Datum::Symbol ? bind(formals.items[i]->sym) : expr(*formals.items[i]);
      }
      if (formals.dotted && formals.tail && formals.tail->kind == Datum::Symbol) f += " . " + bind(formals.tail->sym);
      f += ')';
    }
    std::string b = body_forms(body);
    scopes_.pop_back();
    return "(lambda " + f + ' ' + b + ')';
  }

  // (let/let*/letrec/loop/do [name] ((v init [step]) ...) body...)
  std::string let_like(const Datum& d, const std::string& kw, bool sequential, bool recursive) {
    size_t bi = (d.items.size() > 1 && d.items[1]->kind == Datum::Symbol) ? 2 : 1;
    if (d.items.size() <= bi || d.items[bi]->kind != Datum::List) return generic(d);
    const auto& bs = d.items[bi]->items;
    for (auto& b : bs)
      if (b->kind != Datum::List || b->items.size() < 2 || b->items[0]->kind != Datum::Symbol) return generic(d);
    std::vector<std::string> vars(bs.size()), inits(bs.size());
    std::string name;
    if (!sequential && !recursive) {  // parallel: inits see the outer scope
      for (size_t i = 0; i < bs.size(); ++i) inits[i] = expr(*bs[i]->items[1]);
      scopes_.emplace_back();
      if (bi == 2) name = bind(d.items[1]->sym);
      for (size_t i = 0; i < bs.size(); ++i) vars[i] = bind(bs[i]->items[0]->sym);
    } else if (recursive) {
      scopes_.emplace_back();
      for (size_t i = 0; i < bs.size(); ++i) vars[i] = bind(bs[i]->items[0]->sym);
      for (size_t i = 0; i < bs.size(); ++i) inits[i] = expr(*bs[i]->items[1]);
    } else {  // let*: each init sees the previous names
      scopes_.emplace_back();
      for (size_t i = 0; i < bs.size(); ++i) {
        inits[i] = expr(*bs[i]->items[1]);
        vars[i] = bind(bs[i]->items[0]->sym);
      }
    }
    for (size_t i = 0; i < bs.size(); ++i)  // do: steps see the loop variables
      for (size_t k = 2; k < bs[i]->items.size(); ++k) inits[i] += ' ' + expr(*bs[i]->items[k]);
    std::string out = '(' + kw + (name.empty() ? "" : ' ' + name) + " (";
    for (size_t i = 0; i < vars.size(); ++i) out += (i ? " (" : "(") + vars[i] + ' ' + inits[i] + ')';
    out += ')';
    std::vector<DatumP> body(d.items.begin() + bi + 1, d.items.end());
    if (kw == "do") {
      for (auto& f : body) out += ' ' + expr(*f);
    } else if (!body.empty()) {
      out += ' ' + body_forms(body);
    }
    scopes_.pop_back();
    return out + ')';
  }

  std::string generic(const Datum& d) {
    std::string out = "(";
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += ' ';
      out += expr(*d.items[i]);
    }
    if (d.dotted && d.tail) out += " . " + expr(*d.tail);
    return out + ')';
  }

  std::string expr(const Datum& d) {
    probe_.check("computing the canonical form", d.line, d.col);
    switch (d.kind) {
      case Datum::Number: return d.exact ? write_datum(d) : "C";
      case Datum::Bool: return d.boolean ? "#t" : "#f";
      case Datum::Symbol: return ref(d.sym);
      case Datum::List: break;
    }
    if (d.items.empty() || d.items[0]->kind != Datum::Symbol || bound(d.items[0]->sym)) return generic(d);
    const std::string& h = d.items[0]->sym;
    if (h == "quote") return write_datum(d);
    if (h == "lambda" && d.items.size() >= 3)
      return lambda(*d.items[1], std::vector<DatumP>(d.items.begin() + 2, d.items.end()));
    if (h == "let" || h == "loop") return let_like(d, h, false, false);
    if (h == "let*") return let_like(d, h, true, false);
    if (h == "letrec" || h == "letrec*") return let_like(d, h, false, true);
    if (h == "do") return let_like(d, h, false, false);
    if ((h == "+" || h == "*" || h == "min" || h == "max") && !param_constraint_.count(h)) {
      std::vector<std::pair<std::string, size_t>> keyed;
      for (size_t i = 1; i < d.items.size(); ++i) keyed.emplace_back(sort_key(*d.items[i]), i);
      std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      std::string out = '(' + h;
      for (auto& k : keyed) out += ' ' + (masking_ ? k.first : expr(*d.items[k.second]));
      return out + ')';
    }
    return generic(d);
  }
};

}  // namespace

std::string canonical_form(const std::string& source) { return Canon().run(read_all(source)); }

}  // namespace ndvm
