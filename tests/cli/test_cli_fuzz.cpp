// The command line fuzzed: 2,000 argument vectors (1,000 under ASan) from a fixed seed, mixing valid values with
// NaN, infinities, negatives, huge sizes, text where numbers belong, files that are FIFOs, devices, folders,
// truncated or hostile, and unknown options. Every run must end by itself with exit code 0, 1, 2 or 3 (a write the
// file system refuses) - never by a signal (a crash, an abort, a sanitizer report), never by the timeout - and a
// run that exits 2 or 3 must say why.
//
// Each vector runs the command line (run_command_line, main's only call) in a forked child of this test, so
// that 2,000 runs cost seconds rather than 2,000 program loads. Outputs never point at real devices: a writer
// that replaced its target would replace /dev/null itself (a FIFO of the test's own stands for every special
// file; devices are only read). What stays out, so that the run is bounded: valid sizes are small (N <= 48,
// D, d <= 4, 16 positions) or absurd (2^40 and more, refused by the memory check, or grids of more points
// than mc takes), never in between where a valid run legitimately takes minutes; mc always gets its sizes (its
// default grid takes seconds) and `--samples auto` a small --max-samples; --watch always an --until-idle and a
// short --interval.

#include "npy_writer.hpp"
#include "subcommand.hpp"

#include "../probes/tiny_models.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Under AddressSanitizer a run costs about twice as much: that build runs the first half of the same sequence,
// so that both stay near a minute.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kRuns = 1000;
#else
constexpr int kRuns = 2000;
#endif
constexpr unsigned kRunTimeoutSeconds = 30;  // a run's own limit; typical runs take milliseconds

struct Outcome {
  bool exited = false;
  int code = -1;   // exit code, when exited
  int signal = 0;  // terminating signal otherwise (SIGALRM: the timeout)
  std::string err;
};

// Runs the command line on `args` in a child process, stdout and stderr to files in `scratch`.
Outcome run_in_child(const std::vector<std::string>& args, const fs::path& scratch) {
  const fs::path out = scratch / "stdout", err = scratch / "stderr";
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return {};
  if (child == 0) {
    // Default dispositions, so that a crash is seen as a signal (not caught by the test framework's handlers).
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGALRM, SIGPIPE, SIGINT, SIGTERM}) {
      std::signal(sig, SIG_DFL);
    }
    stack_t no_stack{};
    no_stack.ss_flags = SS_DISABLE;
    ::sigaltstack(&no_stack, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::alarm(kRunTimeoutSeconds);
    std::vector<std::string> storage = args;
    storage.insert(storage.begin(), "attncheck");
    std::vector<char*> argv;
    for (auto& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int code = attncheck::cli::run_command_line(static_cast<int>(storage.size()), argv.data());
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return {};
  }
  Outcome outcome;
  outcome.exited = WIFEXITED(status);
  outcome.code = outcome.exited ? WEXITSTATUS(status) : -1;
  outcome.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::ifstream in(err);
  outcome.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return outcome;
}

std::string joined(const std::vector<std::string>& args) {
  std::string text;
  for (const auto& a : args)
    text += (text.empty() ? "" : " ") + (a.find_first_of(" \n'\"") == std::string::npos ? a : "'" + a + "'");
  return text;
}

// The files the vectors point at: good ones, and every kind of bad one.
struct Fixtures {
  fs::path root;
  fs::path csv, npy, nan_csv, huge_npy, fifo, folder, absent, tokens, bad_tokens;
  fs::path bert, gpt2, truncated_model, config_folder_model, run, probe_log, results, hostile_results, text_file,
      sentences;

