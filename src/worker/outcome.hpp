#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "error/error.hpp"
#include "wire/shared_fds.hpp"

namespace isohost::worker {

// A request's result: a JSON value, a pickled value, or an Error.
class Outcome {
 public:
  static Outcome success(nlohmann::ordered_json value) { return Outcome(std::move(value)); }
  static Outcome failure(Error error) { return Outcome(std::move(error)); }
  // A value that travelled pickled (docs/protocol.md, "Values"): `pickle` describes it and
  // `buffers` are its memfds, passed on untouched for the caller to map.
  static Outcome pickled(nlohmann::ordered_json pickle, wire::SharedFds buffers) {
    Outcome outcome{nlohmann::ordered_json()};
    outcome.pickle_ = std::move(pickle);
    outcome.buffers_ = std::move(buffers);
    return outcome;
  }

  [[nodiscard]] bool ok() const { return !error_.has_value(); }
  [[nodiscard]] const nlohmann::ordered_json& value() const { return value_; }
  [[nodiscard]] const Error& error() const { return *error_; }
  // The pickled value's description; null unless the value travelled pickled.
  [[nodiscard]] const nlohmann::ordered_json& pickle() const { return pickle_; }
  // The descriptors that came with the value (shared by copies of this Outcome).
  [[nodiscard]] const wire::SharedFds& buffers() const { return buffers_; }

 private:
  explicit Outcome(nlohmann::ordered_json value) : value_(std::move(value)) {}
  explicit Outcome(Error error) : error_(std::move(error)) {}
  nlohmann::ordered_json value_;
  std::optional<Error> error_;
  nlohmann::ordered_json pickle_;
  wire::SharedFds buffers_;
};

}  // namespace isohost::worker
