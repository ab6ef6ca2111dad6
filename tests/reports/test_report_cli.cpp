// `attncheck report` as a user runs it: exit codes and messages of the built program.

#include "records/fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>

#include <sys/stat.h>
#include <sys/wait.h>

using namespace attncheck::records::testing;
using Catch::Matchers::Contains;

namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
};

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Run run_report(const TempDir& dir, const std::string& arguments) {
  const fs::path out = dir.path() / "stdout.txt", err = dir.path() / "stderr.txt";
  const std::string command = fmt::format("{} report {} >{} 2>{}", shell_quoted(ATTNCHECK_PROGRAM), arguments,
                                          shell_quoted(out.string()), shell_quoted(err.string()));
  const int status = std::system(command.c_str());
  Run run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_text(out);
  run.err = read_text(err);
  return run;
}

}  // namespace

TEST_CASE("attncheck report writes both documents from the kept example folder and exits 0", "[cli]") {
  TempDir dir;
  const fs::path report = dir.path() / "report";
  const Run run = run_report(dir, fmt::format("{} --out {}", shell_quoted(ATTNCHECK_REPORTS_DATA "/c3-small"),
                                              shell_quoted(report.string())));
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.out, Contains("4 series: 1 holds, 2 tight, 1 violated, 0 consistent (not a proof), 0 inconclusive"));
  CHECK(count_occurrences(read_text(report / "index.html"), "<svg") ==
        4 + 4);  // 4 series, 1 pair of readings, 1 claim side by side, 1 claim's overlay, 1 estimand's figure
  CHECK_THAT(read_text(report / "report.md"), Contains("## Summary"));
}

TEST_CASE("attncheck report exits 2 naming the file and line of malformed input", "[cli][errors]") {
  TempDir dir;
  const fs::path results = dir.path() / "results";
  write_results_folder(results, {FixtureSeries{}});
  write_text(results / "points.jsonl", points_text({FixtureSeries{}}) + "{\"claim\": \n");
  const Run run = run_report(dir, fmt::format("{} --out {}", shell_quoted(results.string()),
                                              shell_quoted((dir.path() / "report").string())));
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Contains("attncheck: error: " + (results / "points.jsonl").string() + " line 4"));
  CHECK_FALSE(fs::exists(dir.path() / "report" / "index.html"));
}

TEST_CASE("attncheck report exits 2 for a missing folder, a folder without results and a missing gnuplot",
          "[cli][errors]") {
  TempDir dir;
  const std::string out = shell_quoted((dir.path() / "report").string());
  const Run missing = run_report(dir, fmt::format("{} --out {}", shell_quoted((dir.path() / "nope").string()), out));
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("nope does not exist"));

  fs::create_directories(dir.path() / "empty");
  const Run empty = run_report(dir, fmt::format("{} --out {}", shell_quoted((dir.path() / "empty").string()), out));
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.err, Contains("fits.json is missing, and so are") && Contains("attncheck-probe.jsonl") &&
                            Contains("attncheck-curves.jsonl") && Contains("vit-results.json"));

  write_results_folder(dir.path() / "results", {FixtureSeries{}});
  const Run no_gnuplot = run_report(dir, fmt::format("{} --out {} --gnuplot /nonexistent/gnuplot",
                                                     shell_quoted((dir.path() / "results").string()), out));
  CHECK(no_gnuplot.exit_code == 2);
  CHECK_THAT(no_gnuplot.err, Contains("cannot run gnuplot") && Contains("--no-plots"));

  const Run without_plots = run_report(dir, fmt::format("{} --out {} --gnuplot /nonexistent/gnuplot --no-plots",
                                                        shell_quoted((dir.path() / "results").string()), out));
  CHECK(without_plots.exit_code == 0);
  CHECK_THAT(without_plots.out, Contains("(0 plots)"));
}

TEST_CASE("attncheck report without --out is a usage error", "[cli][errors]") {
  TempDir dir;
  const Run run = run_report(dir, shell_quoted(ATTNCHECK_REPORTS_DATA "/c3-small"));
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Contains("--out"));
}

