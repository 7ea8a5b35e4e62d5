#include <iostream>

#include "cli/commands.hpp"
#include "control/control_client.hpp"
#include "pool/pool.hpp"
#include "wire/json_depth.hpp"

namespace isohost::cli {
namespace {

struct CallOptions {
  std::string config;
  std::string socket;
  std::string env;
  std::string target;
  std::string args = "[]";
  std::string kwargs = "{}";
};

nlohmann::ordered_json parse_json_option(const std::string& text, const char* name,
                                         bool want_array) {
  auto value = wire::parse_within_depth(text);
  if (value.is_discarded() || (want_array ? !value.is_array() : !value.is_object())) {
    throw isohost::Error(isohost::ErrorKind::bad_request,
                         std::string("--") + name + " must be a JSON " +
                             (want_array ? "array" : "object") + " nested at most " +
                             std::to_string(wire::kMaxJsonDepth) +
                             " deep, got: " + text.substr(0, 200));
  }
  return value;
}

int run_call(const CallOptions& o) {
  const auto args = parse_json_option(o.args, "args", true);
  const auto kwargs = parse_json_option(o.kwargs, "kwargs", false);
  nlohmann::ordered_json value;
  if (!o.socket.empty()) {
    const auto reply = control::send_control_request(
        o.socket, {{"op", "call"}, {"env", o.env}, {"target", o.target}, {"args", args}, {"kwargs", kwargs}});
    if (!reply.value("ok", false))
      throw isohost::Error::from_json(reply.value("error", nlohmann::ordered_json::object()));
    value = reply.value("value", nlohmann::ordered_json());
  } else {
    pool::Pool pool(pool::load_config(o.config));
    value = pool.call(o.env, o.target, args, kwargs).get();
  }
  std::cout << value.dump() << std::endl;
  return 0;
}

}  // namespace

void add_call_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<CallOptions>();
  auto* sub = app.add_subcommand("call", "Run one call in an environment and print its result as JSON");
  // Not CLI::ExistingFile: load_config names the file and what is wrong with it.
  auto* config = sub->add_option("--config", options->config, "TOML file: run a short-lived host");
  auto* socket = sub->add_option("--socket", options->socket, "control socket of a running host");
  config->excludes(socket);
  sub->add_option("env", options->env, "environment name")->required();
  sub->add_option("target", options->target, "module:function")->required();
  sub->add_option("--args", options->args, "positional arguments, a JSON array");
  sub->add_option("--kwargs", options->kwargs, "keyword arguments, a JSON object");
  sub->callback([sub, config, socket] {
    if (config->count() == 0 && socket->count() == 0) {
      throw CLI::RequiredError("--config or --socket");
    }
    (void)sub;
  });
  commands.emplace_back(sub, [options] { return run_call(*options); });
}

}  // namespace isohost::cli