  explicit Fixtures(const fs::path& dir) : root(dir) {
    fs::create_directories(root);
    csv = root / "logits.csv";
    std::ofstream(csv) << "0,1,2,3\n-inf,0,0,1\n5,4,3,2\n1,1,1,1\n";
    npy = root / "logits.npy";
    attncheck::testing::write_npy_raw(npy, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }",
                                      attncheck::testing::raw_bytes(std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
    nan_csv = root / "nan.csv";
    std::ofstream(nan_csv) << "1,nan\n0,0\n";
    huge_npy = root / "huge.npy";  // a header that claims 2^31 x 2^31 doubles
    attncheck::testing::write_npy_raw(huge_npy,
                                      "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483648, 2147483648), }",
                                      std::string(64, '\0'));
    fifo = root / "fifo";
    ::mkfifo(fifo.c_str(), 0600);
    folder = root / "folder";
    fs::create_directories(folder);
    absent = root / "absent";
    tokens = root / "tokens.txt";
    std::ofstream(tokens) << "2 4 5 3\n";
    bad_tokens = root / "bad-tokens.txt";
    std::ofstream(bad_tokens) << "2 999999999999999999999 x\n";
    text_file = root / "notes.txt";
    std::ofstream(text_file) << "not a results folder\n";
    sentences = root / "sentences.txt";
    std::ofstream(sentences) << "the cat sat\nthe cats sat on the mat.\n";

    using namespace attncheck::probes::testing;
    bert = root / "bert";
    write_tiny_bert(bert);
    gpt2 = root / "gpt2" / "model.safetensors";
    write_tiny_gpt2(gpt2);
    truncated_model = root / "truncated";
    write_tiny_bert(truncated_model);
    fs::resize_file(truncated_model / "model.safetensors", fs::file_size(truncated_model / "model.safetensors") / 2);
    config_folder_model = root / "config-folder";
    write_tiny_bert(config_folder_model);
    fs::remove(config_folder_model / "config.json");
    fs::create_directories(config_folder_model / "config.json");
    run = root / "run";
    write_tiny_gpt2(run / "step-1.safetensors", {}, 3);
    write_tiny_gpt2(run / "step-2.safetensors", {}, 4);
    std::ofstream(run / "step-3.safetensors") << "truncated";
    probe_log = root / "probe.jsonl";
    std::ofstream(probe_log)
        << R"({"checkpoint":"a","step":1,"layer":0,"head":0,"N":4,"softmax_fro":1.5,"grad_fro":0.3,"dWq_fro":1,"dWk_fro":1,"activation":"softmax"})"
        << "\n";
    results = root / "results";  // filled by a run of mc in setup
    hostile_results = root / "hostile";
    fs::create_directories(hostile_results);
    // A scale that, were it script text, would run a shell command: the report must refuse it.
    nlohmann::json series = {{"claim", "C3"},
                             {"reading", "elementwise"},
                             {"phi", "poly"},
                             {"p", 1},
                             {"alpha", nullptr},
                             {"scale", "none\nsystem('touch " + (root / "executed").string() + "')"},
                             {"formula", "f"},
                             {"D", 2},
                             {"d", 2},
                             {"estimand", "value"},
                             {"sigma_x", 1},
                             {"sigma_t", 1},
                             {"slope", 1},
                             {"slope_ci", {0.9, 1.1}},
                             {"intercept", 0},
                             {"claimed_exponent", 1},
                             {"tolerance", 0.05},
                             {"verdict", "tight"},
                             {"N", {4, 8}},
                             {"mean", {1, 2}},
                             {"se", {0.1, 0.1}},
                             {"exact_sq", {nullptr, nullptr}}};
    nlohmann::json fits = {{"provenance",
                            {{"version", "0"},
                             {"date", "d"},
                             {"machine", "m"},
                             {"backend", "cpu"},
                             {"threads", 1},
                             {"run_seed", 1},
                             {"command", "c"},
                             {"wall_seconds", 1}}},
                           {"series", {series}}};
    std::ofstream(hostile_results / "fits.json") << fits.dump();
  }
};

// Draws argument vectors. Half of them are meant to run (values from each option's valid list, files that
// exist), the other half are hostile: each option then draws from its valid and its bad values alike.
class Generator {
 public:
  Generator(const Fixtures& f, std::uint64_t seed) : f_(f), random_(seed) {}

