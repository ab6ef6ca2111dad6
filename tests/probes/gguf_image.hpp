#pragma once
// GGUF file images built byte by byte for the reader's tests: well-formed ones with known contents, and
// malformed ones obtained by changing single fields.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace attncheck::probes::testing {

class GgufImage {
 public:
  std::uint32_t magic = 0x46554747, version = 3;
  std::uint64_t alignment = 32;
  // Counts written in the header; by default the numbers of entries added.
  std::int64_t declared_kv_count = -1, declared_tensor_count = -1;

  // A metadata entry with the value's bytes as given (type is GGUF's value type id).
  void kv_raw(const std::string& key, std::uint32_t type, const std::vector<std::byte>& value) {
    append_string(kvs_, key);
    append(kvs_, type);
    kvs_.insert(kvs_.end(), value.begin(), value.end());
    ++kv_count_;
  }
  template <class T>
  void kv(const std::string& key, std::uint32_t type, T value) {
    std::vector<std::byte> bytes;
    append(bytes, value);
    kv_raw(key, type, bytes);
  }
  void kv_string(const std::string& key, const std::string& value) {
    std::vector<std::byte> bytes;
    append_string(bytes, value);
    kv_raw(key, 8, bytes);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& values) {
    std::vector<std::byte> bytes;
    append(bytes, std::uint32_t{8});
    append(bytes, static_cast<std::uint64_t>(values.size()));
    for (const auto& value : values) append_string(bytes, value);
    kv_raw(key, 9, bytes);
  }

  // A tensor with GGUF's dimensions (innermost first) and its data bytes, placed at the next aligned offset
  // unless `offset` is given.
  void tensor(const std::string& name, const std::vector<std::uint64_t>& ne, std::uint32_t ggml_type,
              const std::vector<std::byte>& bytes, std::int64_t offset = -1) {
    while (data_.size() % alignment != 0) data_.push_back(std::byte{0});
    const std::uint64_t at = offset >= 0 ? static_cast<std::uint64_t>(offset) : data_.size();
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    append_string(infos_, name);
    append(infos_, static_cast<std::uint32_t>(ne.size()));
    for (auto dim : ne) append(infos_, dim);
    append(infos_, ggml_type);
    append(infos_, at);
    ++tensor_count_;
  }

  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out;
    append(out, magic);
    append(out, version);
    append(out, declared_tensor_count >= 0 ? static_cast<std::uint64_t>(declared_tensor_count) : tensor_count_);
    append(out, declared_kv_count >= 0 ? static_cast<std::uint64_t>(declared_kv_count) : kv_count_);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    while (out.size() % alignment != 0) out.push_back(std::byte{0});
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }

  template <class T>
  static void append(std::vector<std::byte>& out, T value) {
    const auto at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
  }
  static void append_string(std::vector<std::byte>& out, const std::string& text) {
    append(out, static_cast<std::uint64_t>(text.size()));
    for (char c : text) out.push_back(static_cast<std::byte>(c));
  }

 private:
  std::vector<std::byte> kvs_, infos_, data_;
  std::uint64_t kv_count_ = 0, tensor_count_ = 0;
};

}  // namespace attncheck::probes::testing