TEST_CASE("attncheck report exits 2 for hostile or non-regular input and runs nothing", "[cli][errors]") {
  TempDir dir;
  const fs::path results = dir.path() / "results";
  FixtureSeries hostile;
  hostile.scale = "none\nsystem('touch " + (dir.path() / "executed").string() + "')";
  write_results_folder(results, {hostile});
  const Run run = run_report(dir, fmt::format("{} --out {}", shell_quoted(results.string()),
                                              shell_quoted((dir.path() / "report").string())));
  CHECK(run.exit_code == 2);
  CHECK_THAT(run.err, Contains((results / "fits.json").string() + " line ") && Contains("\"scale\" must be"));
  CHECK_FALSE(fs::exists(dir.path() / "executed"));
  CHECK_FALSE(fs::exists(dir.path() / "report"));

  write_results_folder(results, {FixtureSeries{}});
  fs::remove(results / "points.jsonl");
  REQUIRE(::mkfifo((results / "points.jsonl").c_str(), 0600) == 0);
  const Run fifo = run_report(dir, fmt::format("{} --out {}", shell_quoted(results.string()),
                                               shell_quoted((dir.path() / "report").string())));
  CHECK(fifo.exit_code == 2);
  CHECK_THAT(fifo.err, Contains("points.jsonl: is a FIFO"));
}

TEST_CASE("attncheck report exits 2 naming a probe --json file that is not one, and compares only like runs",
          "[cli][errors][head_maps]") {
  TempDir dir;
  const fs::path bad = dir.path() / "probe.json";
  write_text(bad, "{\"model\": {\"path\": \"m\"}");
  const std::string out = shell_quoted((dir.path() / "report").string());
  const Run truncated = run_report(dir, fmt::format("{} --out {}", shell_quoted(bad.string()), out));
  CHECK(truncated.exit_code == 2);
  CHECK_THAT(truncated.err, Contains(bad.string() + " line 1 column 24: malformed JSON"));
  write_text(bad, "[1, 2]");
  const Run not_object = run_report(dir, fmt::format("{} --out {}", shell_quoted(bad.string()), out));
  CHECK(not_object.exit_code == 2);
  CHECK_THAT(not_object.err, Contains(bad.string()) && Contains("expected a JSON object"));
  CHECK_FALSE(fs::exists(dir.path() / "report"));

  const fs::path results = dir.path() / "results";
  write_results_folder(results, {FixtureSeries{}});
  const fs::path log = dir.path() / "run" / "attncheck-probe.jsonl";
  fs::create_directories(log.parent_path());
  write_text(log, json{{"checkpoint", "a"},
                       {"step", 1},
                       {"layer", 0},
                       {"head", 0},
                       {"N", 4},
                       {"softmax_fro", 1.0},
                       {"grad_fro", 0.5},
                       {"activation", "softmax"}}
                          .dump() +
                      "\n");
  const Run mixed = run_report(dir, fmt::format("{} {} --out {}", shell_quoted(log.parent_path().string()),
                                                shell_quoted(results.string()), out));
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, Contains("cannot compare " + results.string() + " (results of `attncheck mc`)"));
}

TEST_CASE("attncheck report reads a probe log whose last record was cut short, and warns", "[cli][errors]") {
  TempDir dir;
  const std::string log_text = read_text(ATTNCHECK_REPORTS_DATA "/probe-small/attncheck-probe.jsonl");
  const fs::path log = dir.path() / "attncheck-probe.jsonl";
  // As a writer killed mid-append leaves it: half a line, no newline.
  const std::size_t last = log_text.rfind('\n', log_text.size() - 2);
  write_text(log, log_text + log_text.substr(last + 1, (log_text.size() - last) / 2));
  const Run run = run_report(dir, fmt::format("{} --out {} --no-plots", shell_quoted(log.string()),
                                              shell_quoted((dir.path() / "report").string())));
  CHECK(run.exit_code == 0);
  const auto lines = static_cast<std::size_t>(std::count(log_text.begin(), log_text.end(), '\n'));
  CHECK_THAT(run.err, Contains("warning") && Contains(fmt::format("line {}", lines + 1)) && Contains("skipped"));
  CHECK_THAT(run.out, Contains(fmt::format("{} probe records", lines)));
}

