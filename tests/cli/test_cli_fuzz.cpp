// The command line fuzzed: 2,000 argument vectors (1,000 under ASan) from a fixed seed, mixing valid values with
// NaN, infinities, negatives, huge sizes, text where numbers belong, files that are FIFOs, devices, folders,
// truncated or hostile, and unknown options. Every run must end by itself with an exit code of attncheck's own (0 to
// 4, and 5 where mc reports an unsettled verdict) - never by a signal (a crash, an abort, a sanitizer report), never
// by the timeout - and a run that exits 2 or more must say why. A second test changes the files each command reads
// instead, and runs each input twice: the same input must give the same exit code and output.
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

#include "../probes/json_mutator.hpp"
#include "../probes/tiny_models.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
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

// The exit codes a run may end with (cli/subcommand.hpp): 0 holds, 1 violated, 2 bad usage or input, 3 the file
// system refused, 4 a device failed, and 5 ("unsettled") from a command that reports verdicts; a run that exits 2
// or more says why. Anything else fails: a signal, the timeout, 127, and the 1 that OpenMP exits with after
// "Thread creation failed", which would read as "violated".
bool acceptable(const Outcome& outcome, bool reports_verdicts) {
  const int highest = reports_verdicts ? 5 : 4;
  return outcome.exited && outcome.code >= 0 && outcome.code <= highest && (outcome.code < 2 || !outcome.err.empty()) &&
         outcome.err.find("libgomp") == std::string::npos && outcome.err.find("[json.exception") == std::string::npos;
}

// What a run that answered with --json printed is one JSON text, valid UTF-8 included, whatever bytes its input held.
bool answered_in_json(const std::vector<std::string>& args, const Outcome& outcome, const fs::path& scratch) {
  const auto given = [&](const char* option) { return std::find(args.begin(), args.end(), option) != args.end(); };
  if (outcome.code > 1 || !given("--json") || given("--help") || given("-h")) return true;
  std::ifstream in(scratch / "stdout", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return nlohmann::json::accept(text);
}

// An output with the values of its timing fields left out: the only part of it that may differ from run to run.
std::string without_timings(std::string text) {
  for (const std::string key : {"\"wall_seconds\": ", "\"date\": "}) {
    for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + key.size())) {
      const auto end = text.find_first_of(",\n}", at + key.size());
      text.erase(at + key.size(), (end == std::string::npos ? text.size() : end) - at - key.size());
    }
  }
  return text;
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
      sentences, vit, bpe, probe_json, watched;

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
    vit = root / "vit";
    write_tiny_vit(vit);
    {
      // A 20 x 20 PPM (resized to 16 x 16 by the preprocessor) and pixels the model takes as they are.
      std::string ppm = "P6 20 20 255\n";
      for (int k = 0; k < 20 * 20 * 3; ++k) ppm += static_cast<char>((k * 37) % 256);
      std::ofstream(vit / "image.ppm", std::ios::binary) << ppm;
      std::vector<double> pixels(3 * 16 * 16);
      for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = std::sin(static_cast<double>(k));
      attncheck::testing::write_npy_raw(vit / "pixels.npy",
                                        "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 16, 16), }",
                                        attncheck::testing::raw_bytes(pixels));
    }
    std::ofstream(bert / "tokenizer_config.json") << R"({"do_lower_case": true, "model_max_length": 16})";
    bpe = root / "bpe";
    write_tiny_gpt2(bpe / "model.safetensors", {}, 6);
    std::ofstream(bpe / "tokenizer.json")
        << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": [["a", "b"]]},)"
        << R"( "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}})";
    probe_json = root / "probe-output.json";  // filled by a run of probe in setup
    watched = root / "watched";
    write_tiny_gpt2(watched / "step-1.safetensors", {}, 7);
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

// The fixtures attncheck writes itself: a results folder (mc), a probe --json document and a watch log.
void write_outputs(const Fixtures& f) {
  const Outcome made = run_in_child({"mc", "--claim", "C4", "--N", "4,8,16", "--D", "2", "--d", "2", "--p", "1",
                                     "--samples", "20", "--out", f.results.string()},
                                    f.root);
  REQUIRE((made.exited && made.code == 0));
  const Outcome probed = run_in_child({"probe", f.bert.string(), "--random", "--length", "4", "--json"}, f.root);
  REQUIRE((probed.exited && probed.code == 0));
  fs::copy_file(f.root / "stdout", f.probe_json, fs::copy_options::overwrite_existing);
  // A checkpoint is measured once it is unchanged across two scans: the watch must outlast two.
  const Outcome watched = run_in_child({"probe", "--watch", f.watched.string(), "--until-idle", "0.1", "--interval",
                                        "0.01", "--random", "--length", "4"},
                                       f.root);
  REQUIRE((watched.exited && watched.code == 0));
  REQUIRE(fs::file_size(f.watched / "attncheck-probe.jsonl") > 0);
}

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
    // A preset's grid (N to 1024) takes seconds: sizes are always given, and the preset sets only the time limit.
    option("--preset", {"quick", "paper"}, {"fast", ""}, 15);
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

