#include "attncheck/theory/expression.hpp"

#include "attncheck/theory/pointwise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <tuple>

namespace attncheck::theory {

namespace {

enum class Op : std::uint8_t {
  constant,
  x,
  N,
  d,
  add,
  sub,
  mul,
  div,
  neg,
  powi,  // u^k, k a small integer: repeated products, as the built-in x^p
  pow,   // u^v otherwise
  abs,
  exp,
  log,
  sqrt,
  tanh,
  erf,
  sigmoid,
  relu,
  softplus,
  gelu,
  relu6,
  min,
  max,
  step,  // 1 where u > 0, else 0: relu's derivative, the frameworks' convention at 0
  sign,  // abs's derivative, 0 at 0
  normal_pdf,
  normal_cdf,
};

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Integer exponents up to this size are products (exact for the small ones the papers use); larger ones go through
// std::pow.
constexpr int kMaxIntegerPower = 64;
constexpr std::size_t kMaxTextLength = 4096;
constexpr int kMaxDepth = 200;

struct Function {
  std::string_view name;
  Op op;
  int arity;
  std::string_view help;
};

// The functions of the language. identity, relu2 and poly are the built-in activations' names, rewritten into the
// others when parsed (relu2(u) = relu(u)^2, poly(u, p) = u^p).
constexpr Function kFunctions[] = {
    {"abs", Op::abs, 1, ""},
    {"exp", Op::exp, 1, ""},
    {"log", Op::log, 1, "natural"},
    {"sqrt", Op::sqrt, 1, ""},
    {"tanh", Op::tanh, 1, ""},
    {"erf", Op::erf, 1, ""},
    {"sigmoid", Op::sigmoid, 1, "1/(1+e^-u)"},
    {"relu", Op::relu, 1, ""},
    {"relu2", Op::relu, 1, "relu(u)^2"},
    {"relu6", Op::relu6, 1, "min(max(u, 0), 6)"},
    {"softplus", Op::softplus, 1, "log(1+e^u)"},
    {"gelu", Op::gelu, 1, "u Phi(u)"},
    {"identity", Op::x, 1, ""},
    {"poly", Op::powi, 2, "poly(u, p) = u^p"},
    {"min", Op::min, 2, ""},
    {"max", Op::max, 2, ""},
    {"step", Op::step, 1, "1 if u > 0 else 0"},
    {"sign", Op::sign, 1, ""},
    {"normal_pdf", Op::normal_pdf, 1, ""},
    {"normal_cdf", Op::normal_cdf, 1, "Phi(u)"},
};

const Function* find_function(std::string_view name) {
  for (const Function& f : kFunctions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string_view function_name(Op op) {
  for (const Function& f : kFunctions) {
    if (f.op == op && f.name != "relu2" && f.name != "identity" && f.name != "poly") return f.name;
  }
  return "?";
}

double integer_power_of(double u, int k) {
  if (k < 0) return 1 / integer_power(u, -k);
  return integer_power(u, k);
}

double apply(Op op, double a, double b, int k) {
  switch (op) {
    case Op::add: return a + b;
    case Op::sub: return a - b;
    case Op::mul: return a * b;
    case Op::div: return a / b;
    case Op::neg: return -a;
    case Op::powi: return integer_power_of(a, k);
    case Op::pow: return std::pow(a, b);
    case Op::abs: return std::abs(a);
    case Op::exp: return std::exp(a);
    case Op::log: return std::log(a);
    case Op::sqrt: return std::sqrt(a);
    case Op::tanh: return std::tanh(a);
    case Op::erf: return std::erf(a);
    case Op::sigmoid: return logistic(a);
    case Op::relu: return pointwise_value(Pointwise::relu, 1, a);
    case Op::softplus: return softplus(a);
    case Op::gelu: return pointwise_value(Pointwise::gelu, 1, a);
    case Op::relu6: return pointwise_value(Pointwise::relu6, 1, a);
    case Op::min: return std::min(a, b);
    case Op::max: return std::max(a, b);
    case Op::step: return a > 0 ? 1.0 : 0.0;
    case Op::sign: return a > 0 ? 1.0 : (a < 0 ? -1.0 : 0.0);
    case Op::normal_pdf: return standard_normal_pdf(a);
    case Op::normal_cdf: return standard_normal_cdf(a);
    case Op::constant:
    case Op::x:
    case Op::N:
    case Op::d: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

bool is_binary(Op op) {
  return op == Op::add || op == Op::sub || op == Op::mul || op == Op::div || op == Op::pow || op == Op::min ||
         op == Op::max;
}

}  // namespace

struct ExpressionNode {
  Op op = Op::constant;
  int a = -1, b = -1;
  double c = 0;  // constant
  int k = 0;     // powi's exponent
};

// Nodes in creation order, children before parents; equal nodes are one (interned), and make() folds constants
// and the identities with 0 and 1, so that phi' reads as a person would write it.
struct ExpressionGraph {
  std::vector<ExpressionNode> nodes;
  std::map<std::tuple<int, int, int, std::uint64_t, int>, int> index;

  bool is_constant(int id, double value) const { return nodes[id].op == Op::constant && nodes[id].c == value; }
  bool constant(int id) const { return nodes[id].op == Op::constant; }

  int intern(const ExpressionNode& n) {
    const auto key = std::make_tuple(static_cast<int>(n.op), n.a, n.b, std::bit_cast<std::uint64_t>(n.c), n.k);
    if (const auto it = index.find(key); it != index.end()) return it->second;
    nodes.push_back(n);
    const int id = static_cast<int>(nodes.size()) - 1;
    index.emplace(key, id);
    return id;
  }
  int number(double value) { return intern({Op::constant, -1, -1, value == 0 ? 0.0 : value, 0}); }
  int leaf(Op op) { return intern({op, -1, -1, 0, 0}); }

  int make(Op op, int a, int b = -1, int k = 0) {
    const bool a_const = constant(a), b_const = b < 0 || constant(b);
    if (a_const && b_const) {
      return number(apply(op, nodes[a].c, b < 0 ? 0.0 : nodes[b].c, k));
    }
    switch (op) {
      case Op::add:
        if (is_constant(a, 0)) return b;
        if (is_constant(b, 0)) return a;
        if (nodes[b].op == Op::neg) return make(Op::sub, a, nodes[b].a);
        break;
      case Op::sub:
        if (is_constant(b, 0)) return a;
        if (is_constant(a, 0)) return make(Op::neg, b);
        if (a == b) return number(0);
        break;
      case Op::mul:
        if (is_constant(a, 0) || is_constant(b, 0)) return number(0);
        if (is_constant(a, 1)) return b;
        if (is_constant(b, 1)) return a;
        if (is_constant(a, -1)) return make(Op::neg, b);
        if (is_constant(b, -1)) return make(Op::neg, a);
        if (b_const && !a_const) return make(Op::mul, b, a);  // constants first: 3*x^2
        if (a_const && nodes[b].op == Op::mul && constant(nodes[b].a)) {
          return make(Op::mul, number(nodes[a].c * nodes[nodes[b].a].c), nodes[b].b);
        }
        break;
      case Op::div:
        if (is_constant(b, 1)) return a;
        if (is_constant(a, 0)) return number(0);
        break;
      case Op::neg:
        if (nodes[a].op == Op::neg) return nodes[a].a;
        break;
      case Op::powi:
        if (k == 0) return number(1);
        if (k == 1) return a;
        break;
      case Op::pow:
        if (b_const) {
          const double e = nodes[b].c;
          if (e == std::round(e) && std::abs(e) <= kMaxIntegerPower) return make(Op::powi, a, -1, static_cast<int>(e));
        }
        break;
      default: break;
    }
    return intern({op, a, is_binary(op) ? b : -1, 0, op == Op::powi ? k : 0});
  }

  // d/dx of node id (memoized: shared subexpressions are differentiated once).
  int derive(int id, std::map<int, int>& memo) {
    if (const auto it = memo.find(id); it != memo.end()) return it->second;
    const ExpressionNode n = nodes[id];
    const auto da = [&] { return derive(n.a, memo); };
    const auto db = [&] { return derive(n.b, memo); };
    // f'(u) u'
    const auto chain = [&](int outer) { return make(Op::mul, outer, da()); };
    int out = 0;
    switch (n.op) {
      case Op::constant:
      case Op::N:
      case Op::d: out = number(0); break;
      case Op::x: out = number(1); break;
      case Op::add: out = make(Op::add, da(), db()); break;
      case Op::sub: out = make(Op::sub, da(), db()); break;
      case Op::mul: out = make(Op::add, make(Op::mul, da(), n.b), make(Op::mul, n.a, db())); break;
      case Op::div:
        if (const int db_ = db(); is_constant(db_, 0)) {
          out = make(Op::div, da(), n.b);
          break;
        }
        // (a' b - a b') / b^2
        out = make(Op::div, make(Op::sub, make(Op::mul, da(), n.b), make(Op::mul, n.a, db())),
                   make(Op::powi, n.b, -1, 2));
        break;
      case Op::neg: out = make(Op::neg, da()); break;
      case Op::powi: out = chain(make(Op::mul, number(n.k), make(Op::powi, n.a, -1, n.k - 1))); break;
      case Op::pow: {
        // u^v (v' log u + v u' / u); v' = 0: v u^(v - 1) u'
        const int dv = db();
        if (is_constant(dv, 0)) {
          out = chain(make(Op::mul, n.b, make(Op::pow, n.a, make(Op::sub, n.b, number(1)))));
        } else {
          out =
              make(Op::mul, id,
                   make(Op::add, make(Op::mul, dv, make(Op::log, n.a)), make(Op::div, make(Op::mul, n.b, da()), n.a)));
        }
        break;
      }
      case Op::abs: out = chain(make(Op::sign, n.a)); break;
      case Op::exp: out = chain(id); break;
      case Op::log: out = make(Op::div, da(), n.a); break;
      case Op::sqrt: out = make(Op::div, da(), make(Op::mul, number(2), id)); break;
      case Op::tanh: out = chain(make(Op::sub, number(1), make(Op::powi, id, -1, 2))); break;
      case Op::erf:
        out = chain(make(Op::mul, number(2 / std::sqrt(std::numbers::pi)),
                         make(Op::exp, make(Op::neg, make(Op::powi, n.a, -1, 2)))));
        break;
      case Op::sigmoid: out = chain(make(Op::mul, id, make(Op::sub, number(1), id))); break;
      case Op::relu: out = chain(make(Op::step, n.a)); break;
      case Op::softplus: out = chain(make(Op::sigmoid, n.a)); break;
      case Op::gelu:
        out = chain(make(Op::add, make(Op::normal_cdf, n.a), make(Op::mul, n.a, make(Op::normal_pdf, n.a))));
        break;
      case Op::relu6:
        out = chain(make(Op::mul, make(Op::step, n.a), make(Op::step, make(Op::sub, number(6), n.a))));
        break;
      case Op::min:
      case Op::max: {
        // min: a' where a <= b, else b'; max: a' where a >= b, else b'
        const int switched =
            n.op == Op::min ? make(Op::step, make(Op::sub, n.a, n.b)) : make(Op::step, make(Op::sub, n.b, n.a));
        const int a_prime = da();
        out = make(Op::add, a_prime, make(Op::mul, switched, make(Op::sub, db(), a_prime)));
        break;
      }
      case Op::step:
      case Op::sign: out = number(0); break;  // almost everywhere
      case Op::normal_pdf: out = chain(make(Op::neg, make(Op::mul, n.a, id))); break;
      case Op::normal_cdf: out = chain(make(Op::normal_pdf, n.a)); break;
    }
    memo.emplace(id, out);
    return out;
  }

  // Node id of `source` copied into this graph with N and d replaced by numbers (folding what becomes constant).
  int bind(const ExpressionGraph& source, int id, double N, double d, std::map<int, int>& memo) {
    if (const auto it = memo.find(id); it != memo.end()) return it->second;
    const ExpressionNode& n = source.nodes[id];
    int out = 0;
    switch (n.op) {
      case Op::constant: out = number(n.c); break;
      case Op::x: out = leaf(Op::x); break;
      case Op::N: out = number(N); break;
      case Op::d: out = number(d); break;
      default: {
        const int a = bind(source, n.a, N, d, memo);
        const int b = n.b < 0 ? -1 : bind(source, n.b, N, d, memo);
        out = make(n.op, a, b, n.k);
      }
    }
    memo.emplace(id, out);
    return out;
  }
};

namespace {

// ---- Printing -----------------------------------------------------------------------------------------------------

int precedence(const ExpressionNode& n) {
  switch (n.op) {
    case Op::add:
    case Op::sub: return 1;
    case Op::mul:
    case Op::div: return 2;
    case Op::neg: return 3;
    case Op::powi:
    case Op::pow: return 4;
    case Op::constant: return n.c < 0 ? 3 : 5;
    default: return 5;
  }
}

// Past this length a text is cut (a derivative may print far longer than its graph: min and max repeat a').
constexpr std::size_t kMaxPrintedLength = 4000;

void print(const ExpressionGraph& g, int id, std::string& out) {
  if (out.size() > kMaxPrintedLength) return;
  const ExpressionNode& n = g.nodes[id];
  const auto child = [&](int c, bool parens) {
    if (parens) out += '(';
    print(g, c, out);
    if (parens) out += ')';
  };
  const int mine = precedence(n);
  switch (n.op) {
    case Op::constant:
      if (n.c == std::numbers::pi) {
        out += "pi";
      } else {
        out += fmt::format("{}", n.c);
      }
      return;
    case Op::x: out += 'x'; return;
    case Op::N: out += 'N'; return;
    case Op::d: out += 'd'; return;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div: {
      const char* symbol = n.op == Op::add ? " + " : n.op == Op::sub ? " - " : n.op == Op::mul ? "*" : "/";
      child(n.a, precedence(g.nodes[n.a]) < mine);
      out += symbol;
      // The right operand in parentheses at equal precedence: a - (b + c), a/(b*c), and also a + (b + c), a*(b*c),
      // whose text must read back as the same program (floating point does not associate) and the same canonical
      // text (a point's seed); and a negative one: x*(-y).
      const int right = precedence(g.nodes[n.b]);
      child(n.b, right <= mine || right == 3);
      return;
    }
    case Op::neg:
      out += '-';
      child(n.a, precedence(g.nodes[n.a]) <= mine);
      return;
    case Op::powi:
      child(n.a, precedence(g.nodes[n.a]) <= mine);
      out += fmt::format("^{}", n.k);
      return;
    case Op::pow:
      child(n.a, precedence(g.nodes[n.a]) <= mine);
      out += '^';
      child(n.b, precedence(g.nodes[n.b]) < mine);
      return;
    default:
      out += function_name(n.op);
      out += '(';
      print(g, n.a, out);
      if (n.b >= 0) {
        out += ", ";
        print(g, n.b, out);
      }
      out += ')';
      return;
  }
}

std::string text_of(const ExpressionGraph& g, int id) {
  std::string out;
  print(g, id, out);
  if (out.size() > kMaxPrintedLength) {
    out.resize(kMaxPrintedLength);
    out += " ... (cut)";
  }
  return out;
}

// ---- Parsing ------------------------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view text, std::string_view option, ExpressionGraph& graph)
      : text_(text), option_(option), graph_(graph) {}

  int parse() {
    skip_space();
    if (pos_ == text_.size()) fail("the expression is empty; write phi in x, e.g. 'x^3' or 'sigmoid(x - log(N))'");
    const int root = expression(0);
    skip_space();
    if (pos_ != text_.size())
      fail(fmt::format("unexpected '{}'; expected an operator (+ - * / ^) or the end", text_[pos_]));
    return root;
  }

 private:
  std::string_view text_, option_;
  ExpressionGraph& graph_;
  std::size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what, std::size_t at) const {
    throw InputError(fmt::format("{}: '{}': at character {}: {}", option_, printable(text_, true), at + 1, what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what, pos_); }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool accept(std::string_view token) {
    skip_space();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(char ch, const char* what) {
    if (!accept(std::string_view(&ch, 1))) {
      skip_space();
      fail(pos_ < text_.size() ? fmt::format("expected {}, found '{}'", what, text_[pos_])
                               : fmt::format("expected {}, found the end", what));
    }
  }
  void check_depth(int depth) const {
    if (depth > kMaxDepth) fail(fmt::format("nested more than {} levels deep", kMaxDepth));
  }

  int expression(int depth) {
    check_depth(depth);
    int left = term(depth + 1);
    while (true) {
      if (accept("+")) {
        left = graph_.make(Op::add, left, term(depth + 1));
      } else if (accept("-")) {
        left = graph_.make(Op::sub, left, term(depth + 1));
      } else {
        return left;
      }
    }
  }
  int term(int depth) {
    check_depth(depth);
    int left = unary(depth + 1);
    while (true) {
      skip_space();
      if (text_.substr(pos_, 2) == "**") return left;  // a power: unary() takes it
      if (accept("*")) {
        left = graph_.make(Op::mul, left, unary(depth + 1));
      } else if (accept("/")) {
        left = graph_.make(Op::div, left, unary(depth + 1));
      } else {
        return left;
      }
    }
  }
  int unary(int depth) {
    check_depth(depth);
    if (accept("-")) return graph_.make(Op::neg, unary(depth + 1));
    if (accept("+")) return unary(depth + 1);
    const int base = primary(depth + 1);
    // Right-associative, binding tighter than a leading minus: -x^2 = -(x^2), 2^-x = 2^(-x), x^2^3 = x^(2^3).
    if (accept("^") || accept("**")) return graph_.make(Op::pow, base, unary(depth + 1));
    return base;
  }
  int primary(int depth) {
    check_depth(depth);
    skip_space();
    if (pos_ == text_.size()) fail("expected a number, a name or '(', found the end");
    const char ch = text_[pos_];
    if (ch == '(') {
      ++pos_;
      const int inner = expression(depth + 1);
      expect(')', "')'");
      return inner;
    }
    if ((ch >= '0' && ch <= '9') || ch == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') return name(depth);
    fail(fmt::format("unexpected '{}'; expected a number, a name or '('", ch));
  }
  int number() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.')) ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      std::size_t look = pos_ + 1;
      if (look < text_.size() && (text_[look] == '+' || text_[look] == '-')) ++look;
      if (look < text_.size() && std::isdigit(static_cast<unsigned char>(text_[look]))) {
        pos_ = look;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      }
    }
    const std::string literal(text_.substr(start, pos_ - start));
    char* end = nullptr;
    const double value = std::strtod(literal.c_str(), &end);
    if (end != literal.c_str() + literal.size() || literal == ".")
      fail(fmt::format("'{}' is not a number", literal), start);
    if (!std::isfinite(value)) fail(fmt::format("{} is not a finite number", literal), start);
    return graph_.number(value);
  }
  int name(int depth) {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    const std::string_view word = text_.substr(start, pos_ - start);
    skip_space();
    const bool call = pos_ < text_.size() && text_[pos_] == '(';
    if (!call) {
      if (word == "x") return graph_.leaf(Op::x);
      if (word == "N") return graph_.leaf(Op::N);
      if (word == "d") return graph_.leaf(Op::d);
      if (word == "pi") return graph_.number(std::numbers::pi);
      if (find_function(word)) fail(fmt::format("{} is a function: write {}(x)", word, word), start);
      fail(unknown(word), start);
    }
    if (word == "softmax" || word == "matpow") {
      fail(word == "softmax" ? "softmax is not pointwise: write exp(x) and add --normalize rows"
                             : "the matrix power is not pointwise: use --phi matpow",
           start);
    }
    const Function* f = find_function(word);
    if (!f) fail(unknown(word), start);
    ++pos_;  // '('
    std::vector<int> args{expression(depth + 1)};
    while (accept(",")) args.push_back(expression(depth + 1));
    expect(')', "')' after the arguments");
    if (static_cast<int>(args.size()) != f->arity) {
      fail(fmt::format("{} takes {} argument{}, got {}", word, f->arity, f->arity == 1 ? "" : "s", args.size()), start);
    }
    if (word == "identity") return args[0];
    if (word == "relu2") return graph_.make(Op::powi, graph_.make(Op::relu, args[0]), -1, 2);
    if (word == "poly") {
      const ExpressionNode& p = graph_.nodes[args[1]];
      if (p.op != Op::constant || p.c != std::round(p.c) || p.c < 0 || p.c > kMaxIntegerPower) {
        fail(fmt::format("poly(u, p) needs p a whole number from 0 to {}", kMaxIntegerPower), start);
      }
      return graph_.make(Op::powi, args[0], -1, static_cast<int>(p.c));
    }
    return graph_.make(f->op, args[0], args.size() > 1 ? args[1] : -1);
  }
  static std::string unknown(std::string_view word) {
    std::string functions;
    for (const Function& f : kFunctions) functions += (functions.empty() ? "" : ", ") + std::string(f.name);
    return fmt::format("unknown name '{}'; the variables are x (the score), N, d and pi, the functions {}",
                       printable(word, true), functions);
  }
};

// ---- Intervals ----------------------------------------------------------------------------------------------------

struct Interval {
  double lo = -kInfinity, hi = kInfinity;
};
constexpr Interval kWhole{};

// 0 * infinity is 0 here: the sets hold finite reals, and 0 times any of them is 0.
double product(double a, double b) { return (a == 0 || b == 0) ? 0.0 : a * b; }

Interval checked(Interval v) {
  if (std::isnan(v.lo) || std::isnan(v.hi) || v.lo > v.hi) return kWhole;
  return v;
}
Interval monotone(Interval a, double (*f)(double)) { return checked({f(a.lo), f(a.hi)}); }
Interval times(Interval a, Interval b) {
  const std::array<double, 4> p{product(a.lo, b.lo), product(a.lo, b.hi), product(a.hi, b.lo), product(a.hi, b.hi)};
  return checked({*std::min_element(p.begin(), p.end()), *std::max_element(p.begin(), p.end())});
}
Interval reciprocal(Interval a) {
  if (a.lo <= 0 && a.hi >= 0) return kWhole;  // may divide by 0
  return checked({1 / a.hi, 1 / a.lo});
}
Interval integer_power_interval(Interval a, int k) {
  if (k < 0) return reciprocal(integer_power_interval(a, -k));
  const auto at = [k](double v) { return std::pow(v, k); };
  if (k % 2 == 1) return checked({at(a.lo), at(a.hi)});
  if (a.lo >= 0) return checked({at(a.lo), at(a.hi)});
  if (a.hi <= 0) return checked({at(a.hi), at(a.lo)});
  return checked({0, std::max(at(a.lo), at(a.hi))});
}
double gelu_at(double v) {
  if (v == -kInfinity) return 0;
  if (v == kInfinity) return kInfinity;
  return pointwise_value(Pointwise::gelu, 1, v);
}

Interval interval_of(const ExpressionGraph& g, int id, Interval x, std::vector<std::optional<Interval>>& memo) {
  if (memo[id]) return *memo[id];
  const ExpressionNode& n = g.nodes[id];
  const auto A = [&] { return interval_of(g, n.a, x, memo); };
  const auto B = [&] { return interval_of(g, n.b, x, memo); };
  Interval out = kWhole;
  switch (n.op) {
    case Op::constant: out = std::isfinite(n.c) ? Interval{n.c, n.c} : kWhole; break;
    case Op::x: out = x; break;
    case Op::N:
    case Op::d: out = {1, kInfinity}; break;
    case Op::add: {
      const Interval a = A(), b = B();
      out = checked({a.lo + b.lo, a.hi + b.hi});
      break;
    }
    case Op::sub: {
      const Interval a = A(), b = B();
      out = checked({a.lo - b.hi, a.hi - b.lo});
      break;
    }
    case Op::mul: out = times(A(), B()); break;
    case Op::div: out = times(A(), reciprocal(B())); break;
    case Op::neg: {
      const Interval a = A();
      out = {-a.hi, -a.lo};
      break;
    }
    case Op::powi: out = integer_power_interval(A(), n.k); break;
    case Op::pow: {
      const Interval base = A();
      if (base.lo <= 0) break;  // may be NaN or divide by 0: no bound
      const Interval logs = checked({std::log(base.lo), std::log(base.hi)});
      const Interval e = times(B(), logs);
      out = checked({std::exp(e.lo), std::exp(e.hi)});
      break;
    }
    case Op::abs: {
      const Interval a = A();
      if (a.lo >= 0) {
        out = a;
      } else if (a.hi <= 0) {
        out = {-a.hi, -a.lo};
      } else {
        out = checked({0, std::max(-a.lo, a.hi)});
      }
      break;
    }
    case Op::exp: out = monotone(A(), [](double v) { return std::exp(v); }); break;
    case Op::log: {
      const Interval a = A();
      if (a.lo > 0) out = checked({std::log(a.lo), std::log(a.hi)});
      break;
    }
    case Op::sqrt: {
      const Interval a = A();
      if (a.lo >= 0) out = checked({std::sqrt(a.lo), std::sqrt(a.hi)});
      break;
    }
    case Op::tanh: out = monotone(A(), [](double v) { return std::tanh(v); }); break;
    case Op::erf: out = monotone(A(), [](double v) { return std::erf(v); }); break;
    case Op::sigmoid: out = monotone(A(), [](double v) { return logistic(v); }); break;
    case Op::relu: out = monotone(A(), [](double v) { return v > 0 ? v : 0.0; }); break;
    case Op::softplus: out = monotone(A(), [](double v) { return v == kInfinity ? kInfinity : softplus(v); }); break;
    case Op::relu6: out = monotone(A(), [](double v) { return std::clamp(v, 0.0, 6.0); }); break;
    case Op::step: out = monotone(A(), [](double v) { return v > 0 ? 1.0 : 0.0; }); break;
    case Op::sign: out = monotone(A(), [](double v) { return v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0); }); break;
    case Op::normal_cdf: out = monotone(A(), [](double v) { return standard_normal_cdf(v); }); break;
    case Op::normal_pdf: {
      const Interval a = A();
      const auto pdf = [](double v) { return std::isinf(v) ? 0.0 : standard_normal_pdf(v); };
      if (a.lo >= 0) {
        out = {pdf(a.hi), pdf(a.lo)};
      } else if (a.hi <= 0) {
        out = {pdf(a.lo), pdf(a.hi)};
      } else {
        out = {std::min(pdf(a.lo), pdf(a.hi)), standard_normal_pdf(0.0)};
      }
      break;
    }
    case Op::gelu: {
      // GELU falls from 0 to its minimum (about -0.16997 at x = -0.7518) and rises after it; -0.17 is below it.
      constexpr double kTurn = -0.7517916, kBelowMinimum = -0.17;
      const Interval a = A();
      // (a bracket around the turning point, not the rounded point itself)
      const double lo =
          (a.lo <= kTurn + 1e-6 && a.hi >= kTurn - 1e-6) ? kBelowMinimum : std::min(gelu_at(a.lo), gelu_at(a.hi));
      out = checked({lo, std::max(gelu_at(a.lo), gelu_at(a.hi))});
      break;
    }
    case Op::min: {
      const Interval a = A(), b = B();
      out = checked({std::min(a.lo, b.lo), std::min(a.hi, b.hi)});
      break;
    }
    case Op::max: {
      const Interval a = A(), b = B();
      out = checked({std::max(a.lo, b.lo), std::max(a.hi, b.hi)});
      break;
    }
  }
  memo[id] = out;
  return out;
}

// Over every x in `x` and every N, d >= 1.
Interval interval_of(const ExpressionGraph& g, int root, Interval x = kWhole) {
  std::vector<std::optional<Interval>> memo(g.nodes.size());
  return interval_of(g, root, x, memo);
}

// The intervals' ends are rounded to nearest, not outward: the bound is widened by far more than the rounding of any
// expression the parser accepts can move it (a few ulps per operation).
constexpr double kRoundingMargin = 1e-12;

std::optional<double> sup_of(Interval v) {
  if (std::isnan(v.lo) || std::isnan(v.hi)) return std::nullopt;
  const double sup = std::max(std::abs(v.lo), std::abs(v.hi));
  if (!std::isfinite(sup)) return std::nullopt;
  return sup * (1 + kRoundingMargin);
}

}  // namespace

// ---- Programs -----------------------------------------------------------------------------------------------------

// out = op(a, b); an operand below 0 is the immediate (a constant), register kInput is x.
struct PhiProgram::Instruction {
  Op op;
  int out, a, b;
  double a_value, b_value;
  int k;
};

namespace {

constexpr int kInput = -1, kImmediate = -2;

struct ProgramBuilder {
  const ExpressionGraph& graph;
  std::vector<PhiProgram::Instruction> code;
  std::map<int, int> registers;  // node -> register
  int count = 0;

  // The operand of node id: its register, kInput for x, kImmediate (with its value) for a constant.
  int operand(int id, double& value) {
    const ExpressionNode& n = graph.nodes[id];
    if (n.op == Op::constant) {
      value = n.c;
      return kImmediate;
    }
    if (n.op == Op::x) return kInput;
    if (const auto it = registers.find(id); it != registers.end()) return it->second;
    const ExpressionNode node = n;
    PhiProgram::Instruction ins{node.op, 0, kImmediate, kImmediate, 0, 0, node.k};
    ins.a = operand(node.a, ins.a_value);
    if (node.b >= 0) ins.b = operand(node.b, ins.b_value);
    ins.out = count++;
    code.push_back(ins);
    registers.emplace(id, ins.out);
    return ins.out;
  }
  // A root as a register: a constant or x is copied into one, so that every output has its own.
  int root(int id) {
    double value = 0;
    const int r = operand(id, value);
    if (r >= 0) return r;
    PhiProgram::Instruction ins{Op::add, count++, r, kImmediate, value, 0.0, 0};
    code.push_back(ins);
    return ins.out;
  }
};

}  // namespace

void PhiProgram::evaluate(const double* x, Index n, double* value, double* derivative,
                          std::vector<double>& work) const {
  if (n <= 0) return;
  const std::size_t size = static_cast<std::size_t>(registers_) * static_cast<std::size_t>(n);
  if (work.size() < size) work.resize(size);
  double* regs = work.data();
  const auto reg = [&](int r) {
    return r == kInput ? x : regs + static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
  };
  for (const Instruction& ins : *code_) {
    double* out = regs + static_cast<std::size_t>(ins.out) * static_cast<std::size_t>(n);
    const double* a = ins.a == kImmediate ? nullptr : reg(ins.a);
    const double* b = ins.b == kImmediate ? nullptr : reg(ins.b);
    const double av = ins.a_value, bv = ins.b_value;
    // The arithmetic with a register and an immediate is the common case (x / T, 3*x^2): its own loops vectorize.
    switch (ins.op) {
      case Op::add:
        if (a && b) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] + b[i];
        } else if (a) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] + bv;
        } else if (b) {
          for (Index i = 0; i < n; ++i) out[i] = av + b[i];
        } else {
          for (Index i = 0; i < n; ++i) out[i] = av + bv;
        }
        continue;
      case Op::sub:
        if (a && b) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] - b[i];
        } else if (a) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] - bv;
        } else {
          for (Index i = 0; i < n; ++i) out[i] = av - b[i];
        }
        continue;
      case Op::mul:
        if (a && b) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] * b[i];
        } else if (a) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] * bv;
        } else {
          for (Index i = 0; i < n; ++i) out[i] = av * b[i];
        }
        continue;
      case Op::div:
        if (a && b) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] / b[i];
        } else if (a) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] / bv;
        } else {
          for (Index i = 0; i < n; ++i) out[i] = av / b[i];
        }
        continue;
      case Op::powi:
        if (ins.k == 2) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] * a[i];
        } else if (ins.k == 3) {
          for (Index i = 0; i < n; ++i) out[i] = a[i] * a[i] * a[i];
        } else {
          for (Index i = 0; i < n; ++i) out[i] = integer_power_of(a[i], ins.k);
        }
        continue;
      default: break;
    }
    for (Index i = 0; i < n; ++i) out[i] = apply(ins.op, a ? a[i] : av, b ? b[i] : bv, ins.k);
  }
  const double* v = reg(value_register_);
  const double* g = reg(derivative_register_);
  std::copy(v, v + n, value);
  std::copy(g, g + n, derivative);
}