  std::vector<std::string> next(const fs::path& scratch) {
    scratch_ = scratch;
    args_.clear();
    hostile_ = chance(50);
    const int kind = static_cast<int>(pick(100));
    if (kind < 24)
      bounds();
    else if (kind < 60)
      mc();
    else if (kind < 80)
      probe();
    else if (kind < 94)
      report();
    else if (kind < 97)
      selftest();
    else
      other();
    if (hostile_ && chance(10)) args_.push_back(any({"--nope", "-x", "--", "--N", "=", "--help"}));
    if (hostile_ && chance(5) && args_.size() > 2) {
      std::swap(args_[1 + pick(args_.size() - 1)], args_[1 + pick(args_.size() - 1)]);
    }
    return args_;
  }

 private:
  using List = std::initializer_list<std::string>;
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_); }
  bool chance(int percent) { return static_cast<int>(pick(100)) < percent; }
  std::string any(List values) { return *(values.begin() + pick(values.size())); }
  // A value: from `good`, or when hostile from `good` and `bad` alike.
  std::string value(List good, List bad) {
    if (!hostile_ || bad.size() == 0 || chance(50)) return any(good);
    return any(bad);
  }
  void option(const std::string& name, List good, List bad, int percent = 50) {
    if (!chance(percent)) return;
    args_.push_back(name);
    args_.push_back(value(good, bad));
  }
  void required(const std::string& name, List good, List bad) { option(name, good, bad, hostile_ ? 90 : 100); }
  void flag(const std::string& name, int percent) {
    if (chance(percent)) args_.push_back(name);
  }
  std::string path(const fs::path& p) const { return p.string(); }
  std::string scratch(const std::string& name) const { return (scratch_ / name).string(); }

  // Numbers that must be refused wherever a count or a size is expected.
  std::string bad_number() {
    static const std::vector<std::string> numbers = {"nan",
                                                     "-nan",
                                                     "inf",
                                                     "-inf",
                                                     "-1",
                                                     "1e300",
                                                     "-1e300",
                                                     "abc",
                                                     "",
                                                     "1.5",
                                                     "0x10",
                                                     "18446744073709551616",
                                                     "99999999999999999999"};
    return numbers[pick(numbers.size())];
  }

  void bounds() {
    args_ = {"bounds"};
    const bool from_file = chance(20);
    if (from_file) {
      args_.push_back("--input");
      args_.push_back(
          value({path(f_.csv), path(f_.npy)}, {path(f_.nan_csv), path(f_.huge_npy), path(f_.fifo), path(f_.folder),
                                               path(f_.absent), "/dev/zero", "/dev/null", path(f_.text_file)}));
    }
    if (!from_file || chance(20)) {
      args_.push_back("--N");
      args_.push_back(!hostile_ || chance(40) ? std::to_string(1 + pick(48))
                      : chance(50)
                          ? any({"0", "1099511627776", "2305843009213693952", "9223372036854775807", "3037000500"})
                          : bad_number());
    }
    option("--trials", {"1", "2", "3"}, {"0", "1000001", "-1", "nan", "1e300"});
    option("--search-starts", {"1", "2"}, {"0", "100001", "-3", "inf"}, 30);
    if (chance(40)) {
      args_.push_back("--family");
      for (int k = 0, n = 1 + static_cast<int>(pick(3)); k < n; ++k) {
        args_.push_back(value({"gaussian-1", "gaussian-1e3", "near-one-hot", "two-equal-top", "constant",
                               "worst-case-search", "gaussian-1e-3"},
                              {"input", "nope"}));
      }
    }
    option("--seed", {"0", "1", "18446744073709551615"}, {"-1", "18446744073709551616", "1.5"}, 30);
    option("--threads", {"1", "2", "3"}, {"0", "1025", "-2", "100000"}, 30);
    flag("--json", 30);
    if (chance(30)) {
      // C9: --input is then the scores; --values, --dv and --mix are its own options.
      args_.push_back("--cross-norm");
      option("--dv", {"1", "3", "8"}, {"0", "1048577", "-1", "nan", "2.5"}, 40);
      option("--mix", {"1", "0,0.5,1", "0.25"}, {"1.5", "-0.1", "nan", "x", "", "0,,1"}, 40);
      option("--values", {path(f_.csv), path(f_.npy)},
             {path(f_.nan_csv), path(f_.absent), path(f_.folder), path(f_.fifo), "/dev/zero"}, 20);
    }
  }

  void mc() {
    args_ = {"mc"};
    if (chance(35)) {
      required("--phi",
               {"poly", "matpow", "softmax", "relu", "relu2", "gelu", "softplus", "identity", "relu6", "sigmoid"},
               {"tanh", ""});
      option("--claimed-exponent", {"1", "0.5", "2"}, {"nan", "inf", "-inf", "65", "-1e300"});
      option("--inner-scale", {"1/sqrt(d)", "0.5", "2"}, {"0", "nan", "1e300", "x"}, 30);
      option("--outer-scale", {"none", "1/sqrt(N)", "1/k:8", "N^-1"}, {"1/k:0", "N^-nan", "N^-1e308", "?"}, 30);
      option("--estimand", {"value", "dQ", "dK", "dS", "value,dQ,dK,dS", "score-var"}, {"nope", ""}, 40);
    } else {
      required("--claim", {"C3", "C4", "C5", "C6", "C7", "C8", "C9"}, {"C10", "c3", ""});
      option("--alpha", {"1", "0.5,1", "0"}, {"nan", "1e308", "9"}, 20);
    }
    // The default grid (N to 1024, D = d = 64) takes seconds: sizes are always given.
    required("--N", {"4", "4,8", "2:16:x2", "3,5,9", "16,48"},
             {"8:4:x2", "0", "-3", "x", "4000000000000", "16:1e9:x2", "4:8:x1", "1:1000000:x1.00001"});
    required("--D", {"2", "3", "2,4"}, {"0", "x", "4000000000000"});
    required("--d", {"2", "3", "2,4"}, {"0", "nan", "4000000000000"});
    option("--p", {"1", "2", "1,3"}, {"0", "65", "64", "1e300", "2.5", "nan", "-1", "1,"}, 50);
    // Sampling: fixed and small, or auto bounded by a small --max-samples or --max-seconds (or refused).
    if (chance(60)) {
      required("--samples", {"2", "4", "16"}, {"1", "0", "-1", "abc", "99999999999999999999", "1e3", "1.5"});
    } else {
      if (chance(50)) args_.insert(args_.end(), {"--samples", "auto"});
      args_.push_back("--max-samples");
      args_.push_back(value({"64", "200", "2"}, {"1", "0", "-1", "nan", "1e30"}));
      option("--max-seconds", {"0.05", "0.2"}, {"0", "-1", "nan", "inf"}, 40);
      option("--rel-se", {"0.01", "0.5", "1"}, {"0", "-0.1", "nan", "2"}, 40);
    }
    option("--sigma-x", {"1", "0.5", "1e50"}, {"0", "-1", "nan", "inf", "1e300"}, 25);
    option("--sigma-t", {"1", "2"}, {"0", "nan"}, 15);
    option("--seed", {"1", "7", "18446744073709551615"}, {"-1", "1e3"}, 25);
    option("--threads", {"0", "1", "2"}, {"1025", "-1", "100000"}, 30);
    option("--tile", {"1", "4", "256", "99999999999999"}, {"0", "-2", "2147483648"}, 25);
    option("--tolerance", {"0.05", "0.5", "1"}, {"0", "inf", "nan", "2"}, 20);
    option("--backend", {"auto", "cpu"}, {"cuda", "tpu"}, 20);
    if (chance(40)) {
      args_.push_back("--out");
      args_.push_back(value({scratch("results"), path(f_.root / "shared-results")},
                            {path(f_.folder / "points.jsonl"), path(f_.fifo), path(f_.csv), path(f_.results)}));
      flag(chance(50) ? "--resume" : "--force", 40);
    }
    flag("--json", 30);
  }

  void probe() {
    args_ = {"probe"};
    if (chance(15)) {
      args_.push_back("--watch");
      args_.push_back(value({path(f_.run)}, {path(f_.absent), path(f_.csv), path(f_.fifo)}));
      // Bounded: always an idle limit and a short interval (or a refused value).
      args_.push_back("--until-idle");
      args_.push_back(value({"0", "0.1"}, {"-1", "nan", "inf"}));
      args_.push_back("--interval");
      args_.push_back(value({"0.05", "0.01"}, {"0", "-1", "nan"}));
      option("--out", {scratch("log.jsonl")}, {path(f_.folder), path(f_.fifo), path(f_.probe_log)}, 60);
      args_.insert(args_.end(), {"--random", "--length", "4"});
      return;
    }
    if (!hostile_ || chance(95)) {
      args_.push_back(value({path(f_.bert), path(f_.gpt2), path(f_.gpt2.parent_path())},
                            {path(f_.truncated_model), path(f_.config_folder_model), path(f_.absent), path(f_.fifo),
                             "/dev/zero", path(f_.folder), path(f_.csv)}));
    }
    const int input = static_cast<int>(pick(4));
    if (input == 0 || (hostile_ && chance(5))) {
      args_.push_back("--text");
      args_.push_back(
          any({"the cat sat", "the cats sat on the mat.", "", "\xff\xfe bad utf-8 \xc3", "<script>alert(1)</script>",
               "un cafe", "the the the the the the the the the the the the the the the the the"}));
    }
    if (input == 1 || (hostile_ && chance(5))) {
      required("--tokens", {path(f_.tokens)},
               {path(f_.bad_tokens), path(f_.fifo), path(f_.folder), "/dev/zero", path(f_.absent)});
    }
    if (input == 2 || (hostile_ && chance(5))) {
      args_.push_back("--random");
      option("--length", {"4", "16", "1"},
             {"0", "-5", "1099511627776", "200000", "nan", "1e300", "9223372036854775807"}, 80);
    }
    if (input == 3 || (hostile_ && chance(5))) {
      required("--text-file", {path(f_.sentences)},
               {path(f_.text_file), path(f_.fifo), path(f_.folder), "/dev/zero", path(f_.absent), ""});
    }
    option("--columns", {"A_sqrtN,dWq", "all", "grad_tight"}, {"bogus", "", "A,,dWk", "all,A"}, 20);
    option("--seed", {"0", "3"}, {"-1", "18446744073709551616"}, 20);
    option("--layers", {"0", "1", "0,1"}, {"5", "-1", "x", "2147483648"}, 30);
    option("--heads", {"0", "1,3"}, {"9", "-2", "nan"}, 30);
    flag(chance(50) ? "--json" : "--csv", 40);
    option("--attention-out", {scratch("attention.safetensors")}, {path(f_.folder), path(f_.fifo)}, 15);
  }

  void report() {
    args_ = {"report"};
    if (!hostile_ || chance(95)) {
      args_.push_back(
          value({path(f_.results), path(f_.probe_log)}, {path(f_.hostile_results), path(f_.absent), path(f_.fifo),
                                                         path(f_.text_file), path(f_.folder), path(f_.run)}));
    }
    if (!hostile_ || chance(95)) {
      args_.push_back("--out");
      args_.push_back(value({scratch("report")}, {path(f_.csv), path(f_.fifo)}));
    }
    if (chance(90)) {
      args_.push_back("--no-plots");
    } else {
      option("--gnuplot", {"gnuplot"}, {"/nonexistent/gnuplot", "/bin/false"}, 60);
    }
  }

  void selftest() {
    args_ = {"gpu-selftest"};
    option("--device", {"0", "1"}, {"-1", "1024", "nan"});
    option("--threads", {"0", "2"}, {"-1", "1025"}, 30);
    args_.push_back("--throughput-samples");
    args_.push_back(value({"0"}, {"-1", "nan", "1000001"}));
  }

  void other() {
    const int k = static_cast<int>(pick(6));
    if (k == 0) args_ = {};
    if (k == 1) args_ = {"--help"};
    if (k == 2) args_ = {"--version"};
    if (k == 3) args_ = {"launch-missiles"};
    if (k == 4) args_ = {"mc", "--help"};
    if (k == 5) args_ = {"bounds", "--N"};
  }

  const Fixtures& f_;
  std::mt19937_64 random_;
  fs::path scratch_;
  std::vector<std::string> args_;
  bool hostile_ = false;
};

}  // namespace

