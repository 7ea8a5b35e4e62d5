#pragma once

// The one error type callers of isohost see, named by kind, whichever layer raised it (a worker,
// the pool, the config, the control socket, the CLI). The kind's name is what the CLI prints,
// what the control socket sends and what the Python API raises.

#include <exception>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace isohost {

enum class ErrorKind {
  spawn_failed,         // the interpreter could not be started (missing, not executable, bad cwd)
  start_timeout,        // no hello within the start timeout; the worker was killed
  protocol_error,       // the worker broke the wire protocol; it was killed
  crashed,              // the worker died on its own (signal or exit) during a call or start
  call_timeout,         // a call ran past its timeout; the worker's group was killed
  worker_exception,     // the called function raised; the worker lives on
  target_not_found,     // the module or function does not exist; the worker lives on
  bad_request,          // the request itself is malformed (arguments, target syntax, JSON)
  crash_loop,           // the environment failed repeatedly and is backing off
  unknown_environment,  // no environment of that name is configured
  shutting_down,        // the host is stopping and takes no more work
  config_error,         // the configuration file is missing or invalid
  control_error,        // the control socket could not be reached or answered badly
  hibernate_failed,     // the driver failed to checkpoint an idle worker; it was retired
  wake_failed,          // the driver failed to restore a hibernated worker; it was retired
  encode_error,         // a value could not be pickled (a call's arguments or its result)
  decode_error,         // a pickled value could not be unpickled, or its buffers do not match
  interrupted,          // the caller interrupted the call: it was dropped from the queue, or its
                        // worker did not stop within the grace period and was killed
};

// "WorkerCrashed", "CallTimeout", ...: stable names, part of the interface.
const char* error_kind_name(ErrorKind kind);
std::optional<ErrorKind> error_kind_from_name(const std::string& name);

// Copies are deep (no reference-counted message as in std::runtime_error), so an Error handed
// from the loop thread to a caller's future shares nothing with the loop's own copy.
class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message, nlohmann::ordered_json detail = nullptr)
      : message_(std::move(message)), kind_(kind), detail_(std::move(detail)) {}

  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

  [[nodiscard]] ErrorKind kind() const { return kind_; }
  [[nodiscard]] const char* kind_name() const { return error_kind_name(kind_); }
  // The worker's own account where there is one: {"type", "message", "where", "traceback"}.
  [[nodiscard]] const nlohmann::ordered_json& detail() const { return detail_; }

  [[nodiscard]] nlohmann::ordered_json to_json() const;
  static Error from_json(const nlohmann::ordered_json& error);

 private:
  std::string message_;
  ErrorKind kind_;
  nlohmann::ordered_json detail_;
};

}  // namespace isohost
