#include "error/error.hpp"

#include <array>
#include <utility>

namespace isohost {
namespace {

constexpr std::array<std::pair<ErrorKind, const char*>, 18> kNames{{
    {ErrorKind::spawn_failed, "SpawnFailed"},
    {ErrorKind::start_timeout, "StartTimeout"},
    {ErrorKind::protocol_error, "ProtocolError"},
    {ErrorKind::crashed, "WorkerCrashed"},
    {ErrorKind::call_timeout, "CallTimeout"},
    {ErrorKind::worker_exception, "WorkerException"},
    {ErrorKind::target_not_found, "TargetNotFound"},
    {ErrorKind::bad_request, "BadRequest"},
    {ErrorKind::crash_loop, "CrashLoop"},
    {ErrorKind::unknown_environment, "UnknownEnvironment"},
    {ErrorKind::shutting_down, "HostShuttingDown"},
    {ErrorKind::config_error, "ConfigError"},
    {ErrorKind::control_error, "ControlError"},
    {ErrorKind::hibernate_failed, "HibernateFailed"},
    {ErrorKind::wake_failed, "WakeFailed"},
    {ErrorKind::encode_error, "EncodeError"},
    {ErrorKind::decode_error, "DecodeError"},
    {ErrorKind::interrupted, "Interrupted"},
}};

}  // namespace

const char* error_kind_name(ErrorKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "Error";
}

std::optional<ErrorKind> error_kind_from_name(const std::string& name) {
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

nlohmann::ordered_json Error::to_json() const {
  nlohmann::ordered_json out{{"kind", kind_name()}, {"message", what()}};
  if (!detail_.is_null()) out["detail"] = detail_;
  return out;
}

Error Error::from_json(const nlohmann::ordered_json& error) {
  const auto kind = error_kind_from_name(error.value("kind", ""));
  return Error(kind.value_or(ErrorKind::control_error), error.value("message", "unknown error"),
               error.value("detail", nlohmann::ordered_json()));
}

}  // namespace isohost