TEST_CASE("the command line fuzzed: every run exits 0, 1, 2, 3 or 5 by itself, and a refusal says why", "[cli][fuzz]") {
  // In memory when the machine has /dev/shm: results folders are written with fsync, which on a disk would
  // make the file-writing runs dominate the test's time.
  const fs::path base = ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path dir = base / fmt::format("attncheck-cli-fuzz-{}", ::getpid());
  fs::remove_all(dir);
  const Fixtures fixtures(dir / "fixtures");
  // A results folder of attncheck's own for the report runs.
  const Outcome made = run_in_child({"mc", "--claim", "C4", "--N", "4,8,16", "--D", "2", "--d", "2", "--p", "1",
                                     "--samples", "20", "--out", fixtures.results.string()},
                                    dir / "fixtures");
  REQUIRE((made.exited && made.code == 0));

  Generator generator(fixtures, 20261121);
  int failures = 0, exits[6] = {0, 0, 0, 0, 0, 0};
  double slowest = 0;
  std::string slowest_args;
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < kRuns; ++run) {
    const fs::path scratch = dir / "runs" / std::to_string(run % 50);
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    const std::vector<std::string> args = generator.next(scratch);
    const auto began = std::chrono::steady_clock::now();
    const Outcome outcome = run_in_child(args, scratch);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (took > slowest) {
      slowest = took;
      slowest_args = joined(args);
    }
    // 5 is a verdict (a claim not settled), said on stderr like a refusal.
    const bool ok = outcome.exited && outcome.code >= 0 && outcome.code <= 5 && outcome.code != 4 &&
                    (outcome.code < 2 || !outcome.err.empty());
    if (ok) {
      ++exits[outcome.code];
      continue;
    }
    ++failures;
    if (failures <= 10) {
      const std::string how = outcome.exited ? fmt::format("exit {}", outcome.code)
                              : outcome.signal == SIGALRM
                                  ? fmt::format("no end within {} s", kRunTimeoutSeconds)
                                  : fmt::format("signal {} ({})", outcome.signal, ::strsignal(outcome.signal));
      UNSCOPED_INFO("run " << run << ": attncheck " << joined(args) << "\n  " << how
                           << "; stderr: " << outcome.err.substr(0, 600));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN(fmt::format(
      "{} runs in {:.1f} s: {} exited 0, {} exited 1, {} exited 2, {} exited 3, {} exited 5; slowest {:.2f} s: "
      "attncheck {}",
      kRuns, seconds, exits[0], exits[1], exits[2], exits[3], exits[5], slowest, slowest_args));
  CHECK(failures == 0);
  // No gnuplot command hidden in a results folder ran.
  CHECK_FALSE(fs::exists(fixtures.root / "executed"));
  // Both outcomes are exercised: vectors that run and vectors that are refused.
  CHECK(exits[0] > kRuns / 10);
  CHECK(exits[2] > kRuns / 10);
  fs::remove_all(dir);
}