PhiExpression PhiExpression::parse(std::string_view text, std::string_view option) {
  if (text.size() > kMaxTextLength) {
    throw InputError(
        fmt::format("{}: the expression is {} characters long; at most {}", option, text.size(), kMaxTextLength));
  }
  auto graph = std::make_shared<ExpressionGraph>();
  PhiExpression e;
  e.value_root_ = Parser(text, option, *graph).parse();
  for (const ExpressionNode& n : graph->nodes) {
    if (n.op == Op::constant && !std::isfinite(n.c)) {
      throw InputError(fmt::format("{}: '{}': a part without x evaluates to {} (e.g. log(0), 1/0)", option,
                                   printable(text, true), n.c));
    }
  }
  std::map<int, int> memo;
  e.derivative_root_ = graph->derive(e.value_root_, memo);
  e.text_ = text_of(*graph, e.value_root_);
  e.graph_ = std::move(graph);
  return e;
}

std::string PhiExpression::derivative_text() const { return text_of(*graph_, derivative_root_); }

bool PhiExpression::uses_head_size() const {
  return std::any_of(graph_->nodes.begin(), graph_->nodes.end(), [](const ExpressionNode& n) { return n.op == Op::d; });
}

bool PhiExpression::uses_length() const {
  return std::any_of(graph_->nodes.begin(), graph_->nodes.end(), [](const ExpressionNode& n) { return n.op == Op::N; });
}

