#pragma once
// What failed, as a type: the command line turns each into its own message and exit code. Bad input (a value,
// a file's content) stays theory::InputError, which the exact routines already throw.

#include "attncheck/theory/common.hpp"

#include <stdexcept>

namespace attncheck::records {

using theory::InputError;

// The file system refused a read or a write that the input itself did not cause: a full disk, a folder without
// write permission, a failed rename. The message names the path and the system's reason.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A compute device that cannot do what was asked (lost device, launch or allocation failure). The message names
// the device and the failed call.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attncheck::records
