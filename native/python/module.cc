// The Python module ndvm._native: compile, evaluate, value and gradient, run, calibrate.
// Arrays cross the boundary as numpy buffers; the GIL is released during native work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <unordered_map>

#include "error.h"
#include "forms.h"
#include "nesting.h"
#include "optim.h"
#include "prims.h"
#include "program.h"
#include "reader.h"
#include "shared.h"
#include "simd.h"
#include "vm.h"

namespace py = pybind11;
using namespace ndvm;

namespace {

using Arr = py::array_t<double, py::array::c_style | py::array::forcecast>;

VM& thread_vm() {
  thread_local std::unique_ptr<VM> vm;
  if (!vm) vm = make_vm();
  return *vm;
}

// A read datum as Python data, the shapes the proposers work on (ndvm/language.py): Symbol,
// int (exact literal), float, bool, list, Dotted(items, tail) for an improper list. Recurses once
// per level of nesting, which the reader has already bounded; the probe guards small thread stacks.
py::object datum_to_python(const Datum& d, const py::handle& symbol, const py::handle& dotted,
                           const StackProbe& probe) {
  probe.check("converting a datum to Python", d.line, d.col);
  switch (d.kind) {
    case Datum::Number:
      if (d.exact) return py::int_(static_cast<long long>(d.inum));
      return py::float_(d.num);
    case Datum::Symbol: return symbol(d.sym);
    case Datum::Bool: return py::bool_(d.boolean);
    case Datum::List: {
      py::list items;
      for (auto& it : d.items) items.append(datum_to_python(*it, symbol, dotted, probe));
      if (!d.dotted) return std::move(items);
      return dotted(py::tuple(items), datum_to_python(*d.tail, symbol, dotted, probe));
    }
  }
  return py::none();
}

// `obj` as float64, refusing what forcecast would convert with a loss: complex numbers (the
// imaginary part dropped), objects, strings, dates. ndvm's Python side refuses them first, with an
// EvalError; this guards direct callers of ndvm._native.
Arr real_arr(py::handle obj, const std::string& what) {
  py::array raw = py::array::ensure(obj);
  if (!raw) throw py::type_error(what + " is not numeric");
  const char kind = raw.dtype().kind();
  if (kind != 'b' && kind != 'i' && kind != 'u' && kind != 'f')
    throw py::type_error(what + " is not an array of real numbers (dtype kind '" + std::string(1, kind) + "')");
  Arr a = Arr::ensure(raw);
  if (!a) throw py::type_error(what + " is not numeric");
  return a;
}

Array array_from(py::handle obj, const std::string& name, bool leading_lane = false, size_t lane = 0) {
  // the rank comes from the original object: array_t's conversion turns 0-d arrays into 1-d ones
  py::array raw = py::array::ensure(obj);
  if (!raw) throw py::type_error("input '" + name + "' is not numeric");
  Arr a = real_arr(raw, "input '" + name + "'");
  if (!a) throw py::type_error("input '" + name + "' is not numeric");
  Array out;
  int nd = static_cast<int>(raw.ndim()) - (leading_lane ? 1 : 0);
  if (nd > 2)
    throw py::value_error("input '" + name + "' has " + std::to_string(nd) + " dimensions; at most 2 (a matrix)");
  out.rank = nd;
  size_t off = 0, count = 1;
  for (int d = 0; d < nd; ++d)  // the runtime's dimensions are 32-bit: refuse, never truncate
    if (a.shape(d + (leading_lane ? 1 : 0)) > static_cast<py::ssize_t>(UINT32_MAX))
      throw py::value_error("input '" + name + "' has a dimension of " +
                            std::to_string(a.shape(d + (leading_lane ? 1 : 0))) + "; at most 4294967295");
  if (nd >= 1) out.rows = static_cast<uint32_t>(a.shape(leading_lane ? 1 : 0));
  if (nd == 2) out.cols = static_cast<uint32_t>(a.shape(leading_lane ? 2 : 1));
  count = out.numel();
  if (count == 0) throw py::value_error("input '" + name + "' is empty");
  if (leading_lane) off = lane * count;
  out.data.assign(a.data() + off, a.data() + off + count);
  return out;
}

Inputs inputs_from(const Program& p, py::dict shared, py::dict lane, int B) {
  Inputs in;
  in.shared.resize(p.inputs.size());
  in.per_lane.resize(p.inputs.size());
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    py::str key(p.inputs[i]);
    if (lane.contains(key)) {
      Arr a = real_arr(lane[key], "lane input '" + p.inputs[i] + "'");
      if (a.ndim() < 1) throw py::value_error("lane input '" + p.inputs[i] + "' needs a leading lane axis");
      int lanes = static_cast<int>(a.shape(0));
      if (B >= 0 && lanes != B)
        throw py::value_error("lane input '" + p.inputs[i] + "' has " + std::to_string(lanes) + " lanes, expected " +
                              std::to_string(B));
      for (int l = 0; l < lanes; ++l) in.per_lane[i].push_back(array_from(a, p.inputs[i], true, l));
    } else if (shared.contains(key)) {
      in.shared[i] = array_from(shared[key], p.inputs[i]);
    }
  }
  return in;
}