bool PhiExpression::uses_sizes() const {
  return std::any_of(graph_->nodes.begin(), graph_->nodes.end(),
                     [](const ExpressionNode& n) { return n.op == Op::N || n.op == Op::d; });
}

// The program that computes nodes `value` and `derivative` of `graph` into its two outputs.
PhiProgram PhiExpression::program_of(const ExpressionGraph& graph, int value, int derivative) {
  ProgramBuilder builder{graph, {}, {}, 0};
  PhiProgram program;
  program.value_register_ = builder.root(value);
  program.derivative_register_ = builder.root(derivative);
  program.registers_ = builder.count;
  program.code_ = std::make_shared<const std::vector<PhiProgram::Instruction>>(std::move(builder.code));
  return program;
}

PhiProgram PhiExpression::compile(double N, double d) const {
  ExpressionGraph bound;
  std::map<int, int> memo;
  const int value = bound.bind(*graph_, value_root_, N, d, memo);
  return program_of(bound, value, bound.bind(*graph_, derivative_root_, N, d, memo));
}

PhiExpression PhiExpression::bind(double N, double d) const {
  auto graph = std::make_shared<ExpressionGraph>();
  std::map<int, int> memo;
  PhiExpression e;
  e.value_root_ = graph->bind(*graph_, value_root_, N, d, memo);
  e.derivative_root_ = graph->bind(*graph_, derivative_root_, N, d, memo);
  e.text_ = text_of(*graph, e.value_root_);
  e.graph_ = std::move(graph);
  return e;
}

