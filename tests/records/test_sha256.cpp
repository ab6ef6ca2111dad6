// SHA-256 against FIPS 180-4's examples and Python's hashlib at the lengths where the padding changes shape.

#include "attncheck/records/sha256.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using attncheck::records::sha256_hex;

TEST_CASE("SHA-256 of FIPS 180-4's example messages", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 agrees with hashlib where the final block's padding splits in two", "[sha256]") {
  // Bytes (7 k + 3) mod 251, k = 0 .. n - 1; the digests are Python's hashlib.sha256 of the same bytes.
  const std::vector<std::pair<int, std::string>> expected = {
      {55, "1deace58c745f3ecadde68a5923f494c3703fa73f0306483ccb898a5826e8d70"},
      {56, "06dbe23685750e4d3881ded95047abaf93fa8f9c5d3501dc57c717a72ff1398e"},
      {63, "47fb38b12335c9298d09280515c0666489a189d1554bb0ac1a0740806ce9d8b6"},
      {64, "dfa798724b1a8014994f363e5da7474ed26ce3757fb29e07aa47ad5a9352d37b"},
      {65, "dd2eab5a5507d7717c63ce953d9ac61752c21e664425ad1227054722a0d97f69"},
      {119, "c6e0f435df5d7d265baacca31e0602c00aa22fa6d3819aed664649294c743756"},
      {120, "17eb8960823a644bde3065620bb9d45931fe8993fd8eb692a17aff0fd725db6a"},
      {1000, "a9425c416f534025a4e2422bd14adba4ec3d4a68d10c3329be8df612964d2b6e"},
  };
  for (const auto& [n, digest] : expected) {
    std::string message;
    for (int k = 0; k < n; ++k) message += static_cast<char>((7 * k + 3) % 251);
    INFO(n << " bytes");
    CHECK(sha256_hex(message) == digest);
  }
}