TEST_CASE("attncheck report --out into a folder holding the user's files removes none of them", "[cli]") {
  TempDir dir;
  const fs::path out = dir.path() / "out";
  const std::vector<fs::path> users = {out / "notes.md",
                                       out / "report.md.tmp.keep",
                                       out / "plots" / "figure1.png",
                                       out / "plots" / "diagram.svg",
                                       out / "plots" / "draft.tmp.keep.txt",
                                       out / "plots" / "plots.gp.old"};
  for (const fs::path& file : users) {
    fs::create_directories(file.parent_path());
    write_text(file, "the user's own");
  }
  for (const char* plots : {"", " --no-plots"}) {
    const Run run = run_report(dir, fmt::format("{} --out {}{}", shell_quoted(ATTNCHECK_REPORTS_DATA "/c3-small"),
                                                shell_quoted(out.string()), plots));
    INFO(run.err);
    CHECK(run.exit_code == 0);
    for (const fs::path& file : users) {
      INFO(file);
      CHECK(fs::exists(file));
      CHECK(read_text(file) == "the user's own");
    }
  }
  CHECK_FALSE(fs::exists(out / "plots" / "series01.svg"));  // the report's own, gone with --no-plots
}

// Every file of a folder, its bytes by path, to see that a refused report changed nothing.
std::map<std::string, std::string> contents_of(const fs::path& folder) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) files[fs::relative(entry.path(), folder).string()] = read_text(entry.path());
  }
  return files;
}

TEST_CASE("attncheck report replaces no file it did not write, and writes through no link it did not make",
          "[cli][errors]") {
  const std::string input = shell_quoted(ATTNCHECK_REPORTS_DATA "/c3-small");
  SECTION("a user's file in the way of each kind of file a report writes: documents, script, figures") {
    for (const char* name : {"index.html", "report.md", "plots/plots.gp", "plots/series01.svg", "plots/series01.png"}) {
      TempDir dir;
      const fs::path out = dir.path() / "out";
      fs::create_directories(out / "plots");
      write_text(out / name, "the user's own");
      write_text(out / "notes.md", "mine");
      const auto before = contents_of(out);
      const Run refused = run_report(dir, fmt::format("{} --out {}", input, shell_quoted(out.string())));
      INFO(name << ": " << refused.err);
      CHECK(refused.exit_code == 2);
      CHECK_THAT(refused.err, Contains((out / name).string()) && Contains("not written by `attncheck report`") &&
                                  Contains("--force"));
      CHECK(contents_of(out) == before);  // nothing written, nothing replaced

      const Run forced = run_report(dir, fmt::format("{} --out {} --force", input, shell_quoted(out.string())));
      CHECK(forced.exit_code == 0);
      CHECK(read_text(out / name) != "the user's own");
      CHECK(read_text(out / "notes.md") == "mine");
      // Once written by a report, its files are its own: a second report replaces them without --force.
      const Run again = run_report(dir, fmt::format("{} --out {}", input, shell_quoted(out.string())));
      CHECK(again.exit_code == 0);
    }
  }
  SECTION("the documents of a report written before .attncheck-report was kept are replaced as the report's own") {
    TempDir dir;
    const fs::path out = dir.path() / "out";
    REQUIRE(run_report(dir, fmt::format("{} --out {} --no-plots", input, shell_quoted(out.string()))).exit_code == 0);
    fs::remove(out / ".attncheck-report");
    const Run again = run_report(dir, fmt::format("{} --out {} --no-plots", input, shell_quoted(out.string())));
    INFO(again.err);
    CHECK(again.exit_code == 0);
    // A user's page that only mentions the tool is not taken for a report.
    fs::remove(out / ".attncheck-report");
    write_text(out / "index.html", "<!DOCTYPE html>\n<title>attncheck report notes</title>");
    CHECK(run_report(dir, fmt::format("{} --out {} --no-plots", input, shell_quoted(out.string()))).exit_code == 2);
    fs::remove(out / "index.html");
    write_text(out / "report.md", "# attncheck report for run 3\n\nmy notes\n");
    CHECK(run_report(dir, fmt::format("{} --out {} --no-plots", input, shell_quoted(out.string()))).exit_code == 2);
    CHECK(read_text(out / "report.md") == "# attncheck report for run 3\n\nmy notes\n");
  }
  SECTION("plots/ as a link to a user's folder is refused, even with --force") {
    TempDir dir;
    const fs::path out = dir.path() / "out", mine = dir.path() / "mine";
    fs::create_directories(out);
    fs::create_directories(mine);
    write_text(mine / "series01.svg", "the user's own");
    fs::create_directory_symlink(mine, out / "plots");
    for (const char* force : {"", " --force"}) {
      const Run run = run_report(dir, fmt::format("{} --out {}{}", input, shell_quoted(out.string()), force));
      INFO(run.err);
      CHECK(run.exit_code == 2);
      CHECK_THAT(run.err, Contains((out / "plots").string()) && Contains("symbolic link"));
      CHECK(contents_of(mine) == std::map<std::string, std::string>{{"series01.svg", "the user's own"}});
      CHECK_FALSE(fs::exists(out / "index.html"));
    }
    // Nor is a link read for what an earlier report drew: a report without plots removes nothing through it.
    write_text(mine / ".attncheck-plots", "series01.svg\n");
    const Run no_plots = run_report(dir, fmt::format("{} --out {} --no-plots", input, shell_quoted(out.string())));
    CHECK(no_plots.exit_code == 2);
    CHECK(read_text(mine / "series01.svg") == "the user's own");
    CHECK(fs::exists(mine / ".attncheck-plots"));
  }
  SECTION("report.md as a link to a user's file is refused, and --force replaces the link, not the file") {
    TempDir dir;
    const fs::path out = dir.path() / "out", mine = dir.path() / "mine.md";
    fs::create_directories(out);
    write_text(mine, "the user's own");
    fs::create_symlink(mine, out / "report.md");
    const Run refused = run_report(dir, fmt::format("{} --out {}", input, shell_quoted(out.string())));
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Contains((out / "report.md").string()) && Contains("symbolic link"));
    const Run forced = run_report(dir, fmt::format("{} --out {} --force", input, shell_quoted(out.string())));
    CHECK(forced.exit_code == 0);
    CHECK(read_text(mine) == "the user's own");
    CHECK_FALSE(fs::is_symlink(out / "report.md"));
  }
}