TEST_CASE("the command line fuzzed: every run ends by itself with an exit code of its own, and a refusal says why",
          "[cli][fuzz]") {
  // In memory when the machine has /dev/shm: results folders are written with fsync, which on a disk would
  // make the file-writing runs dominate the test's time.
  const fs::path base = ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path dir = base / fmt::format("attncheck-cli-fuzz-{}", ::getpid());
  fs::remove_all(dir);
  const Fixtures fixtures(dir / "fixtures");
  write_outputs(fixtures);

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
    const bool ok = acceptable(outcome, !args.empty() && args[0] == "mc") && answered_in_json(args, outcome, scratch);
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

namespace {

// One file a command reads, changed for each run of the file fuzz.
struct FileCase {
  std::string name;
  fs::path source;      // a fixture file or folder, copied afresh for each run
  std::string changed;  // the file changed inside a copied folder ("" when the fixture is the file)
  enum class Kind { json, json_lines, bytes } kind;
  std::function<std::vector<std::string>(const fs::path& input, const fs::path& scratch)> arguments;
  bool reports_verdicts = false;  // mc: exit code 5 ("unsettled") is one of its answers
};

}  // namespace

TEST_CASE("the readers' files fuzzed at the command line: exit 0-5 by itself, the same output twice", "[cli][fuzz]") {
  const fs::path base = ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path dir = base / fmt::format("attncheck-file-fuzz-{}", ::getpid());
  fs::remove_all(dir);
  const Fixtures f(dir / "fixtures");
  write_outputs(f);
  using Kind = FileCase::Kind;
  const auto report = [](const fs::path& input, const fs::path& scratch) {
    return std::vector<std::string>{"report", input.string(), "--out", (scratch / "report").string(), "--no-plots"};
  };
  const auto probe = [](std::vector<std::string> extra) {
    return [extra](const fs::path& input, const fs::path&) {
      std::vector<std::string> args{"probe", input.string()};
      for (const std::string& a : extra) args.push_back(a == "INPUT" ? input.string() : a);
      return args;
    };
  };
  const auto resume = [](const fs::path& input, const fs::path&) {
    return std::vector<std::string>{"mc", "--claim",   "C4", "--N",   "4,8,16",       "--D",     "2", "--d", "2", "--p",
                                    "1",  "--samples", "20", "--out", input.string(), "--resume"};
  };
  const std::vector<FileCase> cases = {
      {"bounds --input (CSV)", f.csv, "", Kind::bytes,
       [](const fs::path& input, const fs::path&) {
         return std::vector<std::string>{"bounds", "--input", input.string(), "--json"};
       }},
      {"bounds --input (npy)", f.npy, "", Kind::bytes,
       [](const fs::path& input, const fs::path&) {
         return std::vector<std::string>{"bounds", "--input", input.string(), "--threads", "2"};
       }},
      {"bounds --cross-norm --values (npy)", f.npy, "", Kind::bytes,
       [&](const fs::path& input, const fs::path&) {
         return std::vector<std::string>{"bounds",       "--cross-norm", "--input",
                                         f.npy.string(), "--values",     input.string()};
       }},
      {"mc --resume: points.jsonl", f.results, "points.jsonl", Kind::json_lines, resume, true},
      {"mc --resume: fits.json", f.results, "fits.json", Kind::json, resume, true},
      {"report: fits.json", f.results, "fits.json", Kind::json, report},
      {"report: points.jsonl", f.results, "points.jsonl", Kind::json_lines, report},
      {"report: probe log", f.probe_log, "", Kind::json_lines, report},
      {"report: probe --json", f.probe_json, "", Kind::json, report},
      {"probe: config.json", f.bert, "config.json", Kind::json, probe({"--random", "--length", "4"})},
      {"probe: model.safetensors", f.bert, "model.safetensors", Kind::bytes, probe({"--random", "--json"})},
      {"probe --text: vocab.txt", f.bert, "vocab.txt", Kind::bytes, probe({"--text", "the cat sat"})},
      {"probe --text: tokenizer_config.json", f.bert, "tokenizer_config.json", Kind::json,
       probe({"--text", "The cats sat"})},
      {"probe --text: tokenizer.json", f.bpe, "tokenizer.json", Kind::json, probe({"--text", "abab c"})},
      {"probe --image: image", f.vit, "image.ppm", Kind::bytes, probe({"--image", "INPUT/image.ppm"})},
      {"probe --image: preprocessor_config.json", f.vit, "preprocessor_config.json", Kind::json,
       probe({"--image", "INPUT/image.ppm"})},
      {"probe --pixels", f.vit, "pixels.npy", Kind::bytes, probe({"--pixels", "INPUT/pixels.npy", "--csv"})},
      {"probe --watch: its log", f.watched, "attncheck-probe.jsonl", Kind::json_lines,
       [](const fs::path& input, const fs::path&) {
         return std::vector<std::string>{"probe",      "--watch", input.string(), "--until-idle", "0",
                                         "--interval", "0.01",    "--random",     "--length",     "4"};
       }},
  };
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kPerCase = 8;
#else
  constexpr int kPerCase = 20;
#endif
  attncheck::testing::Mutator mutator(20261121);
  const fs::path scratch = dir / "run";
  int failures = 0, exits[6] = {0, 0, 0, 0, 0, 0};
  const auto start = std::chrono::steady_clock::now();
  for (const FileCase& c : cases) {
    for (int run = 0; run < kPerCase; ++run) {
      const fs::path input = scratch / "input" / c.source.filename();
      const fs::path changed = c.changed.empty() ? input : input / c.changed;
      const std::string valid = [&] {
        std::ifstream in(c.changed.empty() ? c.source : c.source / c.changed, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }();
      const std::string text =
          c.kind == Kind::bytes ? mutator.mutate_bytes(valid) : mutator.mutate(valid, c.kind == Kind::json_lines);
      // Each of the two runs starts from the same files in the same place.
      const auto run_once = [&] {
        fs::remove_all(scratch);
        fs::create_directories(input.parent_path());
        fs::copy(c.source, input, fs::copy_options::recursive);
        std::ofstream(changed, std::ios::binary | std::ios::trunc) << text;
        Outcome outcome = run_in_child(c.arguments(input, scratch), scratch);
        std::ifstream out(scratch / "stdout");
        return std::pair{outcome, std::string(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>())};
      };
      const auto [first, first_out] = run_once();
      const auto [second, second_out] = run_once();
      const bool ok = acceptable(first, c.reports_verdicts);
      const bool same = first.exited == second.exited && first.code == second.code &&
                        without_timings(first_out) == without_timings(second_out) && first.err == second.err;
      if (ok && same) {
        ++exits[first.code];
        continue;
      }
      ++failures;
      if (failures <= 10) {
        UNSCOPED_INFO(
            c.name << " run " << run << ": "
                   << (first.exited ? fmt::format("exit {}", first.code) : fmt::format("signal {}", first.signal))
                   << (same ? "" : fmt::format(", then {} with other output", second.code))
                   << "; stderr: " << first.err.substr(0, 400));
      }
    }
  }
  // The commands that read no file answer the same twice as well.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"bounds", "--N", "12", "--trials", "2", "--threads", "2"},
           {"bounds", "--cross-norm", "--N", "8", "--dv", "2", "--trials", "2", "--json"},
           {"mc", "--claim", "C3", "--N", "4,8", "--D", "2", "--d", "2", "--samples", "8", "--threads", "2"},
           {"mc", "--claim", "C8", "--N", "8", "--D", "2", "--d", "2,4", "--samples", "8", "--json"},
           {"probe", f.bert.string(), "--random", "--length", "5", "--columns", "all"},
           {"probe", f.bert.string(), "--text-file", f.sentences.string(), "--json"},
           {"gpu-selftest", "--throughput-samples", "0"}}) {
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    const Outcome first = run_in_child(args, scratch);
    const std::string first_out = [&] {
      std::ifstream out(scratch / "stdout");
      return std::string(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>());
    }();
    const Outcome second = run_in_child(args, scratch);
    std::ifstream out(scratch / "stdout");
    const std::string second_out(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>{});
    INFO(joined(args) << ": exit " << first.code << ", stderr " << first.err.substr(0, 300));
    CHECK(acceptable(first, args[0] == "mc"));
    CHECK((first.code == second.code && without_timings(first_out) == without_timings(second_out) &&
           first.err == second.err));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN(
      fmt::format("{} files x {} changes, each run twice, in {:.1f} s: {} exited 0, {} exited 1, {} exited 2, {} "
                  "exited 3",
                  cases.size(), kPerCase, seconds, exits[0], exits[1], exits[2], exits[3]));
  CHECK(failures == 0);
  CHECK(exits[2] > 0);
  fs::remove_all(dir);
}