// Every NaN leaves the runtime as the one quiet NaN (0x7ff8000000000000): x86 makes negative NaNs
// of inf - inf or 0 * inf, so a lane's NaN could differ in sign from its one-lane run's, where
// another path made it; canonical NaNs keep "every lane bit for bit its one-lane run" true.
inline double canonical(double x) { return x == x ? x : std::numeric_limits<double>::quiet_NaN(); }

py::array shaped(const std::vector<double>& v, std::vector<py::ssize_t> shape) {
  py::array_t<double> a(shape);
  double* out = a.mutable_data();
  for (size_t i = 0; i < v.size(); ++i) out[i] = canonical(v[i]);
  return std::move(a);
}

// A per-lane count vector as an int64 array [n].
py::array shaped_int(const std::vector<int>& v) {
  py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) a.mutable_data()[i] = v[i];
  return std::move(a);
}

py::array values_array(const BatchResult& r, int B) {
  std::vector<py::ssize_t> shape{B};
  if (r.rank >= 1) shape.push_back(r.rows);
  if (r.rank == 2) shape.push_back(r.cols);
  return shaped(r.values, shape);
}

void check_theta(const Program& p, const Arr& theta) {
  if (theta.ndim() != 2 || theta.shape(1) != static_cast<py::ssize_t>(p.params.size()))
    throw py::value_error("theta must have shape [B, " + std::to_string(p.params.size()) +
                          "] (one column per parameter)");
  if (theta.shape(0) < 1) throw py::value_error("theta must have at least one row");
}

// The result of `run` as Python data, under the wall clock of its evaluation (Limits.max_seconds
// polled every 4,096 values): building 10^7 Python objects takes seconds too.
py::object to_python(const OutValue& v, VM& vm, uint64_t& count) {
  if ((++count & 4095) == 0) vm.poll_clock(nullptr);
  switch (v.kind) {
    case OutValue::Unspec: return py::none();
    case OutValue::Nil: return py::list();
    case OutValue::Bool: return py::bool_(v.b);
    case OutValue::Sym: return py::module_::import("ndvm.values").attr("Symbol")(v.sym);
    case OutValue::Int: return py::int_(static_cast<long long>(v.inum));
    case OutValue::Real: return py::float_(canonical(v.num));
    case OutValue::Procedure: return py::module_::import("ndvm.values").attr("Procedure")();
    case OutValue::Array_: {
      std::vector<py::ssize_t> shape;
      if (v.arr.rank >= 1) shape.push_back(v.arr.rows);
      if (v.arr.rank == 2) shape.push_back(v.arr.cols);
      return shaped(v.arr.data, shape);
    }
    case OutValue::List: {
      py::list l;
      for (auto& it : v.items) l.append(to_python(it, vm, count));
      return std::move(l);
    }
    case OutValue::Pair_: {  // (a b . c): Pair(a, Pair(b, c)), built from the end without recursion
      py::object pair = py::module_::import("ndvm.values").attr("Pair");
      py::object acc = to_python(v.items.back(), vm, count);
      for (size_t i = v.items.size() - 1; i-- > 0;) acc = pair(to_python(v.items[i], vm, count), acc);
      return acc;
    }
  }
  return py::none();
}

LossSpec loss_from(const Program& p, const std::string& kind, py::object target, py::object lane_target) {
  LossSpec ls;
  if (kind == "value") ls.kind = LossKind::Value;
  else if (kind == "mse") ls.kind = LossKind::MSE;
  else if (kind == "gaussian_nll") ls.kind = LossKind::GaussianNLL;
  else throw py::value_error("unknown loss '" + kind + "' (expected value, mse or gaussian_nll)");
  if (ls.kind != LossKind::Value) {
    if (!lane_target.is_none()) {
      Arr t = real_arr(lane_target, "lane_target");
      if (t.ndim() != 2) throw py::value_error("lane_target must be [lanes, n]");
      for (py::ssize_t l = 0; l < t.shape(0); ++l)
        ls.lane_target.emplace_back(t.data() + l * t.shape(1), t.data() + (l + 1) * t.shape(1));
    } else {
      if (target.is_none()) throw py::value_error("loss '" + kind + "' needs a target");
      Arr t = real_arr(target, "target");
      ls.target.assign(t.data(), t.data() + t.size());
    }
    for (size_t j = 0; j < p.params.size(); ++j)
      if (p.params[j].name == "sigma") ls.sigma_param = static_cast<int>(j);
  }
  return ls;
}

CalibSpec spec_from(const Program& p, py::dict s) {
  CalibSpec c;
  std::string opt = s["optimizer"].cast<std::string>();
  const OptimizerInfo* found = nullptr;
  std::string names;
  for (const OptimizerInfo& o : kOptimizers) {
    if (opt == o.name) found = &o;
    names += std::string(names.empty() ? "" : ", ") + o.name;
  }
  if (!found) throw py::value_error("unknown optimizer '" + opt + "' (expected one of " + names + ")");
  c.optimizer = found->id;
  c.steps = s["steps"].cast<int>();
  c.lr = s["lr"].cast<double>();
  c.tol = s["tol"].cast<double>();
  c.patience = s["patience"].cast<int>();
  c.gtol = s["gtol"].cast<double>();
  c.ftol = s["ftol"].cast<double>();
  c.xtol = s["xtol"].cast<double>();
  c.loss = loss_from(p, s["loss"].cast<std::string>(), s["target"], s["lane_target"]);
  c.solve_linear = s["solve_linear"].cast<bool>();
  return c;
}

