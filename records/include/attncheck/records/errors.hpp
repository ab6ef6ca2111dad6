#pragma once
// What failed, as a type: the command line turns each into its own message and exit code. Bad input (a value,
// a file's content) stays theory::InputError, which the exact routines already throw. Each message is made a
// theory::message_text (printable, bounded) as the error is made, since messages quote paths and file contents.

#include "attncheck/theory/common.hpp"

#include <stdexcept>
#include <string>

namespace attncheck::records {

using theory::InputError;

// The file system refused a read or a write that the input itself did not cause: a full disk, a folder without
// write permission, a failed rename. The message names the path and the system's reason.
class IoError : public std::runtime_error {
 public:
  explicit IoError(const std::string& message) : std::runtime_error(theory::message_text(message)) {}
};

// A compute device that cannot do what was asked (lost device, launch or allocation failure). The message names
// the device and the failed call.
class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const std::string& message) : std::runtime_error(theory::message_text(message)) {}
};

}  // namespace attncheck::records