std::optional<PhiProgram> PhiExpression::compile_exponent(double N, double d) const {
  ExpressionGraph bound;
  std::map<int, int> memo;
  const int value = bound.bind(*graph_, value_root_, N, d, memo);
  if (bound.nodes[value].op != Op::exp) return std::nullopt;
  const int exponent = bound.nodes[value].a;
  std::map<int, int> derivatives;
  const int slope = bound.derive(exponent, derivatives);
  return program_of(bound, exponent, slope);
}

namespace {

// A factor free of x made of numbers, N and d: coefficient N^n d^m, or none.
std::optional<PhiExpression::PowerLaw> size_factor(const ExpressionGraph& g, int id) {
  const ExpressionNode& n = g.nodes[id];
  using Law = PhiExpression::PowerLaw;
  switch (n.op) {
    case Op::constant: return Law{n.c, 0, 0, 0};
    case Op::N: return Law{1, 1, 0, 0};
    case Op::d: return Law{1, 0, 1, 0};
    case Op::neg: {
      auto a = size_factor(g, n.a);
      if (a) a->coefficient = -a->coefficient;
      return a;
    }
    case Op::mul:
    case Op::div: {
      const auto a = size_factor(g, n.a), b = size_factor(g, n.b);
      if (!a || !b) return std::nullopt;
      const double sign = n.op == Op::mul ? 1 : -1;
      return Law{n.op == Op::mul ? a->coefficient * b->coefficient : a->coefficient / b->coefficient,
                 a->n_exponent + sign * b->n_exponent, a->d_exponent + sign * b->d_exponent, 0};
    }
    case Op::sqrt:
    case Op::powi:
    case Op::pow: {
      const auto a = size_factor(g, n.a);
      double e = 0.5;
      if (n.op == Op::powi) e = n.k;
      if (n.op == Op::pow) {
        if (!g.constant(n.b)) return std::nullopt;
        e = g.nodes[n.b].c;
      }
      // a positive base keeps c^e real and (N^n)^e = N^(n e)
      if (!a || !(a->coefficient > 0)) return std::nullopt;
      return Law{std::pow(a->coefficient, e), a->n_exponent * e, a->d_exponent * e, 0};
    }
    default: return std::nullopt;
  }
}

std::optional<PhiExpression::PowerLaw> power_law_of(const ExpressionGraph& g, int id) {
  const ExpressionNode& n = g.nodes[id];
  if (n.op == Op::x) return PhiExpression::PowerLaw{1, 0, 0, 1};
  if (n.op == Op::powi && n.k >= 1 && g.nodes[n.a].op == Op::x) return PhiExpression::PowerLaw{1, 0, 0, n.k};
  if (n.op == Op::neg) {
    auto a = power_law_of(g, n.a);
    if (a) a->coefficient = -a->coefficient;
    return a;
  }
  if (n.op != Op::mul && n.op != Op::div) return std::nullopt;
  // (factor) * (law), (law) * (factor), (law) / (factor)
  std::optional<PhiExpression::PowerLaw> law = power_law_of(g, n.a);
  std::optional<PhiExpression::PowerLaw> factor = size_factor(g, n.b);
  if (n.op == Op::mul && !law) {
    law = power_law_of(g, n.b);
    factor = size_factor(g, n.a);
  }
  if (!law || !factor) return std::nullopt;
  if (n.op == Op::div) {
    return PhiExpression::PowerLaw{law->coefficient / factor->coefficient, law->n_exponent - factor->n_exponent,
                                   law->d_exponent - factor->d_exponent, law->power};
  }
  return PhiExpression::PowerLaw{law->coefficient * factor->coefficient, law->n_exponent + factor->n_exponent,
                                 law->d_exponent + factor->d_exponent, law->power};
}

}  // namespace