// Ctrl-C during a calibration on the native pool. The calling thread waits with the GIL released,
// so Python's SIGINT handler cannot run; the pool asks this poll every kPollMs instead: on the main
// thread it takes the GIL and runs the handlers (PyErr_CheckSignals). A handler that raises
// (KeyboardInterrupt) sets `flag`: the pool skips the items not started, each running calibration
// stops before its next step, and raise_if_set() re-raises the exception once the pool is idle, so
// the process is usable again at once. On other threads Python runs no signal handlers: no poll.
struct Interrupt {
  std::atomic<bool> flag{false};
  PoolPoll poll;
  Interrupt() {
    static const unsigned long main_ident =
        py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    if (PyThread_get_thread_ident() != main_ident) return;
    poll = [this] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() == 0) return false;
      flag.store(true);
      return true;
    };
  }
  void raise_if_set() const {
    if (flag.load()) throw py::error_already_set();  // the handler's exception, still set
  }
};

// One result per program of a calibrate_many batch: converted serially under the GIL after the
// parallel part, so it is kept cheap (the keys are interned once: building ten key strings per
// result was a measurable share of a 2,000-program batch).
py::dict result_dict(const CalibResult& r, int steps) {
  // interned once, never released: they must outlive any interpreter teardown order
  static PyObject* const keys[] = {
      PyUnicode_InternFromString("best_theta"),      PyUnicode_InternFromString("best_loss"),
      PyUnicode_InternFromString("history"),         PyUnicode_InternFromString("status"),
      PyUnicode_InternFromString("steps_done"),      PyUnicode_InternFromString("evaluations"),
      PyUnicode_InternFromString("error"),           PyUnicode_InternFromString("error_kind"),
      PyUnicode_InternFromString("error_line"),      PyUnicode_InternFromString("error_col"),
      PyUnicode_InternFromString("reason"),          PyUnicode_InternFromString("iterations"),
      PyUnicode_InternFromString("lane_evaluations")};
  py::dict d;
  auto set = [&](int k, py::object v) { d[py::handle(keys[k])] = std::move(v); };
  set(0, shaped(r.best_theta, {r.R, r.P}));
  set(1, shaped(r.best_loss, {r.R}));
  set(2, shaped(r.history, {steps, r.R}));
  set(3, py::cast(r.status));
  set(4, py::int_(r.steps_done));
  set(5, py::int_(r.evaluations));
  set(6, r.error.empty() ? py::object(py::none()) : py::object(py::str(r.error)));
  set(7, py::int_(r.error_kind));
  set(8, py::int_(r.error_line));
  set(9, py::int_(r.error_col));
  set(10, py::cast(r.reason));
  set(11, shaped_int(r.iterations));
  set(12, shaped_int(r.lane_evals));
  return d;
}

std::string simd_level() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__AVX__)
  return "AVX";
#elif defined(__SSE4_2__)
  return "SSE4.2";
#elif defined(__SSE2__)
  return "SSE2";
#elif defined(__ARM_NEON)
  return "NEON";
#else
  return "scalar";
#endif
}

