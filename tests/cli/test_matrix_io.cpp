// Reading users' matrices: .npy in every supported layout and CSV, and every malformed case named.

#include "npy_writer.hpp"

#include "attncheck/records/matrix_io.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <random>

using namespace attncheck;

namespace {
const std::filesystem::path kDir = std::filesystem::temp_directory_path() / "attncheck-matrix-io-test";
std::filesystem::path fresh(const std::string& name) {
  std::filesystem::create_directories(kDir);
  return kDir / name;
}
constexpr std::uint64_t kPlenty = 1ULL << 30;
}  // namespace

TEST_CASE("npy float64 and float32, C and Fortran order, both byte orders") {
  const std::vector<double> values{1, 2, 3, 4, 5, 6};
  const auto c64 = fresh("c64.npy");
  testing::write_npy_raw(c64, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                         testing::raw_bytes(values));
  const theory::Matrix m = records::read_matrix(c64, kPlenty);
  REQUIRE(m.rows() == 2);
  REQUIRE(m.cols() == 3);
  CHECK(m(1, 0) == 4);
  CHECK(m(0, 2) == 3);

  const auto f32 = fresh("f32.npy");
  testing::write_npy_raw(f32, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                         testing::raw_bytes(std::vector<float>{1, 4, 2, 5, 3, 6}));
  CHECK(records::read_matrix(f32, kPlenty) == m);

  std::string big_endian = testing::raw_bytes(values);
  for (std::size_t k = 0; k < big_endian.size(); k += 8)
    std::reverse(big_endian.begin() + k, big_endian.begin() + k + 8);
  const auto be = fresh("be.npy");
  testing::write_npy_raw(be, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }", big_endian);
  CHECK(records::read_matrix(be, kPlenty) == m);
}

TEST_CASE("npy arrays of three dimensions in C and Fortran order read the same, wrong ranks refused") {
  // A 2 x 3 x 4 array with entry (i, j, k) = 100 i + 10 j + k, stored both ways.
  std::vector<double> c_order, fortran_order;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) c_order.push_back(100 * i + 10 * j + k);
    }
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 3; ++j) {
      for (int i = 0; i < 2; ++i) fortran_order.push_back(100 * i + 10 * j + k);
    }
  }
  const auto c = fresh("c3.npy"), f = fresh("f3.npy");
  testing::write_npy_raw(c, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }",
                         testing::raw_bytes(c_order));
  testing::write_npy_raw(f, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }",
                         testing::raw_bytes(fortran_order));
  const records::NpyArray from_c = records::read_npy_array(c, 3, kPlenty);
  CHECK(from_c.shape == std::vector<std::uint64_t>{2, 3, 4});
  CHECK(from_c.values == c_order);
  CHECK(records::read_npy_array(f, 3, kPlenty).values == c_order);
  CHECK_THROWS_WITH(records::read_npy_array(c, 2, kPlenty),
                    Catch::Contains("c3.npy") && Catch::Contains("expected a 2-D"));
  CHECK_THROWS_WITH(records::read_matrix(c, kPlenty), Catch::Contains("expected a 2-D matrix"));
}

TEST_CASE("CSV with commas or spaces, comments, and inf tokens") {
  const auto path = fresh("m.csv");
  std::ofstream(path) << "# logits\n1, 2.5, -inf\n  3e2 4 +5\r\n";
  const theory::Matrix m = records::read_matrix(path, kPlenty);
  REQUIRE(m.rows() == 2);
  CHECK(m(0, 2) == -INFINITY);
  CHECK(m(1, 0) == 300);
  CHECK(m(1, 2) == 5);
}

