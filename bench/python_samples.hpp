#pragma once

// Benchmarks whose measuring half is Python (the Python API, ComfyUI): run a script, take the
// samples it prints as one JSON object on its last line.

#include <string>

#include <nlohmann/json.hpp>

namespace isohost::bench {

// Runs `command` through the shell and returns the JSON object on the last line of its standard
// output ({"name": [ms, ...], ...}). Throws std::runtime_error, with the output, when the command
// fails or prints no such line; `hint` says what to check.
nlohmann::ordered_json python_samples(const std::string& command, const std::string& hint);

// `s` quoted for the shell.
std::string shell_quote(const std::string& s);

}  // namespace isohost::bench