std::optional<PhiExpression::PowerLaw> PhiExpression::power_law() const {
  auto law = power_law_of(*graph_, value_root_);
  if (!law || !std::isfinite(law->coefficient) || law->coefficient == 0 || !std::isfinite(law->n_exponent) ||
      !std::isfinite(law->d_exponent)) {
    return std::nullopt;
  }
  return law;
}

namespace {

using Coefficients = std::vector<double>;

Coefficients polynomial_product(const Coefficients& a, const Coefficients& b) {
  Coefficients out(a.size() + b.size() - 1, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < b.size(); ++j) out[i + j] += a[i] * b[j];
  }
  return out;
}

// The coefficients of node `id` of a graph whose N and d are bound (numbers), or none where it is not a polynomial
// in x of degree at most kMaxPolynomialDegree.
std::optional<Coefficients> polynomial_of(const ExpressionGraph& g, int id,
                                          std::map<int, std::optional<Coefficients>>& memo) {
  if (const auto it = memo.find(id); it != memo.end()) return it->second;
  const ExpressionNode& n = g.nodes[id];
  std::optional<Coefficients> out;
  const auto child = [&](int c) { return polynomial_of(g, c, memo); };
  switch (n.op) {
    case Op::constant: out = Coefficients{n.c}; break;
    case Op::x: out = Coefficients{0.0, 1.0}; break;
    case Op::neg:
      if ((out = child(n.a))) {
        for (double& c : *out) c = -c;
      }
      break;
    case Op::add:
    case Op::sub: {
      const auto a = child(n.a), b = child(n.b);
      if (!a || !b) break;
      out = Coefficients(std::max(a->size(), b->size()), 0.0);
      for (std::size_t i = 0; i < a->size(); ++i) (*out)[i] += (*a)[i];
      for (std::size_t i = 0; i < b->size(); ++i) (*out)[i] += n.op == Op::add ? (*b)[i] : -(*b)[i];
      break;
    }
    case Op::mul: {
      const auto a = child(n.a), b = child(n.b);
      if (a && b && a->size() + b->size() - 2 <= PhiExpression::kMaxPolynomialDegree) out = polynomial_product(*a, *b);
      break;
    }
    case Op::div:  // by a number only
      if (g.constant(n.b) && g.nodes[n.b].c != 0 && (out = child(n.a))) {
        for (double& c : *out) c /= g.nodes[n.b].c;
      }
      break;
    case Op::powi:
    case Op::pow: {
      if (n.op == Op::pow && !g.constant(n.b)) break;
      const double exponent = n.op == Op::powi ? static_cast<double>(n.k) : g.nodes[n.b].c;
      const auto base = child(n.a);
      if (!base) break;
      if (base->size() == 1) {  // a number that was not folded, ((x + 1/2) - x)^100: any power of it is a number
        out = Coefficients{std::pow(base->front(), exponent)};
        break;
      }
      // A polynomial's power is one for whole exponents 0 .. the degree cap only.
      if (exponent != std::floor(exponent) || exponent < 0 ||
          static_cast<double>(base->size() - 1) * exponent > PhiExpression::kMaxPolynomialDegree) {
        break;
      }
      Coefficients power{1.0};
      for (int i = 0; i < static_cast<int>(exponent); ++i) power = polynomial_product(power, *base);
      out = std::move(power);
      break;
    }
    default: break;
  }
  if (out) {
    while (out->size() > 1 && out->back() == 0) out->pop_back();
    if (!std::all_of(out->begin(), out->end(), [](double c) { return std::isfinite(c); })) out.reset();
  }
  memo[id] = out;
  return out;
}

}  // namespace