TEST_CASE("malformed files are errors naming the file and the problem") {
  const auto check = [](const std::filesystem::path& path, const std::string& fragment) {
    INFO(path);
    CHECK_THROWS_WITH(records::read_matrix(path, kPlenty), Catch::Contains(path.string()) && Catch::Contains(fragment));
  };
  check(kDir / "missing.npy", "no such file");
  const auto header_past_end = fresh("long-header.npy");
  testing::write_npy_raw(header_past_end, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }", "", 60000);
  check(header_past_end, "past the end");
  const auto ints = fresh("int.npy");
  testing::write_npy_raw(ints, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1), }", std::string(8, '\0'));
  check(ints, "'<i8' is not float32 or float64");
  const auto short_data = fresh("short.npy");
  testing::write_npy_raw(short_data, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }",
                         std::string(24, '\0'));
  check(short_data, "needs 32");
  const auto vector = fresh("vector.npy");
  testing::write_npy_raw(vector, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", std::string(24, '\0'));
  check(vector, "expected a 2-D matrix");
  const auto ragged = fresh("ragged.csv");
  std::ofstream(ragged) << "1,2,3\n4,5\n";
  check(ragged, "line 2 has 2 values");
  const auto words = fresh("words.csv");
  std::ofstream(words) << "1,2\n3,abc\n";
  check(words, "line 2, column 2: 'abc' is not a number");
  const auto empty = fresh("empty.csv");
  std::ofstream(empty) << "\n# nothing\n";
  check(empty, "empty");
}

TEST_CASE("a matrix larger than the memory budget is refused before it is read") {
  const auto huge = fresh("huge.npy");
  testing::write_npy_raw(huge, "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }", "");
  CHECK_THROWS_WITH(records::read_matrix(huge, 1ULL << 30),
                    Catch::Contains("100000 x 100000") && Catch::Contains("GiB"));
}

TEST_CASE("a CSV is read a value at a time: no line or value is held whole, and the budget is checked as it grows",
          "[hostile]") {
  // One value of a megabyte and no newline: refused at its 4,097th character, naming line and column.
  const auto long_value = fresh("long-value.csv");
  std::ofstream(long_value) << std::string(1 << 20, '1');
  CHECK_THROWS_WITH(records::read_matrix(long_value, kPlenty),
                    Catch::Contains("long-value.csv: line 1, column 1: a value of more than 4096 characters"));
  // A million values on one line and no newline, with room for fewer: refused while reading, naming the line.
  const auto one_line = fresh("one-line.csv");
  {
    std::ofstream out(one_line);
    for (int k = 0; k < 1'000'000; ++k) out << "1,";
  }
  CHECK_THROWS_WITH(records::read_matrix(one_line, 1 << 20),
                    Catch::Contains("one-line.csv: line 1: 43691 values so far"));
  CHECK(records::read_matrix(one_line, kPlenty).cols() == 1'000'000);
  // A comment, a blank line, a carriage return and a missing last newline change nothing.
  const auto plain = fresh("plain.csv");
  std::ofstream(plain) << "# logits\n1, 2\r\n\n3 ,4";
  const theory::Matrix m = records::read_matrix(plain, kPlenty);
  CHECK(m == (theory::Matrix(2, 2) << 1, 2, 3, 4).finished());
}

TEST_CASE("npy headers that once overflowed the stack or were misread are read exactly or refused", "[hostile]") {
  const std::string nine = testing::raw_bytes(std::vector<double>(9, 1.0));
  // std::regex recursed once per space of a padded shape; a 300 KB descr likewise.
  const auto padded = fresh("padded.npy");
  testing::write_npy_raw(padded,
                         "{'descr': '<f8', 'fortran_order': False, 'shape': (3," + std::string(60000, ' ') + "3), }",
                         nine);
  CHECK(records::read_matrix(padded, kPlenty).rows() == 3);
  const auto long_descr = fresh("long-descr.npy");
  testing::write_npy_raw(long_descr,
                         "{'descr': '" + std::string(300000, 'x') + "', 'fortran_order': False, 'shape': (3, 3), }",
                         nine);
  CHECK_THROWS_WITH(records::read_matrix(long_descr, kPlenty), Catch::Contains("long-descr.npy: npy dtype 'xxx"));
  // A negative dimension was read without its sign.
  const auto negative = fresh("negative.npy");
  testing::write_npy_raw(negative, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, -32, 32), }", nine);
  CHECK_THROWS_WITH(records::read_npy_array(negative, 3, kPlenty),
                    Catch::Contains("negative.npy: npy header, byte") && Catch::Contains("negative dimension -32"));
}

