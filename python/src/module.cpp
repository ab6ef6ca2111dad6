// attncheck._core: the exact routines, the probe's per-head metrics and the bounds and mc commands for Python.
// Arrays are read where they lie (any strides, float32 or float64) and the computations run without the GIL;
// the package's Python layer (attncheck/__init__.py) turns tensors into arrays and documents the functions.

#include "attncheck/exact/bounds.hpp"
#include "attncheck/exact/cross_norm_bounds.hpp"
#include "attncheck/monte_carlo/commands.hpp"
#include "attncheck/monte_carlo/mc_options.hpp"
#include "attncheck/probes/live_metrics.hpp"
#include "attncheck/probes/watch.hpp"
#include "attncheck/records/input_file.hpp"
#include "attncheck/records/memory_budget.hpp"
#include "attncheck/records/probe_record.hpp"
#include "attncheck/reports/report.hpp"
#include "attncheck/theory/expression.hpp"
#include "attncheck/theory/softmax.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace py = pybind11;
using nlohmann::json;

namespace attncheck::python {
namespace {

using theory::Index;
using theory::InputError;
using theory::Matrix;
using theory::Vector;

py::object to_python(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return py::none();
    case json::value_t::boolean: return py::bool_(value.get<bool>());
    case json::value_t::number_integer: return py::int_(value.get<std::int64_t>());
    case json::value_t::number_unsigned: return py::int_(value.get<std::uint64_t>());
    case json::value_t::number_float: return py::float_(value.get<double>());
    case json::value_t::string: return py::str(value.get<std::string>());
    case json::value_t::array: {
      py::list list;
      for (const json& item : value) list.append(to_python(item));
      return list;
    }
    default: {
      py::dict dict;
      for (const auto& [key, item] : value.items()) dict[py::str(key)] = to_python(item);
      return dict;
    }
  }
}

// Ctrl-C reaches Python only while it holds the GIL, and the loops over the caller's arrays run without it: they
// count their work, and every few tens of milliseconds take the GIL back and let Python run a pending signal's
// handler. One that raises (KeyboardInterrupt) ends the call with its exception. Only the main thread runs signal
// handlers, so a call on another thread never waits for the GIL here.
class SignalPoll {
 public:
  // Constructed with the GIL held.
  SignalPoll() {
    const py::module_ threading = py::module_::import("threading");
    main_thread_ = threading.attr("current_thread")().is(threading.attr("main_thread")());
  }
  // `work`: entries read or computed since the last call (a few nanoseconds each), so the clock is read rarely.
  void add(std::uint64_t work) {
    pending_ += work;
    if (pending_ < kWorkBetweenClockReads) return;
    pending_ = 0;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    next_ = now + kInterval;
    check();
  }
  // Without the GIL.
  void check() const {
    if (main_thread_) check_signals();
  }
  static void check_signals() {
    py::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }

 private:
  // Often enough that Ctrl-C is answered at once; rarely enough that waiting for the GIL, which a busy Python
  // thread may hold for its switch interval (5 ms), costs little.
  static constexpr std::chrono::milliseconds kInterval{25};
  static constexpr std::uint64_t kWorkBetweenClockReads = std::uint64_t{1} << 16;
  bool main_thread_ = false;
  std::uint64_t pending_ = 0;
  std::chrono::steady_clock::time_point next_ = std::chrono::steady_clock::now() + kInterval;
};

std::uint64_t unsigned_size(py::ssize_t size) { return static_cast<std::uint64_t>(std::max<py::ssize_t>(size, 0)); }

std::string shape_text(const py::array& array) {
  std::string text;
  for (py::ssize_t k = 0; k < array.ndim(); ++k) text += (k ? ", " : "") + std::to_string(array.shape(k));
  return "(" + text + (array.ndim() == 1 ? ",)" : ")");
}

// A float32 or float64 array read through its strides, so no layout needs a copy.
class RealArray {
 public:
  RealArray(const py::array& array, const char* name) : name_(name) {
    if (array.dtype().is(py::dtype::of<double>())) {
      single_ = false;
    } else if (array.dtype().is(py::dtype::of<float>())) {
      single_ = true;
    } else {
      throw InputError(
          fmt::format("{} has dtype {}: give float32 or float64", name, std::string(py::str(array.dtype()))));
    }
    data_ = static_cast<const char*>(array.data());
    for (py::ssize_t k = 0; k < array.ndim(); ++k) {
      shape_.push_back(array.shape(k));
      strides_.push_back(array.strides(k));
    }
  }
  const std::string& name() const { return name_; }
  py::ssize_t ndim() const { return static_cast<py::ssize_t>(shape_.size()); }
  py::ssize_t shape(py::ssize_t k) const { return shape_[static_cast<std::size_t>(k)]; }
  py::ssize_t stride(py::ssize_t k) const { return strides_[static_cast<std::size_t>(k)]; }
  bool single() const { return single_; }
  const char* data() const { return data_; }
  double at(py::ssize_t offset) const {
    return single_ ? static_cast<double>(*reinterpret_cast<const float*>(data_ + offset))
                   : *reinterpret_cast<const double*>(data_ + offset);
  }
  // The 2-D array (or its last two axes at `offset`) as a row-major double matrix; NaN and inf are errors.
  Matrix matrix(SignalPoll& poll, py::ssize_t offset = 0) const {
    const py::ssize_t rows = shape(ndim() - 2), cols = shape(ndim() - 1);
    Matrix out(rows, cols);
    for (py::ssize_t i = 0; i < rows; ++i) {
      poll.add(unsigned_size(cols));
      for (py::ssize_t j = 0; j < cols; ++j) {
        const double v = at(offset + i * stride(ndim() - 2) + j * stride(ndim() - 1));
        if (!std::isfinite(v)) throw InputError(fmt::format("{} has {} at ({}, {})", name_, v, i, j));
        out(i, j) = v;
      }
    }
    return out;
  }
  Vector vector() const {
    Vector out(shape(0));
    for (py::ssize_t i = 0; i < shape(0); ++i) {
      out[i] = at(i * stride(0));
      if (!std::isfinite(out[i])) throw InputError(fmt::format("{} has {} at ({},)", name_, out[i], i));
    }
    return out;
  }