std::optional<std::vector<double>> PhiExpression::polynomial(double N, double d) const {
  ExpressionGraph bound;
  std::map<int, int> memo;
  const int root = bound.bind(*graph_, value_root_, N, d, memo);
  std::map<int, std::optional<Coefficients>> coefficients;
  return polynomial_of(bound, root, coefficients);
}

std::optional<PhiExpression::Monomial> PhiExpression::monomial(double N, double d) const {
  // The power law of the bound graph: N and d are numbers there, so it is c x^k or nothing.
  ExpressionGraph bound;
  std::map<int, int> memo;
  const auto law = power_law_of(bound, bound.bind(*graph_, value_root_, N, d, memo));
  if (!law || !std::isfinite(law->coefficient) || law->coefficient == 0) return std::nullopt;
  return Monomial{law->coefficient, law->power};
}

std::optional<double> PhiExpression::value_sup() const { return sup_of(interval_of(*graph_, value_root_)); }
std::optional<double> PhiExpression::derivative_sup() const { return sup_of(interval_of(*graph_, derivative_root_)); }
double PhiExpression::value_inf() const {
  const double inf = interval_of(*graph_, value_root_).lo;
  return inf - std::abs(inf) * kRoundingMargin;
}

bool PhiExpression::nonzero_somewhere(bool derivative) const {
  // Proved, not sampled: the intervals over a small neighbourhood of a point exclude 0 (so step and sign, which
  // jump, count only where their argument keeps its sign), for every N, d >= 1.
  static constexpr std::array<double, 10> kPoints{-3.0517578125, -1.61803398875, -0.7071067811865, -0.318309886,
                                                  0.1234567891,  0.5772156649,   1.4142135623731,  2.7182818284,
                                                  4.4942328371,  7.3890560989};
  const int root = derivative ? derivative_root_ : value_root_;
  return std::any_of(kPoints.begin(), kPoints.end(), [&](double x) {
    const Interval v = interval_of(*graph_, root, {x - 1e-3, x + 1e-3});
    const double margin = kRoundingMargin * std::max(std::abs(v.lo), std::abs(v.hi));
    return std::isfinite(margin) && (v.lo > margin || v.hi < -margin);
  });
}

std::string expression_language_help() {
  std::string functions;
  for (const Function& f : kFunctions) {
    functions += (functions.empty() ? "" : ", ") + std::string(f.name);
    if (!f.help.empty()) functions += fmt::format(" ({})", f.help);
  }
  return fmt::format(
      "an expression in x (the score, after --inner-scale) with the variables N and d, numbers, pi, + - * / ^ (or "
      "**), parentheses and the functions {}; its derivative is formed exactly",
      functions);
}

}  // namespace attncheck::theory
