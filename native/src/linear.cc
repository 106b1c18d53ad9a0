// Variable projection's two parts (linear.h): which parameters enter the result affinely, and the
// least-squares solve for their values.
#include "linear.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ast.h"
#include "prims.h"
#include "program.h"
#include "reader.h"

namespace ndvm {

namespace {

using ParamSet = std::vector<int>;  // parameter indices, ascending

// Deeper sums and products than this are not looked into (their parameters count as nonlinear):
// the walk recurses, and a law's outer structure is a few levels deep.
constexpr int kMaxAffineDepth = 64;

enum class Shape { Sum, Product, Quotient, Other };

Shape shape_of(const Node* n) {
  if (n->kind == N_ARITH2) return n->a == 0 || n->a == 1 ? Shape::Sum : n->a == 2 ? Shape::Product : Shape::Quotient;
  if (n->kind != N_PRIMCALL) return Shape::Other;
  if (n->a == P_ADD || n->a == P_SUB) return Shape::Sum;  // (- u) and (- u v w) too
  if (n->a == P_MUL) return Shape::Product;
  if (n->a == P_DIV && n->kids.size() >= 2) return Shape::Quotient;  // (/ u) is 1/u: not affine
  return Shape::Other;
}

// Occurrences of each parameter in the subtree of `root`, lambda bodies included (explicit stack:
// a program may nest deeper than the C stack allows to recurse).
std::vector<int> occurrences(const Node* root, size_t P) {
  std::vector<int> count(P, 0);
  std::vector<const Node*> todo{root};
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!n) continue;
    if (n->kind == N_PARAM) ++count[static_cast<size_t>(n->a)];
    if (n->lam) todo.push_back(n->lam->body);
    for (const Node* kid : n->kids) todo.push_back(kid);
  }
  return count;
}

bool contains(const ParamSet& s, int j) { return std::binary_search(s.begin(), s.end(), j); }

// The parameters in which the value of n is jointly affine (the others held fixed).
ParamSet affine_in(const Program& p, const Node* n, int depth) {
  if (!n || depth > kMaxAffineDepth) return {};
  if (n->kind == N_PARAM) {
    const ParamDecl& d = p.params[static_cast<size_t>(n->a)];
    if (d.constraint == C_FREE && !d.shared) return {n->a};
    return {};
  }
  const Shape shape = shape_of(n);
  if (shape == Shape::Other) return {};
  const size_t K = n->kids.size(), P = p.params.size();
  std::vector<ParamSet> kid_sets(K);
  std::vector<std::vector<int>> kid_counts(K);
  for (size_t i = 0; i < K; ++i) {
    kid_sets[i] = affine_in(p, n->kids[i], depth + 1);
    kid_counts[i] = occurrences(n->kids[i], P);
  }
  // kid i's affine parameters that no other kid mentions
  auto alone_in = [&](size_t i) {
    ParamSet out;
    for (int j : kid_sets[i]) {
      bool elsewhere = false;
      for (size_t o = 0; o < K && !elsewhere; ++o) elsewhere = o != i && kid_counts[o][static_cast<size_t>(j)] > 0;
      if (!elsewhere) out.push_back(j);
    }
    return out;
  };
  if (shape == Shape::Sum) {  // affine in a parameter that every term mentioning it is affine in
    ParamSet out;
    for (size_t i = 0; i < K; ++i)
      for (int j : kid_sets[i]) {
        bool ok = !contains(out, j);
        for (size_t o = 0; o < K && ok; ++o)
          ok = kid_counts[o][static_cast<size_t>(j)] == 0 || contains(kid_sets[o], j);
        if (ok) out.insert(std::upper_bound(out.begin(), out.end(), j), j);
      }
    return out;
  }
  if (shape == Shape::Quotient) return alone_in(0);  // (/ u v ...): where u is affine and v ... do not look
  // a product is affine in the parameters of one factor that the others do not mention (two
  // factors' parameters together would make it bilinear): the factor with the most
  ParamSet best;
  for (size_t i = 0; i < K; ++i) {
    ParamSet s = alone_in(i);
    if (s.size() > best.size()) best = std::move(s);
  }
  return best;
}

}  // namespace

std::vector<int> find_linear_params(const Program& p) {
  if (!p.top || !p.top->body || p.params.empty()) return {};
  const Node* body = p.top->body;
  const Node* result = body->kind == N_SEQ && !body->kids.empty() ? body->kids.back() : body;
  ParamSet candidates = affine_in(p, result, 0);
  if (candidates.empty()) return {};
  // a parameter also used by a define before the result (or anywhere else) is not solved for
  const std::vector<int> in_result = occurrences(result, p.params.size());
  const std::vector<int> in_program = occurrences(body, p.params.size());
  ParamSet out;
  for (int j : candidates)
    if (in_result[static_cast<size_t>(j)] == in_program[static_cast<size_t>(j)]) out.push_back(j);
  return out;
}