 private:
  std::string name_;
  bool single_ = false;
  const char* data_ = nullptr;
  std::vector<py::ssize_t> shape_, strides_;
};

RealArray real_array(const py::array& array, const char* name, py::ssize_t ndim) {
  if (array.ndim() != ndim) {
    throw InputError(fmt::format("{} must be {}-D: got shape {}", name, ndim, shape_text(array)));
  }
  return RealArray(array, name);
}

// A boolean array of the given shape (broadcast views with zero strides are fine), true = attended.
theory::AttendedMask attended_mask(const py::array& mask, py::ssize_t rows, py::ssize_t cols) {
  if (!mask.dtype().is(py::dtype::of<bool>())) {
    throw InputError(fmt::format("mask has dtype {}: give a boolean array, True where a query attends to a key",
                                 std::string(py::str(mask.dtype()))));
  }
  if (mask.ndim() != 2 || mask.shape(0) != rows || mask.shape(1) != cols) {
    throw InputError(fmt::format("mask has shape {}, the scores ({}, {})", shape_text(mask), rows, cols));
  }
  theory::AttendedMask out(rows, cols);
  const char* data = static_cast<const char*>(mask.data());
  for (py::ssize_t i = 0; i < rows; ++i) {
    for (py::ssize_t j = 0; j < cols; ++j) out(i, j) = *(data + i * mask.strides(0) + j * mask.strides(1)) != 0;
  }
  return out;
}

// The batch index of flat matrix b over the leading axes, for messages: "(2, 0)".
std::string batch_index(const RealArray& a, py::ssize_t b) {
  std::vector<py::ssize_t> index(static_cast<std::size_t>(a.ndim() - 2));
  for (py::ssize_t k = a.ndim() - 3; k >= 0; --k) {
    index[static_cast<std::size_t>(k)] = b % a.shape(k);
    b /= a.shape(k);
  }
  std::string text;
  for (std::size_t k = 0; k < index.size(); ++k) text += (k ? ", " : "") + std::to_string(index[k]);
  return "(" + text + (index.size() == 1 ? ",)" : ")");
}

// Whether the array shows some bytes as more than one entry (a broadcast's zero strides, or a strided view over
// overlapping memory): its entries then span less memory than they would take of their own. A slice or a transpose
// of an array in memory does not; only such views make the work grow beyond the memory the array holds.
bool repeats_storage(const py::array& array) {
  std::uint64_t entries = 1, span = static_cast<std::uint64_t>(array.itemsize());
  for (py::ssize_t k = 0; k < array.ndim(); ++k) {
    if (array.shape(k) == 0) return false;
    entries = records::saturating_product({entries, unsigned_size(array.shape(k))});
    span = records::saturating_sum({span, records::saturating_product({unsigned_size(array.shape(k) - 1),
                                                                       unsigned_size(std::abs(array.strides(k)))})});
  }
  return span < records::saturating_product({entries, static_cast<std::uint64_t>(array.itemsize())});
}

py::ssize_t batch_offset(const RealArray& a, py::ssize_t b) {
  py::ssize_t offset = 0;
  for (py::ssize_t k = a.ndim() - 3; k >= 0; --k) {
    offset += (b % a.shape(k)) * a.stride(k);
    b /= a.shape(k);
  }
  return offset;
}

py::dict softmax_norms(const py::array& logits_array, const std::optional<py::array>& mask_array) {
  if (logits_array.ndim() < 2) {
    throw InputError(
        fmt::format("logits must be a matrix (N, M) or a batch (..., N, M): got shape {}", shape_text(logits_array)));
  }
  const RealArray logits(logits_array, "logits");
  const py::ssize_t nd = logits.ndim(), rows = logits.shape(nd - 2), cols = logits.shape(nd - 1);
  if (rows == 0 || cols == 0) throw InputError(fmt::format("logits of shape {} are empty", shape_text(logits_array)));
  if (mask_array) {
    if (!mask_array->dtype().is(py::dtype::of<bool>())) {
      throw InputError(fmt::format("mask has dtype {}: give a boolean array, True where an entry takes part",
                                   std::string(py::str(mask_array->dtype()))));
    }
    if (mask_array->ndim() != nd) {
      throw InputError(
          fmt::format("mask has shape {}, the logits {}", shape_text(*mask_array), shape_text(logits_array)));
    }
    for (py::ssize_t k = 0; k < nd; ++k) {
      if (mask_array->shape(k) != logits.shape(k)) {
        throw InputError(
            fmt::format("mask has shape {}, the logits {}", shape_text(*mask_array), shape_text(logits_array)));
      }
    }
  }
  py::ssize_t batch = 1;
  for (py::ssize_t k = 0; k < nd - 2; ++k) batch *= logits.shape(k);
  // The command line refuses a matrix whose entries would not fit the memory as doubles. An array whose entries
  // each have their own storage is in memory already and is read in place; a view that repeats its storage (a
  // broadcast: zero strides) is refused as that matrix would be, since the work grows with the entries it shows,
  // not with the memory it holds. The per-row results (two here, four returned) are allocated whatever the layout.
  const bool own_storage = !repeats_storage(logits_array);
  const std::uint64_t entries =
      records::saturating_product({unsigned_size(batch), unsigned_size(rows), unsigned_size(cols)});
  records::require_memory(
      records::saturating_sum(
          {own_storage ? 0 : records::saturating_product({entries, sizeof(double)}),
           records::saturating_product({6, unsigned_size(batch), unsigned_size(rows), sizeof(double)})}),
      fmt::format("softmax_norms on logits of shape {}", shape_text(logits_array)), "; give fewer or smaller matrices");
  SignalPoll poll;
  std::vector<double> row_softmax_sq(static_cast<std::size_t>(batch * rows)), row_jacobian_sq(row_softmax_sq.size());
  const char* mask_data = mask_array ? static_cast<const char*>(mask_array->data()) : nullptr;
  std::vector<py::ssize_t> mask_strides;
  for (py::ssize_t k = 0; mask_array && k < nd; ++k) mask_strides.push_back(mask_array->strides(k));
  {
    py::gil_scoped_release release;
    std::vector<double> row(static_cast<std::size_t>(cols));
    const py::ssize_t row_stride = logits.stride(nd - 2), col_stride = logits.stride(nd - 1);
    // float64 rows with unit stride and no mask are read in place; others are gathered one row at a time.
    const bool in_place = !logits.single() && col_stride == static_cast<py::ssize_t>(sizeof(double)) && !mask_data;
    for (py::ssize_t b = 0; b < batch; ++b) {
      const py::ssize_t offset = batch_offset(logits, b);
      py::ssize_t mask_offset = 0;
      for (py::ssize_t k = nd - 3, rest = b; mask_data && k >= 0; --k) {
        mask_offset += (rest % logits.shape(k)) * mask_strides[static_cast<std::size_t>(k)];
        rest /= logits.shape(k);
      }
      for (py::ssize_t i = 0; i < rows; ++i) {
        poll.add(unsigned_size(cols));
        const py::ssize_t start = offset + i * row_stride;
        std::span<const double> values;
        if (in_place) {
          values = {reinterpret_cast<const double*>(logits.data() + start), static_cast<std::size_t>(cols)};
        } else {
          for (py::ssize_t j = 0; j < cols; ++j) {
            const bool kept =
                !mask_data || *(mask_data + mask_offset + i * mask_strides[static_cast<std::size_t>(nd - 2)] +
                                j * mask_strides[static_cast<std::size_t>(nd - 1)]) != 0;
            row[static_cast<std::size_t>(j)] = kept ? logits.at(start + j * col_stride) : -INFINITY;
          }
          values = row;
        }
        theory::RowSoftmaxNorms norms;
        try {
          norms = theory::row_softmax_norms(values, i);
        } catch (const InputError& e) {
          if (nd == 2) throw;
          throw InputError(fmt::format("logits{}: {}", batch_index(logits, b), e.what()));
        }
        row_softmax_sq[static_cast<std::size_t>(b * rows + i)] = norms.softmax_sq;
        row_jacobian_sq[static_cast<std::size_t>(b * rows + i)] = norms.jacobian_sq;
      }
    }
  }
  std::vector<py::ssize_t> batch_shape(logits_array.shape(), logits_array.shape() + nd - 2), row_shape = batch_shape;
  row_shape.push_back(rows);
  py::array_t<double> softmax_fro(batch_shape), grad_fro(batch_shape), row_softmax_fro(row_shape),
      row_grad_fro(row_shape);
  double* total_softmax = softmax_fro.mutable_data();
  double* total_grad = grad_fro.mutable_data();
  for (py::ssize_t b = 0; b < batch; ++b) {
    double softmax_sq = 0, jacobian_sq = 0;
    for (py::ssize_t i = 0; i < rows; ++i) {
      const auto k = static_cast<std::size_t>(b * rows + i);
      softmax_sq += row_softmax_sq[k];
      jacobian_sq += row_jacobian_sq[k];
      row_softmax_fro.mutable_data()[k] = std::sqrt(row_softmax_sq[k]);
      row_grad_fro.mutable_data()[k] = std::sqrt(row_jacobian_sq[k]);
    }
    total_softmax[b] = std::sqrt(softmax_sq);
    total_grad[b] = std::sqrt(jacobian_sq);
  }
  const theory::SoftmaxBounds bounds = theory::softmax_bounds(rows);
  const auto scalar_or_array = [&](const py::array_t<double>& a) -> py::object {
    if (nd == 2) return py::float_(*a.data());
    return a;
  };
  py::dict out;
  out["N"] = rows;
  out["M"] = cols;
  out["softmax_fro"] = scalar_or_array(softmax_fro);
  out["grad_fro"] = scalar_or_array(grad_fro);
  out["row_softmax_fro"] = row_softmax_fro;
  out["row_grad_fro"] = row_grad_fro;
  out["sqrt_N"] = bounds.softmax_paper;
  py::array_t<double> over_sqrt_n(batch_shape), over_paper(batch_shape), over_tight(batch_shape);
  for (py::ssize_t b = 0; b < batch; ++b) {
    over_sqrt_n.mutable_data()[b] = total_softmax[b] / bounds.softmax_paper;
    over_paper.mutable_data()[b] = total_grad[b] / bounds.grad_paper;
    over_tight.mutable_data()[b] = total_grad[b] / bounds.grad_tight;
  }
  out["softmax_over_sqrt_N"] = scalar_or_array(over_sqrt_n);
  out["grad_over_2sqrt_N"] = scalar_or_array(over_paper);
  out["grad_over_half_sqrt_N"] = scalar_or_array(over_tight);
  return out;
}

// Rotary positions from the frequencies a model uses (its inv_freq, in double where the configuration gives them),
// 1-D, or from its angles per position (positions x pairs: EVA's 2-D rotary over image patches), 2-D, in Hugging
// Face's layout ("half") or ggml's ("interleaved"): theory::Rotary::with_frequencies or with_angles, checked first.
// With `offset`, the table of a 3-D array's head at that byte offset (rotaries_per_head).
theory::Rotary rotary_of(const RealArray& rotary, const std::string& layout, Index d, Index n, SignalPoll& poll,
                         py::ssize_t offset = 0) {
  const bool table = rotary.ndim() >= 2;
  const Index pairs = rotary.shape(rotary.ndim() - 1);
  if (pairs < 1 || 2 * pairs > d) {
    throw InputError(
        fmt::format("rotary has {} {}: need 1 .. d/2 = {}", pairs, table ? "pairs of angles" : "frequencies", d / 2));
  }
  if (layout != "half" && layout != "interleaved") {
    throw InputError(fmt::format("rotary_layout '{}' is not half or interleaved", layout));
  }
  if (table) {
    if (rotary.shape(rotary.ndim() - 2) != n) {
      throw InputError(fmt::format("rotary angles for {} positions, x has {}", rotary.shape(rotary.ndim() - 2), n));
    }
    return theory::Rotary::with_angles(d, rotary.matrix(poll, offset), layout == "interleaved");
  }
  const Vector f = rotary.vector();
  for (Index p = 0; p < pairs; ++p) {
    if (!std::isfinite(f(p))) throw InputError(fmt::format("rotary frequency {} is {}", p, f(p)));
  }
  return theory::Rotary::with_frequencies(d, std::vector<double>(f.data(), f.data() + pairs), layout == "interleaved");
}

// One rotation per head from angles (heads x positions x pairs): timm's mixed rotary learns them per head.
std::vector<theory::Rotary> rotaries_per_head(const RealArray& rotary, const std::string& layout, Index d, Index n,
                                              SignalPoll& poll) {
  if (rotary.shape(0) == 0) throw InputError("rotary angles for no head");
  std::vector<theory::Rotary> out;
  for (py::ssize_t head = 0; head < rotary.shape(0); ++head)
    out.push_back(rotary_of(rotary, layout, d, n, poll, head * rotary.stride(0)));
  return out;
}

// Refuses, as the command line's probe refuses a sequence too long for the memory, a measurement whose copies and
// scratch would not fit: x and the weights in doubles, each head's projections and weight slices, and the scratch
// of the head being measured, counted as TransformerModel::require_memory_for counts a layer measured on one thread
// (a block of score rows and the attended keys' rows; N x N kernels under query/key norms or a logit cap; the rows'
// Gram matrix under rotary keys; the keys' Gram matrices of a norm over all the heads), the mask in bytes. The
// arrays' shapes are those already checked to be 2-D.
void require_memory_to_measure(const py::array& x, const py::array& w_q, const py::array& w_k, int heads, bool mask,
                               bool rotary, bool general_rows, bool norms_over_all_heads) {
  using records::saturating_product;
  using records::saturating_sum;
  const std::uint64_t n = unsigned_size(x.shape(0)), D = unsigned_size(x.shape(1)), q = unsigned_size(w_q.shape(1)),
                      k = unsigned_size(w_k.shape(1)), H = unsigned_size(heads), d = q / H,
                      block = std::min<std::uint64_t>(n, probes::kQueryRowBlock);
  const std::uint64_t copies =
      saturating_sum({saturating_product({n, D}), saturating_product({unsigned_size(w_q.shape(0)), q}),
                      saturating_product({unsigned_size(w_k.shape(0)), k}), q, k});
  const std::uint64_t per_head =
      saturating_sum({saturating_product({2, n, d}), saturating_product({2, D, d}), saturating_product({2, d})});
  const std::uint64_t scratch =
      saturating_sum({saturating_product({3, block, n}), saturating_product({n, saturating_sum({D, 4 * d, 8})}),
                      general_rows ? saturating_product({2, n, n}) : 0, rotary ? saturating_product({n, n}) : 0,
                      norms_over_all_heads ? saturating_product({2, n, n}) : 0});
  records::require_memory(
      saturating_sum(
          {saturating_product({sizeof(double), saturating_sum({copies, saturating_product({H, per_head}), scratch})}),
           mask ? saturating_product({2, n, n}) : 0, saturating_product({H, sizeof(probes::HeadMetrics)})}),
      fmt::format("measuring x of shape {} with w_q of shape {} and w_k of shape {} ({} heads)", shape_text(x),
                  shape_text(w_q), shape_text(w_k), heads),
      "; give fewer positions or smaller weights");
}

std::vector<probes::HeadMetrics> measure(
    const py::array& x_array, const py::array& w_q_array, const py::array& w_k_array,
    const std::optional<py::array>& b_q_array, const std::optional<py::array>& b_k_array, int heads, int kv_heads,
    bool causal, const std::optional<py::array>& mask_array, std::optional<double> scale, int layer,
    const std::optional<py::array>& rotary_array, const std::string& rotary_layout,
    const std::optional<py::array>& query_norm_array, const std::optional<py::array>& key_norm_array, double norm_eps,
    double logit_softcap, const std::vector<std::string>& what_if_texts, bool norm_centred,
    const std::optional<py::array>& query_norm_bias_array, const std::optional<py::array>& key_norm_bias_array) {
  std::vector<theory::PhiExpression> what_if;
  for (const std::string& text : what_if_texts) what_if.push_back(theory::PhiExpression::parse(text, "what_if"));
  const RealArray x = real_array(x_array, "x", 2), w_q = real_array(w_q_array, "w_q", 2),
                  w_k = real_array(w_k_array, "w_k", 2);
  std::optional<RealArray> b_q, b_k, rotary_angles_or_frequencies;
  if (b_q_array) b_q.emplace(real_array(*b_q_array, "b_q", 1));
  if (b_k_array) b_k.emplace(real_array(*b_k_array, "b_k", 1));
  if (rotary_array) {
    if (rotary_array->ndim() < 1 || rotary_array->ndim() > 3) {
      throw InputError(
          fmt::format("rotary must be 1-D (frequencies), 2-D (angles per position) or 3-D (angles per "
                      "head and position): got shape {}",
                      shape_text(*rotary_array)));
    }
    rotary_angles_or_frequencies.emplace(RealArray(*rotary_array, "rotary"));
  }
  std::optional<RealArray> query_gain, key_gain;
  if (query_norm_array) query_gain.emplace(real_array(*query_norm_array, "query_norm", 1));
  if (key_norm_array) key_gain.emplace(real_array(*key_norm_array, "key_norm", 1));
  std::optional<RealArray> query_bias, key_bias;
  if (query_norm_bias_array) query_bias.emplace(real_array(*query_norm_bias_array, "query_norm_bias", 1));
  if (key_norm_bias_array) key_bias.emplace(real_array(*key_norm_bias_array, "key_norm_bias", 1));
  if (heads < 1) throw InputError(fmt::format("heads = {} must be >= 1", heads));
  if (scale && !std::isfinite(*scale)) throw InputError(fmt::format("scale = {} is not finite", *scale));
  require_memory_to_measure(x_array, w_q_array, w_k_array, heads, mask_array.has_value(), rotary_array.has_value(),
                            query_norm_array || key_norm_array || logit_softcap > 0 ||
                                (rotary_array && rotary_array->ndim() >= 2),
                            (query_gain && query_gain->shape(0) != w_q_array.shape(1) / std::max(heads, 1)) ||
                                (key_gain && key_gain->shape(0) != w_q_array.shape(1) / std::max(heads, 1)));
  probes::HeadSplit split;
  split.kv_heads = kv_heads;
  if (mask_array) split.attended = attended_mask(*mask_array, x.shape(0), x.shape(0));
  SignalPoll poll;
  py::gil_scoped_release release;
  const Matrix W_Q = w_q.matrix(poll), W_K = w_k.matrix(poll);
  const Vector B_Q = b_q ? b_q->vector() : Vector(), B_K = b_k ? b_k->vector() : Vector();
  if (x.shape(0) == 0 || x.shape(1) == 0)
    throw InputError(fmt::format("x of shape ({}, {}) is empty", x.shape(0), x.shape(1)));
  const Index d = W_Q.cols() % heads == 0 ? W_Q.cols() / heads : 1;
  if (rotary_angles_or_frequencies && rotary_angles_or_frequencies->ndim() == 3) {
    split.head_rotary = rotaries_per_head(*rotary_angles_or_frequencies, rotary_layout, d, x.shape(0), poll);
  } else if (rotary_angles_or_frequencies) {
    split.rotary = rotary_of(*rotary_angles_or_frequencies, rotary_layout, d, x.shape(0), poll);
  }
  if (query_gain) {
    split.query_norm =
        probes::HeadNorm{query_gain->vector(), norm_eps, norm_centred, query_bias ? query_bias->vector() : Vector()};
  }
  if (key_gain) {
    split.key_norm =
        probes::HeadNorm{key_gain->vector(), norm_eps, norm_centred, key_bias ? key_bias->vector() : Vector()};
  }
  split.logit_softcap = logit_softcap;
  probes::LayerInputs inputs =
      probes::split_heads(x.matrix(poll), W_Q, W_K, B_Q, B_K, heads,
                          scale ? *scale : 1 / std::sqrt(static_cast<double>(d)), causal, {}, {}, std::move(split));
  // A head is measured whole, so a signal waits for the head under way.
  std::vector<probes::HeadMetrics> out;
  for (int head = 0; head < heads; ++head) {
    poll.check();
    out.push_back(probes::measure_head(inputs, layer, head, false, 1, what_if));
  }
  poll.check();
  probes::set_group_key_derivatives(inputs, out);
  return out;
}

std::vector<probes::HeadMetrics> measure_scores(const py::array& scores_array, bool causal,
                                                const std::optional<py::array>& mask_array, int layer,
                                                const std::vector<std::string>& what_if_texts, std::int64_t d) {
  std::vector<theory::PhiExpression> what_if;
  for (const std::string& text : what_if_texts) what_if.push_back(theory::PhiExpression::parse(text, "what_if"));
  if (d < 0) throw InputError(fmt::format("d = {} must be >= 0 (0: unknown)", d));
  const RealArray scores = real_array(scores_array, "scores", 3);
  // One head's N x N scores copied at a time, with the mask and its causal copy (bytes), and every head's
  // results.
  const std::uint64_t heads = unsigned_size(scores.shape(0)),
                      entries =
                          records::saturating_product({unsigned_size(scores.shape(1)), unsigned_size(scores.shape(2))});
  records::require_memory(records::saturating_sum({records::saturating_product({entries, sizeof(double) + 2}),
                                                   records::saturating_product({heads, sizeof(probes::HeadMetrics)})}),
                          fmt::format("measuring scores of shape {}", shape_text(scores_array)),
                          "; give fewer heads or positions");
  std::optional<theory::AttendedMask> attended;
  if (mask_array) attended = attended_mask(*mask_array, scores.shape(1), scores.shape(2));
  SignalPoll poll;
  py::gil_scoped_release release;
  std::vector<probes::HeadMetrics> out;
  for (py::ssize_t head = 0; head < scores.shape(0); ++head) {
    out.push_back(probes::measure_scores(scores.matrix(poll, head * scores.stride(0)), layer, static_cast<int>(head),
                                         causal, attended, what_if, d));
  }
  return out;
}

py::dict bounds(std::optional<long long> n, const std::vector<std::string>& families, const std::string& input,
                int trials, int search_starts, std::uint64_t seed, int threads) {
  json out;
  {
    py::gil_scoped_release release;
    out = exact::to_json(exact::run_bounds({n, trials, search_starts, families, input, seed, threads}));
  }
  return to_python(out);
}

py::dict cross_norm_bounds(std::optional<long long> n, std::optional<long long> dv,
                           const std::vector<std::string>& families, const std::string& input,
                           const std::string& values, const std::string& mix, int trials, int search_starts,
                           std::uint64_t seed, int threads) {
  json out;
  {
    py::gil_scoped_release release;
    out = exact::to_json(
        exact::run_cross_norm_bounds({n, dv, trials, search_starts, families, input, values, mix, seed, threads}));
  }
  return to_python(out);
}

py::dict mc(const monte_carlo::McRequest& request) {
  monte_carlo::McHooks hooks;
  std::vector<std::string> notes;
  hooks.note = [&](const std::string& note) { notes.push_back(note); };
  // The provenance names the backend; --backend auto's choice is no remark on the request.
  hooks.backend_chosen = [](const std::string&) {};
  // Ctrl-C reaches Python only while it holds the GIL: look after every chunk of samples.
  hooks.progress = [](std::size_t, std::size_t, const std::string&, std::uint64_t, std::uint64_t) {
    SignalPoll::check_signals();
  };
  json out;
  {
    py::gil_scoped_release release;
    out = monte_carlo::run_mc(request, hooks).to_json();
  }
  py::dict result = to_python(out);
  if (!notes.empty()) {
    py::list list;
    for (const auto& note : notes) list.append(note);
    result["notes"] = list;
  }
  return result;
}

}  // namespace
}  // namespace attncheck::python

