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
  // --socket was given: an empty path is then refused as a path, not taken as "no socket".
  bool use_socket = false;
  std::string env;
  std::string target;
  std::string args = "[]";
  std::string kwargs = "{}";
};

using Json = nlohmann::ordered_json;

// What nlohmann's parser would not say of an option's JSON text: its syntax error, kept with the
// reason, and the first integer too big for 64 bits, which parsing would turn silently into a
// double (its text has no fraction and no exponent). Stops at the first of either.
class OptionJsonCheck final : public nlohmann::json_sax<Json> {
 public:
  std::string syntax_error;
  std::string big_integer;

  bool null() override { return true; }
  bool boolean(bool /*value*/) override { return true; }
  bool number_integer(number_integer_t /*value*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*value*/) override { return true; }
  bool number_float(number_float_t /*value*/, const string_t& text) override {
    if (text.find_first_of(".eE") != string_t::npos) return true;
    big_integer = text;
    return false;
  }
  bool string(string_t& /*value*/) override { return true; }
  bool binary(binary_t& /*value*/) override { return true; }
  bool start_object(std::size_t /*size*/) override { return true; }
  bool key(string_t& /*value*/) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t /*size*/) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, ...": the tag says nothing to a
    // user.
    const std::string what = e.what();
    const auto tag_end = what.find("] ");
    syntax_error = tag_end == std::string::npos ? what : what.substr(tag_end + 2);
    return false;
  }
};

Json parse_json_option(const std::string& text, const char* name, bool want_array) {
  const std::string option = std::string("--") + name;
  const auto refuse = [&](const std::string& why) {
    return isohost::Error(
        isohost::ErrorKind::bad_request,
        option + " must be a JSON " + (want_array ? "array" : "object") + ": " + why);
  };
  if (wire::json_depth(text) > wire::kMaxJsonDepth) {
    throw isohost::Error(isohost::ErrorKind::bad_request, wire::too_deep(option));
  }
  OptionJsonCheck check;
  Json::sax_parse(text, &check);
  if (!check.syntax_error.empty()) throw refuse(check.syntax_error);
  if (!check.big_integer.empty()) {
    throw refuse("the integer " + check.big_integer.substr(0, 200) +
                 " does not fit in 64 bits (-2^63 to 2^64-1); pass it as a string, or as a "
                 "float, with a fraction or an exponent");
  }
  auto value = Json::parse(text);
  if (want_array ? !value.is_array() : !value.is_object()) {
    throw refuse(std::string("got ") + value.type_name() + ": " + text.substr(0, 200));
  }
  return value;
}

int run_call(const CallOptions& o) {
  const auto args = parse_json_option(o.args, "args", true);
  const auto kwargs = parse_json_option(o.kwargs, "kwargs", false);
  nlohmann::ordered_json value;
  if (o.use_socket) {
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
  sub->callback([options, config, socket] {
    if (config->count() == 0 && socket->count() == 0) {
      throw CLI::RequiredError("--config or --socket");
    }
    options->use_socket = socket->count() > 0;
  });
  commands.emplace_back(sub, [options] { return run_call(*options); });
}

}  // namespace isohost::cli