TEST_CASE("npy and CSV readers fuzzed from a fixed seed: an exact array or an InputError naming the file",
          "[hostile][fuzz]") {
  std::mt19937_64 random(20261121);
  const auto pick = [&](const std::vector<std::string>& choices) { return choices[random() % choices.size()]; };
  const std::vector<std::string> descrs = {"'<f8'",   "'<f4'",
                                           "'>f8'",   "'=f4'",
                                           "'|u1'",   "'<i8'",
                                           "''",      "'<f8",
                                           "\"<f8\"", "'" + std::string(5000, 'f') + "'",
                                           "['<f8']", "'<f\\\\8'"};
  const std::vector<std::string> orders = {"False", "True", "0", "'False'", "Fals", ""};
  std::string seventy_dimensions = "(";
  for (int k = 0; k < 70; ++k) seventy_dimensions += "1, ";
  seventy_dimensions += ")";
  const std::vector<std::string> shapes = {"(3, 3)",
                                           "(9,)",
                                           "(3, 3, 1)",
                                           "(1, 3, 3)",
                                           "()",
                                           "(3, -3)",
                                           "(3, 3",
                                           "(3,, 3)",
                                           "(3 3)",
                                           "(1e1, 2)",
                                           "(0, 9)",
                                           "(9, 0)",
                                           "((3, 3),)",
                                           "(+3, 3)",
                                           "(03, 3)",
                                           "(18446744073709551616, 1)",
                                           "(4294967296, 4294967296)",
                                           seventy_dimensions,
                                           "(3," + std::string(5000, ' ') + "3)",
                                           "[3, 3]"};
  const auto product = [](const std::vector<std::uint64_t>& shape) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  };
  int read = 0, refused = 0;
  for (int run = 0; run < 400; ++run) {
    std::string header =
        "{'descr': " + pick(descrs) + ", 'fortran_order': " + pick(orders) + ", 'shape': " + pick(shapes) + ", }";
    if (random() % 5 == 0) header[random() % header.size()] = static_cast<char>(random() % 256);
    if (random() % 10 == 0) header += " 'shape': (3, 3),";
    std::string data = testing::raw_bytes(std::vector<double>(9, 0.5));
    if (random() % 5 == 0) data.resize(random() % data.size());
    const auto file = fresh("fuzz.npy");
    testing::write_npy_raw(file, header, data);
    const std::size_t dimensions = 1 + random() % 3;
    INFO("run " << run << ": " << header.substr(0, 200));
    try {
      const records::NpyArray array = records::read_npy_array(file, dimensions, kPlenty);
      CHECK(array.shape.size() == dimensions);
      CHECK(array.values.size() == product(array.shape));
      ++read;
    } catch (const theory::InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("fuzz.npy"));
      ++refused;
    }
  }
  const std::vector<std::string> tokens = {"1",
                                           "-2.5",
                                           "inf",
                                           "-inf",
                                           "nan",
                                           "+3",
                                           "1e308",
                                           "1e999",
                                           "0x10",
                                           "x",
                                           "#c",
                                           ",",
                                           " ",
                                           "\t",
                                           "\r",
                                           "",
                                           std::string(5000, '7'),
                                           "\xff"};
  for (int run = 0; run < 300; ++run) {
    std::string text;
    const int lines = 1 + static_cast<int>(random() % 4);
    for (int line = 0; line < lines; ++line) {
      for (int k = 0, n = static_cast<int>(random() % 6); k < n; ++k) text += pick(tokens) + (random() % 2 ? "," : " ");
      if (line + 1 < lines || random() % 2) text += "\n";
    }
    const auto file = fresh("fuzz.csv");
    std::ofstream(file, std::ios::binary) << text;
    INFO("run " << run << ": " << text.substr(0, 200));
    try {
      const theory::Matrix m = records::read_matrix(file, kPlenty);
      CHECK(m.size() > 0);
      ++read;
    } catch (const theory::InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains("fuzz.csv"));
      ++refused;
    }
  }
  CHECK(read > 20);
  CHECK(refused > 20);
}