PYBIND11_MODULE(_core, m) {
  using namespace attncheck;
  using namespace attncheck::python;
  m.doc() = "attncheck's exact routines and commands; use them through the attncheck package.";
  m.attr("__version__") = ATTNCHECK_VERSION;

  py::class_<probes::HeadMetrics>(m, "_Head")
      .def("as_dict", [](const probes::HeadMetrics& h) { return to_python(probes::to_json(h)); })
      .def(
          "log_line",
          [](const probes::HeadMetrics& h, const std::string& checkpoint, std::optional<std::int64_t> step,
             const std::string& activation) { return probes::probe_log_line(h, checkpoint, step, activation); },
          py::arg("checkpoint"), py::arg("step"), py::arg("activation"));

  m.def("softmax_norms", &softmax_norms, py::arg("logits"), py::arg("mask") = py::none());
  m.def("measure", &measure, py::arg("x"), py::arg("w_q"), py::arg("w_k"), py::arg("b_q") = py::none(),
        py::arg("b_k") = py::none(), py::arg("heads") = 1, py::arg("kv_heads") = 0, py::arg("causal") = false,
        py::arg("mask") = py::none(), py::arg("scale") = py::none(), py::arg("layer") = 0,
        py::arg("rotary") = py::none(), py::arg("rotary_layout") = "half", py::arg("query_norm") = py::none(),
        py::arg("key_norm") = py::none(), py::arg("norm_eps") = 1e-6, py::arg("logit_softcap") = 0.0,
        py::arg("what_if") = std::vector<std::string>{}, py::arg("norm_centred") = false,
        py::arg("query_norm_bias") = py::none(), py::arg("key_norm_bias") = py::none());
  m.def("measure_scores", &measure_scores, py::arg("scores"), py::arg("causal") = false, py::arg("mask") = py::none(),
        py::arg("layer") = 0, py::arg("what_if") = std::vector<std::string>{}, py::arg("d") = 0);
  m.def("append_log_lines", [](const std::string& path, const std::string& lines) {
    py::gil_scoped_release release;
    records::append_to_file(path, lines);
  });
  // Why `line`, the first line of the file `name`, is not a line of a probe log ("" when it is one), so that the
  // recorder appends only to its own logs.
  m.def("probe_log_line_problem", [](const std::string& line, const std::string& name) -> std::string {
    try {
      // Blank lines are skipped by the reader: a file of them holds no record to be a log by.
      return records::parse_probe_log(line, name).empty() ? "it holds no record of one" : "";
    } catch (const InputError& e) {
      return e.what();
    }
  });
  m.def("bounds", &bounds, py::arg("N"), py::arg("families"), py::arg("input"), py::arg("trials"),
        py::arg("search_starts"), py::arg("seed"), py::arg("threads"));
  m.def("cross_norm_bounds", &cross_norm_bounds, py::arg("N"), py::arg("dv"), py::arg("families"), py::arg("input"),
        py::arg("values"), py::arg("mix"), py::arg("trials"), py::arg("search_starts"), py::arg("seed"),
        py::arg("threads"));

  // The request's fields are the options' (mc_options.hpp): one property each, named as Python spells the option,
  // so attncheck.mc() (which is built from _mc_options()) reaches every option the command line has.
  auto request_class = py::class_<monte_carlo::McRequest>(m, "_McRequest").def(py::init<>());
  request_class.def_readwrite("command", &monte_carlo::McRequest::command);
  py::list options;
  const monte_carlo::McRequest defaults;
  for (const monte_carlo::McOption& option : monte_carlo::mc_options()) {
    std::visit(
        [&](auto field) {
          request_class.def_property(
              option.python_name().c_str(), [field](const monte_carlo::McRequest& r) { return r.*field; },
              [field](monte_carlo::McRequest& r, decltype(defaults.*field) value) { r.*field = value; });
          using Value = std::remove_cv_t<std::remove_reference_t<decltype(defaults.*field)>>;
          const char* kind = std::is_same_v<Value, bool>                         ? "flag"
                             : std::is_same_v<Value, std::string>                ? "text"
                             : std::is_same_v<Value, std::optional<std::string>> ? "optional_text"
                             : std::is_same_v<Value, double>                     ? "real"
                             : std::is_same_v<Value, std::optional<double>>      ? "optional_real"
                             : std::is_same_v<Value, std::uint64_t>              ? "count"
                                                                                 : "integer";
          options.append(py::make_tuple(option.python_name(), kind, py::cast(defaults.*field), option.help));
        },
        option.field);
  }
  m.attr("_mc_options") = options;
  m.def("mc", &mc, py::arg("request"));
  m.def(
      "report",
      [](const std::string& input, const std::vector<std::string>& compare_with, const std::string& out, bool plots,
         const std::string& gnuplot, long long map_layer, long long map_head, bool force) {
        reports::ReportOptions request;
        request.force = force;
        request.input = input;
        request.compare_with.assign(compare_with.begin(), compare_with.end());
        request.out = out;
        request.plots = plots;
        request.gnuplot = gnuplot;
        request.map_layer = map_layer;
        request.map_head = map_head;
        reports::ReportSummary summary;
        {
          py::gil_scoped_release release;
          summary = reports::write_report(request);
        }
        py::dict d;
        d["html"] = summary.html.string();
        d["markdown"] = summary.markdown.string();
        d["plots"] = summary.plots;
        d["series"] = summary.series;
        py::dict verdicts;
        verdicts["holds"] = summary.holds;
        verdicts["tight"] = summary.tight;
        verdicts["violated"] = summary.violated;
        verdicts["consistent"] = summary.consistent;
        verdicts["inconclusive"] = summary.inconclusive;
        d["verdicts"] = verdicts;
        d["probe_records"] = summary.probe_records;
        d["curve_points"] = summary.curve_points;
        d["vit_runs"] = summary.vit_runs;
        d["probe_outputs"] = summary.probe_outputs;
        d["warnings"] = summary.warnings;
        return d;
      },
      py::arg("input"), py::arg("compare_with"), py::arg("out"), py::arg("plots"), py::arg("gnuplot"),
      py::arg("map_layer"), py::arg("map_head"), py::arg("force"));
}