namespace {

// The result split as a + sum_j c_j b_j over the solved parameters, as read trees (a null: 0).
struct Split {
  DatumP a;
  std::vector<std::pair<int, DatumP>> b;  // by parameter, ascending
  bool ok = true;
};

DatumP symbol(const char* name) {
  auto d = std::make_shared<Datum>();
  d->kind = Datum::Symbol;
  d->sym = name;
  return d;
}

DatumP integer(int v) {
  auto d = std::make_shared<Datum>();
  d->kind = Datum::Number;
  d->exact = true;
  d->inum = v;
  d->num = v;
  return d;
}

DatumP call(const char* op, std::vector<DatumP> args) {
  if (args.size() == 1 && (op[0] == '+' || op[0] == '*')) return args[0];
  auto d = std::make_shared<Datum>();
  d->kind = Datum::List;
  d->items.push_back(symbol(op));
  for (DatumP& a : args) d->items.push_back(std::move(a));
  return d;
}

const char* op_name(const Node* n) {
  switch (shape_of(n)) {
    case Shape::Sum: return n->kind == N_ARITH2 ? (n->a == 0 ? "+" : "-") : (n->a == P_ADD ? "+" : "-");
    case Shape::Product: return "*";
    case Shape::Quotient: return "/";
    case Shape::Other: return nullptr;
  }
  return nullptr;
}

// Walks the compiled result `n` and the read datum `d` it was compiled from side by side: the
// node decides (primitives, not names that a define could rebind), the datum is what is copied.
Split split(const Program& p, const Node* n, const DatumP& d, const ParamSet& solved) {
  const std::vector<int> count = occurrences(n, p.params.size());
  bool any = false;
  for (int j : solved) any = any || count[static_cast<size_t>(j)] > 0;
  if (!any) return Split{d, {}, true};
  if (n->kind == N_PARAM) return Split{nullptr, {{n->a, integer(1)}}, true};
  const char* op = op_name(n);
  if (!op || !d->is_list() || d->items.size() != n->kids.size() + 1) return Split{nullptr, {}, false};
  std::vector<Split> kids;
  for (size_t i = 0; i < n->kids.size(); ++i) {
    kids.push_back(split(p, n->kids[i], d->items[i + 1], solved));
    if (!kids.back().ok) return Split{nullptr, {}, false};
  }
  Split out;
  if (op[0] == '+' || op[0] == '-') {
    // (- u) negates; (- u v ...) subtracts the rest from the first: a missing part is 0
    const bool sub = op[0] == '-';
    std::vector<DatumP> as;
    bool any_a = false;
    for (Split& k : kids) {
      any_a = any_a || k.a;
      as.push_back(k.a ? k.a : integer(0));
    }
    if (any_a)
      out.a = sub ? call("-", as) : call("+", [&] {
        std::vector<DatumP> present;
        for (Split& k : kids)
          if (k.a) present.push_back(k.a);
        return present;
      }());
    for (int j : solved) {
      std::vector<DatumP> bs;
      bool has = false;
      for (Split& k : kids) {
        DatumP bj;
        for (auto& [param, datum] : k.b)
          if (param == j) bj = datum;
        has = has || bj;
        if (sub) bs.push_back(bj ? bj : integer(0));
        else if (bj) bs.push_back(bj);
      }
      if (has) out.b.emplace_back(j, call(sub ? "-" : "+", bs));
    }
    return out;
  }
  // a product or a quotient: one factor (the numerator) holds every solved parameter here; the
  // others multiply (divide) each of its parts, in their places (the operands may be matrices)
  size_t holder = n->kids.size();
  for (size_t i = 0; i < kids.size(); ++i)
    if (!kids[i].b.empty()) {
      if (holder != n->kids.size()) return Split{nullptr, {}, false};
      holder = i;
    }
  if (holder == n->kids.size() || (op[0] == '/' && holder != 0)) return Split{nullptr, {}, false};
  auto with = [&](const DatumP& part) {
    std::vector<DatumP> args;
    const bool unit = part->kind == Datum::Number && part->exact && part->inum == 1 && op[0] == '*';
    for (size_t i = 0; i < kids.size(); ++i)
      if (i != holder) args.push_back(d->items[i + 1]);
      else if (!unit) args.push_back(part);  // a factor 1 (the parameter itself) is left out

    return op[0] == '/' ? call("/", args) : call("*", args);
  };
  if (kids[holder].a) out.a = with(kids[holder].a);
  for (auto& [j, bj] : kids[holder].b) out.b.emplace_back(j, with(bj));
  return out;
}

bool defines_one_of(const Datum& form, std::initializer_list<const char*> names) {
  if (!form.is_list() || form.items.size() < 2 || !form.items[0]->is_sym("define")) return false;
  const Datum& target = *form.items[1];
  const Datum* name = target.kind == Datum::List && !target.items.empty() ? target.items[0].get() : &target;
  for (const char* n : names)
    if (name->is_sym(n)) return true;
  return false;
}

}  // namespace

