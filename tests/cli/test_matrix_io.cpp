// Reading users' matrices: .npy in every supported layout and CSV, and every malformed case named.

#include "npy_writer.hpp"

#include "attncheck/records/matrix_io.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

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