// The body of _native.calibrate_shared (see its m.def): data converted once per group, one
// SharedJob per requested job, run on the pool with the GIL released.
py::list calibrate_shared_binding(const std::vector<std::shared_ptr<Program>>& progs, const std::vector<Arr>& theta0s,
                                  py::list groups, py::list jobs_in, py::dict spec_d, const Limits& lim, int threads) {
  if (theta0s.size() != progs.size())
    throw py::value_error("calibrate_shared: " + std::to_string(theta0s.size()) + " starting points for " +
                          std::to_string(progs.size()) + " programs");
  const size_t G = groups.size();
  std::vector<std::unordered_map<std::string, Array>> group_inputs(G);
  std::vector<py::object> group_targets(G);
  for (size_t g = 0; g < G; ++g) {
    py::tuple item = py::reinterpret_borrow<py::object>(groups[g]).cast<py::tuple>();
    if (item.size() != 2)
      throw py::value_error("calibrate_shared: group " + std::to_string(g) + " is not (inputs, target)");
    for (auto kv : item[0].cast<py::dict>()) {
      std::string name = py::str(kv.first);
      group_inputs[g].emplace(name, array_from(kv.second, name));
    }
    group_targets[g] = item[1];
  }
  const size_t J = jobs_in.size();
  Interrupt interrupt;  // Ctrl-C (see Interrupt): every job's specs stop on its flag
  std::vector<SharedJob> jobs(J);
  std::vector<std::vector<Inputs>> ins(J);
  std::vector<std::string> prep_errors(J);
  for (size_t j = 0; j < J; ++j) {
    try {
      py::tuple t = py::reinterpret_borrow<py::object>(jobs_in[j]).cast<py::tuple>();
      if (t.size() != 3) throw py::value_error("calibrate_shared: a job is (program, groups, fit_shared)");
      const size_t i = t[0].cast<size_t>();
      if (i >= progs.size()) throw py::value_error("calibrate_shared: job " + std::to_string(j) + ": no such program");
      const Program& p = *progs[i];
      check_theta(p, theta0s[i]);
      std::vector<size_t> members = t[1].cast<std::vector<size_t>>();
      SharedJob& job = jobs[j];
      job.program = &p;
      job.R = static_cast<int>(theta0s[i].shape(0));
      job.theta0.assign(theta0s[i].data(), theta0s[i].data() + theta0s[i].size());
      job.fit_shared = t[2].cast<bool>();
      ins[j].resize(members.size());
      for (size_t m = 0; m < members.size(); ++m) {
        const size_t g = members[m];
        if (g >= G) throw py::value_error("calibrate_shared: job " + std::to_string(j) + ": no such group");
        Inputs& in = ins[j][m];
        in.shared.resize(p.inputs.size());
        in.per_lane.resize(p.inputs.size());
        for (size_t n = 0; n < p.inputs.size(); ++n) {
          auto found = group_inputs[g].find(p.inputs[n]);
          if (found != group_inputs[g].end()) in.shared[n] = found->second;
        }
        py::dict d(spec_d);  // this group's target (spec_from finds sigma for this program)
        d["target"] = group_targets[g];
        d["lane_target"] = py::none();
        job.specs.push_back(spec_from(p, d));
        job.specs.back().cancel = &interrupt.flag;
      }
      for (const Inputs& in : ins[j]) job.inputs.push_back(&in);
    } catch (const std::exception& e) { prep_errors[j] = e.what(); }
  }
  std::vector<SharedJob> runnable;
  for (size_t j = 0; j < J; ++j)
    if (prep_errors[j].empty()) runnable.push_back(jobs[j]);
  std::vector<SharedResult> rs;
  {
    py::gil_scoped_release nogil;
    rs = calibrate_shared_many(runnable, lim, threads, interrupt.poll);
  }
  interrupt.raise_if_set();
  const int steps = spec_d["steps"].cast<int>();
  py::list out;
  size_t next = 0;
  for (size_t j = 0; j < J; ++j) {
    if (!prep_errors[j].empty()) {
      CalibResult e;
      e.error = prep_errors[j];
      e.error_kind = static_cast<int>(ErrorKind::Eval);
      out.append(result_dict(e, 0));
      continue;
    }
    const SharedResult& r = rs[next++];
    py::dict d = result_dict(r.joint, r.joint.error.empty() ? steps : 0);
    const py::ssize_t R = r.joint.R, Gj = r.G, P = static_cast<py::ssize_t>(jobs[j].program->params.size());
    if (r.joint.error.empty()) {
      d["group_theta"] = shaped(r.group_theta, {Gj, R, P});
      d["group_loss"] = shaped(r.group_loss, {R, Gj});
    }
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "NDVM native runtime";
  // The elementwise kernels' instruction set, chosen now: an NDVM_ISA naming an unknown or
  // unsupported one fails the import with a ValueError that says which ones this CPU runs.
  simd::active();

  // ---- the language, defined here once: Python reads these instead of restating them ----------
  // Error kinds (error.h): ndvm.errors has one exception class per kind, named KIND + "Error".
  py::enum_<ErrorKind>(m, "ErrorKind")
      .value("Parse", ErrorKind::Parse)
      .value("Check", ErrorKind::Check)
      .value("Eval", ErrorKind::Eval)
      .value("Limit", ErrorKind::Limit);
  // How each restart (lane) of a calibration ended (optim.h). The names are the strings
  // ndvm.Fit.lane_status reports: a lane still running when the steps ran out ended "ok".
  py::enum_<LaneStatus>(m, "LaneStatus")
      .value("ok", LANE_RUNNING)
      .value("nonfinite", LANE_NONFINITE)
      .value("converged", LANE_CONVERGED);
  // Why each lane stopped (optim.h): the strings ndvm.Fit.lane_reason reports.
  py::enum_<StopReason>(m, "StopReason")
      .value("budget", STOP_BUDGET)
      .value("gradient", STOP_GRADIENT)
      .value("decrease", STOP_DECREASE)
      .value("step", STOP_STEP)
      .value("plateau", STOP_PLATEAU)
      .value("nonfinite", STOP_NONFINITE);
  // Budgets of one evaluation (program.h), with the C++ defaults; ndvm.Limits takes its defaults
  // from a default-constructed one. max_seconds 0 is off.
  py::class_<Limits>(m, "Limits")
      .def(py::init<>())
      .def_readwrite("max_steps", &Limits::max_steps)
      .def_readwrite("max_depth", &Limits::max_depth)
      .def_readwrite("max_bytes", &Limits::max_bytes)
      .def_readwrite("replay", &Limits::replay)
      .def_readwrite("tiled", &Limits::tiled)
      .def_readwrite("max_work", &Limits::max_work)
      .def_readwrite("max_seconds", &Limits::max_seconds);
  // The primitive table (prims.h): one read-only Primitive per line, in table order, with every
  // column (arity, kind, flags); ndvm.language and the proposers' checks read them from here.
  {
    auto kinds = py::enum_<PrimKind>(m, "PrimKind");
    for (int k = 0; k <= static_cast<int>(PrimKind::OTHER); ++k)
      kinds.value(kPrimKindNames[k], static_cast<PrimKind>(k));
    py::class_<PrimInfo>(m, "Primitive")
        .def_property_readonly("name", [](const PrimInfo& p) { return std::string(p.name); })
        .def_readonly("min_args", &PrimInfo::min_args)
        .def_property_readonly(
            "max_args",
            [](const PrimInfo& p) -> py::object {
              return p.max_args < 0 ? py::object(py::none()) : py::object(py::int_(p.max_args));
            },
            "the most arguments it takes; None: variadic")
        .def_readonly("kind", &PrimInfo::kind)
        .def_property_readonly(
            "foldable", [](const PrimInfo& p) { return p.has(primflag::FOLD); },
            "a pure numeric function of its arguments: simplification may evaluate it on literals")
        .def_property_readonly(
            "total", [](const PrimInfo& p) { return p.has(primflag::TOTAL); },
            "defined on every real argument (no domain edge, no pole): it can wrap any term")
        .def_property_readonly(
            "piecewise", [](const PrimInfo& p) { return p.has(primflag::PIECEWISE); },
            "its value has kinks or jumps: a decision inside an expression")
        .def_property_readonly(
            "synonym", [](const PrimInfo& p) { return p.has(primflag::SYNONYM); },
            "another name of the primitive before it in the table")
        .def_property_readonly(
            "linalg", [](const PrimInfo& p) { return p.has(primflag::LINALG); },
            "linear algebra: builds, combines or reduces whole vectors and matrices")
        .def_property_readonly(
            "structure", [](const PrimInfo& p) { return p.has(primflag::STRUCT); },
            "builds a list or vector from its elements, or takes one apart by position")
        .def_property_readonly(
            "range_constraint",
            [](const PrimInfo& p) -> py::object {
              return *p.range_constraint() ? py::str(p.range_constraint()) : py::object(py::none());
            },
            "the parameter constraint (source text) its values satisfy, or None")
        .def_property_readonly(
            "index_args",
            [](const PrimInfo& p) {
              py::list out;
              for (int k = 0; k < 3; ++k)
                if (p.flags & (primflag::IDX0 << k)) out.append(k);
              return py::tuple(out);
            },
            "positions (from 0) of its arguments that are integer counts or indices")
        .def("__repr__", [](const PrimInfo& p) {
          return std::string("<Primitive '") + p.name + "' " + kPrimKindNames[static_cast<int>(p.kind)] + ">";
        });
    py::list prims;
    for (const PrimInfo& p : kPrims) prims.append(py::cast(&p, py::return_value_policy::reference));
    m.attr("PRIMITIVES") = py::tuple(prims);
  }
  // The optimizer table (optim.h, NDVM_OPTIMIZERS): name and defaults, in table order.
  {
    py::class_<OptimizerInfo>(m, "Optimizer")
        .def_property_readonly("name", [](const OptimizerInfo& o) { return std::string(o.name); })
        .def_readonly("default_steps", &OptimizerInfo::default_steps,
                      "the budget when the caller gives none, in evaluations of value and gradient per lane")
        .def_readonly("default_lr", &OptimizerInfo::default_lr,
                      "the learning rate when the caller gives none (L-BFGS: the length of its first step)")
        .def("__repr__", [](const OptimizerInfo& o) {
          return std::string("<Optimizer '") + o.name + "' steps=" + std::to_string(o.default_steps) + ">";
        });
    py::list optimizers;
    for (const OptimizerInfo& o : kOptimizers) optimizers.append(py::cast(&o, py::return_value_policy::reference));
    m.attr("OPTIMIZERS") = py::tuple(optimizers);
  }
  // The special-form table (forms.h): (keyword, supported), in table order.
  {
    py::list forms;
    for (const FormInfo& f : kForms) forms.append(py::make_tuple(f.name, f.supported));
    m.attr("SPECIAL_FORMS") = py::tuple(forms);
  }
  m.attr("MAX_NESTING") = kMaxNesting;
  // The runtime's reader, exposing its datum tree: every top-level datum of `source` as Python
  // data (see datum_to_python). ParseError with the position on malformed text; nesting beyond
  // `max_nesting` levels (0: MAX_NESTING) is a ParseError too.
  m.def(
      "read",
      [](const std::string& source, int max_nesting) {
        // the bound is the runtime's: a deeper reader would outrun the stack probe's margins
        if (max_nesting < 0 || max_nesting > kMaxNesting)
          throw py::value_error("read: max_nesting must be from 1 to " + std::to_string(kMaxNesting) +
                                " (0: the runtime's limit), got " + std::to_string(max_nesting));
        std::vector<DatumP> forms;
        {
          py::gil_scoped_release nogil;
          forms = read_all(source, 0, nullptr, max_nesting);
        }
        py::module_ language = py::module_::import("ndvm.language");
        py::object symbol = language.attr("Symbol"), dotted = language.attr("Dotted");
        const StackProbe probe;
        py::list out;
        for (auto& f : forms) out.append(datum_to_python(*f, symbol, dotted, probe));
        return out;
      },
      py::arg("source"), py::arg("max_nesting") = 0);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      std::string name = py::cast(e.kind).attr("name").cast<std::string>() + "Error";
      py::object cls = py::module_::import("ndvm.errors").attr(name.c_str());
      py::object exc = cls(py::str(e.what()), e.line, e.col);
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def_property_readonly("source", [](const Program& p) { return p.source; })
      .def_property_readonly("inputs", [](const Program& p) { return p.inputs; })
      .def_property_readonly("params",
                             [](const Program& p) {
                               py::list l;
                               for (auto& d : p.params) {
                                 py::object c = py::none();
                                 if (d.constraint == C_POSITIVE) c = py::str("positive");
                                 else if (d.constraint == C_BETWEEN) c = py::make_tuple("between", d.lo, d.hi);
                                 l.append(py::make_tuple(d.name, d.init, c));
                               }
                               return l;
                             })
      .def_property_readonly("f32", [](const Program& p) { return p.f32; })
      .def_property_readonly(
          "linear_params", [](const Program& p) { return p.basis() ? p.linear_params : std::vector<int>{}; },
          "indices of the parameters the result is affine in (solved by least squares in calibration)")
      .def_property_readonly(
          "basis_source", [](const Program& p) { return p.basis() ? p.basis()->source : std::string(); },
          "the basis program a projected calibration walks: the result's parts as a list ('' without one)")
      .def("evaluate",
           [](const Program& p, Arr theta, py::dict shared, py::dict lane, const Limits& lim) {
             check_theta(p, theta);
             int B = static_cast<int>(theta.shape(0));
             Inputs in = inputs_from(p, shared, lane, B);
             BatchResult r;
             {
               py::gil_scoped_release nogil;
               r = run_batch(p, thread_vm(), theta.data(), B, in, false, nullptr, lim);
             }
             return values_array(r, B);
           })
      .def("value_and_grad",
           [](const Program& p, Arr theta, py::dict shared, py::dict lane, const Limits& lim,
              std::vector<std::string> grad_inputs, std::string loss, py::object target) {
             check_theta(p, theta);
             int B = static_cast<int>(theta.shape(0));
             Inputs in = inputs_from(p, shared, lane, B);
             std::vector<int> ids;
             for (auto& name : grad_inputs) {
               auto it = std::find(p.inputs.begin(), p.inputs.end(), name);
               if (it == p.inputs.end()) throw py::value_error("no input named '" + name + "'");
               size_t i = it - p.inputs.begin();
               if (in.shared[i].data.empty())
                 throw py::value_error("gradients are available for shared inputs only ('" + name + "')");
               ids.push_back(static_cast<int>(i));
             }
             LossSpec ls = loss_from(p, loss, target, py::none());
             BatchResult r;
             {
               py::gil_scoped_release nogil;
               r = run_batch(p, thread_vm(), theta.data(), B, in, true, &ls, lim, ids.empty() ? nullptr : &ids);
             }
             py::list ig;
             size_t base = 0;
             for (int id : ids) {
               const Array& a = in.shared[id];
               std::vector<double> g(r.input_grads.begin() + base, r.input_grads.begin() + base + a.numel());
               std::vector<py::ssize_t> shape;
               if (a.rank >= 1) shape.push_back(a.rows);
               if (a.rank == 2) shape.push_back(a.cols);
               ig.append(shaped(g, shape));
               base += a.numel();
             }
             return py::make_tuple(values_array(r, B), shaped(r.losses, {B}),
                                   shaped(r.grads, {B, static_cast<py::ssize_t>(p.params.size())}), ig);
           })
      .def("run", [](const Program& p, Arr theta_row, py::dict shared, const Limits& lim) {
        if (theta_row.size() != static_cast<py::ssize_t>(p.params.size()))
          throw py::value_error("expected " + std::to_string(p.params.size()) + " parameter values");
        Inputs in = inputs_from(p, shared, py::dict(), 1);
        OutValue v;
        {
          py::gil_scoped_release nogil;
          v = run_one(p, thread_vm(), theta_row.data(), in, lim);
        }
        uint64_t count = 0;
        return to_python(v, thread_vm(), count);
      });

  m.def(
      "compile",
      [](const std::string& src, bool f32, uint64_t max_bytes) { return compile_program(src, f32, max_bytes); },
      py::arg("source"), py::arg("f32") = false, py::arg("max_bytes") = 0);
  m.def("canonical_form", &canonical_form);

  m.def("calibrate", [](std::shared_ptr<Program> p, Arr theta0, py::dict shared, py::dict lane, py::dict spec_d,
                        const Limits& lim, int threads) {
    check_theta(*p, theta0);
    int R = static_cast<int>(theta0.shape(0));
    Inputs in = inputs_from(*p, shared, lane, R);
    CalibSpec spec = spec_from(*p, spec_d);
    Interrupt interrupt;
    spec.cancel = &interrupt.flag;
    CalibResult r;
    {
      py::gil_scoped_release nogil;
      r = calibrate_threaded(*p, thread_vm(), theta0.data(), R, in, spec, lim, threads == 0 ? 1 : threads,
                             interrupt.poll);
    }
    interrupt.raise_if_set();
    return result_dict(r, spec.steps);
  });

  m.def("calibrate_many", [](std::vector<std::shared_ptr<Program>> progs, std::vector<Arr> theta0s, py::dict shared,
                             py::dict lane, py::dict spec_d, const Limits& lim, int threads) {
    // The data are converted once for the whole batch (names -> arrays); each program then picks
    // its inputs by name. Per-program work under the GIL is what limits scaling across threads.
    std::unordered_map<std::string, Array> shared_arrays;
    std::unordered_map<std::string, std::vector<Array>> lane_arrays;
    for (auto item : shared) {
      std::string name = py::str(item.first);
      shared_arrays.emplace(name, array_from(item.second, name));
    }
    for (auto item : lane) {
      std::string name = py::str(item.first);
      Arr a = real_arr(item.second, "lane input '" + name + "'");
      if (a.ndim() < 1) throw py::value_error("lane input '" + name + "' needs a leading lane axis");
      std::vector<Array> per;
      for (py::ssize_t l = 0; l < a.shape(0); ++l) per.push_back(array_from(a, name, true, l));
      lane_arrays.emplace(name, std::move(per));
    }
    CalibSpec base_spec = progs.empty() ? CalibSpec{} : spec_from(*progs[0], spec_d);
    Interrupt interrupt;
    base_spec.cancel = &interrupt.flag;
    std::vector<Inputs> ins(progs.size());
    std::vector<CalibJob> jobs(progs.size());
    std::vector<std::string> prep_errors(progs.size());
    for (size_t i = 0; i < progs.size(); ++i) {
      try {
        const Program& p = *progs[i];
        check_theta(p, theta0s[i]);
        int R = static_cast<int>(theta0s[i].shape(0));
        Inputs& in = ins[i];
        in.shared.resize(p.inputs.size());
        in.per_lane.resize(p.inputs.size());
        for (size_t k = 0; k < p.inputs.size(); ++k) {
          auto la = lane_arrays.find(p.inputs[k]);
          if (la != lane_arrays.end()) {
            if (static_cast<int>(la->second.size()) != R)
              throw py::value_error("lane input '" + p.inputs[k] + "' has " + std::to_string(la->second.size()) +
                                    " lanes, expected " + std::to_string(R));
            in.per_lane[k] = la->second;
          } else {
            auto sa = shared_arrays.find(p.inputs[k]);
            if (sa != shared_arrays.end()) in.shared[k] = sa->second;
          }
        }
        CalibSpec spec = base_spec;
        spec.loss.sigma_param = -1;
        for (size_t j = 0; j < p.params.size(); ++j)
          if (spec.loss.kind == LossKind::GaussianNLL && p.params[j].name == "sigma")
            spec.loss.sigma_param = static_cast<int>(j);
        jobs[i] = CalibJob{&p, std::vector<double>(theta0s[i].data(), theta0s[i].data() + theta0s[i].size()), R, &in,
                           std::move(spec)};
      } catch (const std::exception& e) { prep_errors[i] = e.what(); }
    }
    std::vector<CalibJob> runnable;
    std::vector<size_t> where;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (prep_errors[i].empty()) {
        runnable.push_back(jobs[i]);
        where.push_back(i);
      }
    std::vector<CalibResult> rs;
    {
      py::gil_scoped_release nogil;
      rs = calibrate_many(runnable, lim, threads, interrupt.poll);
    }
    interrupt.raise_if_set();
    int steps = spec_d["steps"].cast<int>();
    py::list out;
    size_t k = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!prep_errors[i].empty()) {
        CalibResult e;
        e.error = prep_errors[i];
        e.error_kind = static_cast<int>(ErrorKind::Eval);
        out.append(result_dict(e, 0));
      } else {
        out.append(result_dict(rs[k++], steps));
      }
    }
    return out;
  });

  // A grouped fit: every program on every group's own data (shared inputs and target), all as
  // jobs of one calibrate_many, so the pool spreads programs x groups at once. Each job is exactly
  // the program's calibrate on that group (its restarts as lanes): same arithmetic, no padding.
  // Returns one list per program, one result per group.
  m.def("calibrate_groups", [](std::vector<std::shared_ptr<Program>> progs, std::vector<Arr> theta0s, py::list groups,
                               py::dict spec_d, const Limits& lim, int threads) {
    if (theta0s.size() != progs.size())
      throw py::value_error("calibrate_groups: " + std::to_string(theta0s.size()) + " starting points for " +
                            std::to_string(progs.size()) + " programs");
    const size_t G = groups.size(), N = progs.size();
    std::vector<std::unordered_map<std::string, Array>> group_inputs(G);
    std::vector<py::object> group_targets(G);
    for (size_t g = 0; g < G; ++g) {
      py::tuple item = py::reinterpret_borrow<py::object>(groups[g]).cast<py::tuple>();
      if (item.size() != 2)
        throw py::value_error("calibrate_groups: group " + std::to_string(g) + " is not (inputs, target)");
      for (auto kv : item[0].cast<py::dict>()) {
        std::string name = py::str(kv.first);
        group_inputs[g].emplace(name, array_from(kv.second, name));
      }
      group_targets[g] = item[1];
    }
    Interrupt interrupt;
    std::vector<Inputs> ins(N * G);
    std::vector<CalibJob> jobs(N * G);
    std::vector<std::string> prep_errors(N * G);
    for (size_t i = 0; i < N; ++i) {
      const Program& p = *progs[i];
      for (size_t g = 0; g < G; ++g) {
        const size_t k = i * G + g;
        try {
          check_theta(p, theta0s[i]);
          Inputs& in = ins[k];
          in.shared.resize(p.inputs.size());
          in.per_lane.resize(p.inputs.size());
          for (size_t n = 0; n < p.inputs.size(); ++n) {
            auto found = group_inputs[g].find(p.inputs[n]);
            if (found != group_inputs[g].end()) in.shared[n] = found->second;
          }
          py::dict d(spec_d);  // this group's target; spec_from reads it (and finds sigma for this program)
          d["target"] = group_targets[g];
          d["lane_target"] = py::none();
          const int R = static_cast<int>(theta0s[i].shape(0));
          jobs[k] = CalibJob{&p, std::vector<double>(theta0s[i].data(), theta0s[i].data() + theta0s[i].size()), R, &in,
                             spec_from(p, d)};
          jobs[k].spec.cancel = &interrupt.flag;
        } catch (const std::exception& e) { prep_errors[k] = e.what(); }
      }
    }
    std::vector<CalibJob> runnable;
    for (size_t k = 0; k < jobs.size(); ++k)
      if (prep_errors[k].empty()) runnable.push_back(jobs[k]);
    std::vector<CalibResult> rs;
    {
      py::gil_scoped_release nogil;
      rs = calibrate_many(runnable, lim, threads, interrupt.poll);
    }
    interrupt.raise_if_set();
    const int steps = spec_d["steps"].cast<int>();
    py::list out;
    size_t next = 0;
    for (size_t i = 0; i < N; ++i) {
      py::list per_group;
      for (size_t g = 0; g < G; ++g) {
        const size_t k = i * G + g;
        if (prep_errors[k].empty()) {
          per_group.append(result_dict(rs[next++], steps));
        } else {
          CalibResult e;
          e.error = prep_errors[k];
          e.error_kind = static_cast<int>(ErrorKind::Eval);
          per_group.append(result_dict(e, 0));
        }
      }
      out.append(per_group);
    }
    return out;
  });

  // Grouped fits with shared parameters (native/src/shared.h). `jobs`: (program index, group
  // indices, fit_shared) triples; each is one joint fit of that program over those groups (with
  // fit_shared false, the shared parameters keep theta0's values). Returns one dict per job:
  // result_dict of the joint fit, plus group_theta [G, R, P] and group_loss [R, G].
  m.def("calibrate_shared", [](std::vector<std::shared_ptr<Program>> progs, std::vector<Arr> theta0s, py::list groups,
                               py::list jobs_in, py::dict spec_d, const Limits& lim, int threads) {
    return calibrate_shared_binding(progs, theta0s, groups, jobs_in, spec_d, lim, threads);
  });
  m.def("shared_params", [](const Program& p) {
    std::vector<bool> out;
    for (auto& d : p.params) out.push_back(d.shared);
    return out;
  });

  m.def("hardware_threads", &hardware_threads);
  // This thread's replay statistics (see replay.cc): runs replayed from the tape, and replays
  // abandoned for a walk (a guard that failed, other inputs, an error).
  m.def("replay_counts", []() {
    const VM& vm = thread_vm();
    return py::make_tuple(vm.replays_done(), vm.replays_abandoned());
  });
  // This thread's replays run tile by tile over the points (tiled.cc).
  m.def("tiled_replay_count", []() { return thread_vm().tiled_replays_done(); });
  // What this thread's last evaluation (evaluate, value_and_grad, run) used of its budgets:
  // steps of its last lane group, element operations (work) of the whole evaluation.
  m.def("last_usage", []() {
    const VM& vm = thread_vm();
    py::dict d;
    d["steps"] = vm.steps_taken();
    d["work"] = vm.work_used();
    return d;
  });
  // The most work any successful evaluation of this process used (all threads); reset: start again.
  m.def("peak_work", [](bool reset) { return peak_work(reset); }, py::arg("reset") = false);
  // The instruction set of the elementwise kernels (simd.h): "baseline", "avx2" or "avx512".
  m.def("isa", []() { return std::string(simd::isa_name()); });
  m.def("build_info", []() {
    py::dict d;
    d["compiler"] = NDVM_CXX_COMPILER;
    d["flags"] = NDVM_CXX_FLAGS;
    d["build_type"] = NDVM_BUILD_TYPE;
    d["simd"] = simd_level();
    d["isa"] = simd::isa_name();
    int n = 0;
    const char* const* isas = simd::supported_isas(&n);
    py::list supported;
    for (int i = 0; i < n; ++i) supported.append(isas[i]);
    d["isas"] = supported;
    d["value_bytes"] = sizeof(Value);
    d["threads"] = hardware_threads();
    return d;
  });
  // The tape-op table (prims.h, NDVM_TAPE_OPS) with its properties, in enum order; `saves_values`
  // is derived: an op with a gradient that is not linear reads its inputs or output in backward.
  m.def("tape_ops", []() {
    py::list ops;
    for (const TapeOpInfo& t : kTapeOps) {
      py::dict d;
      d["name"] = t.name;
      d["arity"] = t.arity;
      d["kind"] = kTapeKindNames[static_cast<int>(t.kind)];
      d["arith"] = (t.flags & tapeflag::ARITH) != 0;
      d["linear"] = (t.flags & tapeflag::LINEAR) != 0;
      d["no_gradient"] = (t.flags & tapeflag::NOGRAD) != 0;
      d["saves_values"] = (t.flags & (tapeflag::LINEAR | tapeflag::NOGRAD)) == 0;
      d["lane_adjoint"] = (t.flags & tapeflag::LANEADJ) != 0;
      d["extra_work"] = (t.flags & tapeflag::EXTRA) != 0;
      d["one_lane_backward"] = (t.flags & tapeflag::ONELANE) != 0;
      d["rounds_f32"] = (t.flags & tapeflag::F32) != 0;
      ops.append(d);
    }
    return ops;
  });
}