std::string basis_source(const Program& p, const std::vector<DatumP>& forms) {
  if (p.linear_params.empty() || !p.top || !p.top->body) return "";
  std::vector<DatumP> body;
  for (const DatumP& f : forms) {
    if (defines_one_of(*f, {"+", "-", "*", "/", "list"})) return "";  // the basis would call them
    if (!(f->is_list() && !f->items.empty() && f->items[0]->is_sym("param"))) body.push_back(f);
  }
  if (body.empty() || (body.back()->is_list() && !body.back()->items.empty() && body.back()->items[0]->is_sym("begin")))
    return "";
  const Node* top = p.top->body;
  const Node* result = top->kind == N_SEQ && !top->kids.empty() ? top->kids.back() : top;
  Split parts = split(p, result, body.back(), p.linear_params);
  if (!parts.ok || parts.b.size() != p.linear_params.size()) return "";
  std::string out;
  for (const DatumP& f : forms)
    if (f != body.back()) out += write_datum(*f) + "\n";
  std::vector<DatumP> columns{parts.a ? parts.a : integer(0)};
  for (auto& [j, bj] : parts.b) columns.push_back(bj);
  auto list = std::make_shared<Datum>();
  list->kind = Datum::List;
  list->items.push_back(symbol("list"));
  for (DatumP& c : columns) list->items.push_back(c);
  return out + write_datum(*list) + "\n";
}

bool solve_normal_equations(uint32_t n, int k, const double* const* base, const size_t* stride, const double* t,
                            std::vector<double>& gram, double* c) {
  // gram: the k x k matrix X'X (upper triangle, row-major) then X'r, r = t - x_0
  const size_t K = static_cast<size_t>(k);
  gram.assign(K * K + K, 0.0);
  double* G = gram.data();
  double* g = G + K * K;
  double x[64];
  if (k > 64) return false;  // more solved parameters than any program declares in practice
  for (uint32_t e = 0; e < n; ++e) {
    const double r = t[e] - base[0][e * stride[0]];
    for (size_t j = 0; j < K; ++j) x[j] = base[j + 1][e * stride[j + 1]];
    for (size_t j = 0; j < K; ++j) {
      const double xj = x[j];
      double* row = G + j * K;
      for (size_t l = j; l < K; ++l) row[l] += xj * x[l];
      g[j] += xj * r;
    }
  }
  for (size_t i = 0; i < K * K + K; ++i)
    if (!std::isfinite(G[i])) return false;
  // unit diagonal: c = D^-1 y with (D^-1 G D^-1) y = D^-1 g, D = sqrt(diag G)
  double scale[64];
  for (size_t j = 0; j < K; ++j) scale[j] = G[j * K + j] > 0 ? 1.0 / std::sqrt(G[j * K + j]) : 0.0;
  for (size_t j = 0; j < K; ++j) {
    for (size_t l = j; l < K; ++l) G[j * K + l] *= scale[j] * scale[l];
    g[j] *= scale[j];
  }
  // Cholesky G = R'R in place (upper), dropping dependent columns
  bool dropped[64] = {};
  for (size_t j = 0; j < K; ++j) {
    double d = G[j * K + j];
    for (size_t i = 0; i < j; ++i) d -= G[i * K + j] * G[i * K + j];
    if (scale[j] == 0 || !(d > 1e-12)) {
      dropped[j] = true;
      for (size_t l = j; l < K; ++l) G[j * K + l] = 0;
      continue;
    }
    const double rjj = std::sqrt(d);
    G[j * K + j] = rjj;
    for (size_t l = j + 1; l < K; ++l) {
      double v = G[j * K + l];
      for (size_t i = 0; i < j; ++i) v -= G[i * K + j] * G[i * K + l];
      G[j * K + l] = v / rjj;
    }
  }
  // R'z = g, then R y = z
  double z[64];
  for (size_t j = 0; j < K; ++j) {
    if (dropped[j]) {
      z[j] = 0;
      continue;
    }
    double v = g[j];
    for (size_t i = 0; i < j; ++i) v -= G[i * K + j] * z[i];
    z[j] = v / G[j * K + j];
  }
  double y[64];  // the scaled solution (dropped columns 0; their entries of R are 0 too)
  for (size_t j = K; j-- > 0;) {
    y[j] = 0;
    if (dropped[j]) continue;
    double v = z[j];
    for (size_t l = j + 1; l < K; ++l) v -= G[j * K + l] * y[l];
    y[j] = v / G[j * K + j];
  }
  for (size_t j = 0; j < K; ++j) c[j] = y[j] * scale[j];
  for (size_t j = 0; j < K; ++j)
    if (!std::isfinite(c[j])) return false;
  return true;
}

}  // namespace ndvm