TEST_CASE("a results folder with the output of attncheck bounds --json reports C1 and C2 beside the series", "[cli]") {
  TempDir dir;
  const fs::path results = dir.path() / "results";
  write_results_folder(results, standard_series());
  const std::string bounds = fmt::format("{} bounds --N 64 --trials 2 --json >{}", shell_quoted(ATTNCHECK_PROGRAM),
                                         shell_quoted((results / "bounds.json").string()));
  REQUIRE(std::system(bounds.c_str()) == 0);
  const fs::path report = dir.path() / "report";
  const Run run = run_report(dir, fmt::format("{} --out {} --no-plots", shell_quoted(results.string()),
                                              shell_quoted(report.string())));
  INFO(run.err);
  CHECK(run.exit_code == 0);
  const std::string markdown = read_text(report / "report.md");
  CHECK_THAT(markdown, Contains("## Claims C1 and C2: Theorem 4.1, checked exactly"));
  // One-hot rows reach sqrt(N): C1 is tight; C2's stated 2 sqrt(N) is four times its exact sup: it holds.
  CHECK_THAT(markdown, Contains("Checked exactly beside the series (attncheck bounds, N = 64): C1 tight, C2 holds"));
  CHECK_THAT(markdown, Contains("| two-equal-top | 2 | 0.707107 | 0.25 | 1 | yes |"));
  CHECK(markdown.find("## Summary") < markdown.find("## Claims C1 and C2"));
  CHECK(markdown.find("## Claims C1 and C2") < markdown.find("## Claim C3"));

  // A verdict that is not one of the words is refused, naming the file.
  json edited = json::parse(read_text(results / "bounds.json"));
  edited["verdicts"]["C1"] = "fine";
  write_text(results / "bounds.json", edited.dump());
  const Run refused = run_report(dir, fmt::format("{} --out {} --no-plots", shell_quoted(results.string()),
                                                  shell_quoted(report.string())));
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("bounds.json") && Contains("fine"));
}
