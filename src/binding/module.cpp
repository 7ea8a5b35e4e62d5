// _isohost: the C++ host core for Python (the package isohost wraps it; docs/python-api.md).
//
// Everything crosses this boundary as JSON text, descriptors as ints, and worker errors as
// CoreError(JSON of isohost::Error), so the Python layer owns every Python object and the pool's
// loop thread never touches one. The GIL is released wherever the core waits.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "binding/idle_tells.hpp"
#include "binding/output_queue.hpp"
#include "binding/pending_call.hpp"
#include "control/status_json.hpp"
#include "pool/caller_polling.hpp"
#include "pool/pool.hpp"
#include "wire/frame.hpp"
#include "wire/json_depth.hpp"
#include "worker/worker.hpp"

namespace py = pybind11;

namespace isohost::binding {
namespace {

PyObject* core_error = nullptr;

std::string dump(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json parse_message(const std::string& text) {
  if (wire::json_depth(text) > wire::kMaxJsonDepth)
    throw Error(ErrorKind::bad_request, wire::too_deep("the request"));
  auto message = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) {
    throw Error(ErrorKind::bad_request, "a request must be a JSON object");
  }
  return message;
}

// An ask's reply from the Python host, or one that says it was none.
nlohmann::ordered_json parse_reply(const std::string& reply_text) {
  auto reply = wire::parse_within_depth(reply_text);
  if (reply.is_discarded() || !reply.is_object()) {
    return worker::failed_answer("BadAnswer",
                                 "the host's answer was not a JSON object nested at most " +
                                     std::to_string(wire::kMaxJsonDepth) + " deep");
  }
  return reply;
}

pool::Request::Kind request_kind(const std::string& kind) {
  if (kind == "call") return pool::Request::Kind::call;
  if (kind == "release") return pool::Request::Kind::release;
  if (kind == "reap") return pool::Request::Kind::reap;
  if (kind == "hibernate") return pool::Request::Kind::hibernate;
  if (kind == "sleep") return pool::Request::Kind::sleep;
  if (kind == "wake") return pool::Request::Kind::wake;
  if (kind == "make_room") return pool::Request::Kind::make_room;
  if (kind == "keep") return pool::Request::Kind::keep;
  throw Error(ErrorKind::bad_request, "unknown request kind '" + kind + "'");
}

// One pool, owned by a Python Host.
class Core {
 public:
  // `relay_output`: the workers' output lines go to take_output() instead of the host's log.
  Core(pool::Config config, const std::string& runtime_dir, bool relay_output)
      : pool_(std::make_unique<pool::Pool>(std::move(config),
                                           pool_options(runtime_dir, relay_output))) {}

  // Takes ownership of `fds` at once, whatever happens next.
  std::shared_ptr<PendingCall> submit(const std::string& kind, const std::string& env,
                                      const std::string& message_text,
                                      const std::vector<int>& fds) {
    std::vector<wire::UniqueFd> owned;
    for (int fd : fds) owned.emplace_back(fd);
    refuse_if_closed();
    if (owned.size() > wire::kMaxBuffers) {
      throw Error(ErrorKind::bad_request, std::to_string(owned.size()) + " buffers exceed the " +
                                              std::to_string(wire::kMaxBuffers) +
                                              " a frame may carry");
    }
    pool::Request request{request_kind(kind), env, parse_message(message_text),
                          wire::SharedFds(std::move(owned))};
    auto pending = std::make_shared<PendingCall>();
    if (request.kind == pool::Request::Kind::call) {
      request.ticket = pending->ticket = pool_->new_ticket();
      request.on_ask = [pending](const nlohmann::ordered_json& ask, PendingCall::Answer answer) {
        pending->ask(ask, std::move(answer));
      };
    }
    pool_->submit(std::move(request), [pending, output = output_](worker::Outcome outcome) {
      pending->complete(std::move(outcome), output->pushed());
    });
    return pending;
  }

  // Stops the call `pending` (Pool::interrupt); nothing once it has ended.
  void interrupt(const PendingCall& pending, double grace_seconds) {
    refuse_if_closed();
    const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(std::clamp(grace_seconds, 0.0, 86400.0)));
    pool_->interrupt(pending.ticket, grace);
  }

  std::string status() {
    refuse_if_closed();
    py::gil_scoped_release release;
    return dump(control::status_json(pool_->status_with_memory().get()));
  }

  // None once closed, else [(env, body as JSON text, token)]: the tells and asks workers sent
  // between calls since the last take, waiting (GIL released) at most `timeout` seconds for the
  // first. An ask's token (0 for a tell) goes to answer_between_calls with its reply.
  py::object take_tells(double timeout) {
    std::optional<std::vector<IdleTells::Tell>> tells;
    {
      py::gil_scoped_release release;
      tells = tells_->take(std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::duration<double>(std::clamp(timeout, 0.0, 3600.0))));
    }
    if (!tells) return py::none();
    py::list out;
    for (auto& tell : *tells) out.append(py::make_tuple(tell.env, dump(tell.body), tell.token));
    return out;
  }

  // Asks between calls wait for take_tells() from now on (the Python host's tell thread runs);
  // before, they are answered "Unsupported" at once.
  void serve_between_calls() { tells_->serve(); }

  // `reply_text` as answer() takes it; nothing once the ask is gone (the host closed).
  void answer_between_calls(std::uint64_t token, const std::string& reply_text) {
    tells_->answer(token, parse_reply(reply_text));
  }

  // None once closed and every line taken, else ([(env, pid, "stdout" or "stderr", line as
  // bytes)], how many lines were dropped after those, how many had been read by then): the
  // workers' output since the last take, waiting (GIL released) at most `timeout` seconds for
  // the first line. Only with relay_output.
  py::object take_output(double timeout) {
    std::optional<OutputQueue::Batch> batch;
    {
      py::gil_scoped_release release;
      batch = output_->take(std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::duration<double>(std::clamp(timeout, 0.0, 3600.0))));
    }
    if (!batch) return py::none();
    py::list lines;
    for (const auto& line : batch->lines) {
      lines.append(py::make_tuple(line.env, line.pid, worker::stream_name(line.stream),
                                  py::bytes(line.text)));
    }
    return py::make_tuple(lines, batch->dropped, batch->through);
  }

  void close() {
    if (closed_) return;
    closed_ = true;  // under the GIL, so no submit can slip in behind the shutdown
    tells_->close();
    py::gil_scoped_release release;
    pool_.reset();  // shuts down, then frees the event loop's descriptors too
    output_->close();  // after the pool: the workers' last words are queued by now
  }

 private:
  pool::PoolOptions pool_options(const std::string& runtime_dir, bool relay_output) {
    pool::PoolOptions options{
        .runtime_dir = runtime_dir,
        .on_tell = [tells = tells_](const std::string& env,
                                    const nlohmann::ordered_json& tell) { tells->push(env, tell); },
        .on_ask = [tells = tells_](
                      const std::string& env, const nlohmann::ordered_json& ask,
                      IdleTells::Answer answer) { tells->push(env, ask, std::move(answer)); }};
    if (relay_output) {
      options.on_output = [output = output_](worker::OutputLine line) {
        output->push(std::move(line));
      };
    }
    return options;
  }

  void refuse_if_closed() const {
    if (closed_) throw Error(ErrorKind::shutting_down, "the host is closed");
  }

  // Before pool_, which feeds them.
  std::shared_ptr<IdleTells> tells_ = std::make_shared<IdleTells>();
  std::shared_ptr<OutputQueue> output_ = std::make_shared<OutputQueue>();
  std::unique_ptr<pool::Pool> pool_;
  bool closed_ = false;
};

// Waits, with the GIL released, for the outcome or an ask: "done", "asks", or "timeout" once
// `timeout` seconds have passed (None: never). In slices, so that Ctrl-C (any signal handler
// that raises) interrupts the wait; the call itself runs on in its worker.
std::string wait_event(PendingCall& pending, std::optional<double> timeout) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::milliseconds kSlice(100);
  static const auto poll_window = pool::caller_poll_window();
  const auto deadline =
      timeout ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, *timeout)))
              : Clock::time_point::max();
  for (bool first = true;; first = false) {
    auto slice = kSlice;
    if (timeout) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      slice = std::clamp(left, std::chrono::milliseconds(0), kSlice);
    }
    PendingCall::Event event = PendingCall::Event::timeout;
    {
      py::gil_scoped_release release;
      event = pending.wait_event(slice, first ? poll_window : std::chrono::microseconds(0));
    }
    if (event == PendingCall::Event::done) return "done";
    if (event == PendingCall::Event::asks) return "asks";
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (timeout && Clock::now() >= deadline) return "timeout";
  }
}

// [(token, body as JSON text)]: the asks and tells that came since the last take.
py::list take_asks(PendingCall& pending) {
  py::list out;
  for (auto& ask : pending.take_asks()) out.append(py::make_tuple(ask.token, dump(ask.body)));
  return out;
}

// `reply_text`: {"ok": true, "value": V} or {"ok": false, "error": {"type", "message"}}.
void answer(PendingCall& pending, std::uint64_t token, const std::string& reply_text) {
  pending.answer(token, parse_reply(reply_text));
}

// ("value", json, []) | ("pickle", description, [fds]) | ("error", isohost::Error as JSON, []),
// once wait_event said "done". The descriptors become the caller's.
py::tuple outcome(PendingCall& pending) {
  const worker::Outcome* outcome = nullptr;
  {
    py::gil_scoped_release release;
    outcome = &pending.wait();
  }
  if (!outcome->ok()) return py::make_tuple("error", dump(outcome->error().to_json()), py::list());
  if (outcome->pickle().is_null())
    return py::make_tuple("value", dump(outcome->value()), py::list());
  auto fds = outcome->buffers().take();
  py::list fd_list;
  for (auto& fd : fds) fd_list.append(fd.get());
  for (auto& fd : fds) fd.release();  // only once the list holds them all
  return py::make_tuple("pickle", dump(outcome->pickle()), fd_list);
}

}  // namespace
}  // namespace isohost::binding

PYBIND11_MODULE(_isohost, m) {
  using namespace isohost;
  using binding::Core;
  using binding::PendingCall;
  m.doc() = "isohost's C++ host core; use the isohost package";
  // The host's log (worker starts and ends, the workers' own output) goes to stderr: a Python
  // host's stdout is its own.
  spdlog::set_default_logger(spdlog::stderr_color_mt("isohost"));

  binding::core_error = PyErr_NewException("_isohost.CoreError", nullptr, nullptr);
  m.attr("CoreError") = py::handle(binding::core_error);
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const isohost::Error& e) {
      PyErr_SetString(binding::core_error, binding::dump(e.to_json()).c_str());
    }
  });

  py::class_<PendingCall, std::shared_ptr<PendingCall>>(m, "PendingCall")
      .def("wait_event", &binding::wait_event, py::arg("timeout") = py::none(),
           "Block (GIL released) until the outcome or an ask is in: 'done', 'asks' or 'timeout'")
      .def("take_asks", &binding::take_asks)
      .def("answer", &binding::answer, py::arg("token"), py::arg("reply"))
      .def("outcome", &binding::outcome, "The outcome, once wait_event said 'done'")
      .def_readonly("ticket", &PendingCall::ticket)
      .def_property_readonly("output_read", &PendingCall::output_read,
                             "How many lines of the workers' output were read when it ended")
      .def("done", &PendingCall::done)
      .def("fileno", &PendingCall::event_fd, "An eventfd readable once the outcome is in");

  py::class_<Core>(m, "Core")
      .def(py::init([](const std::string& path, const std::string& runtime_dir, bool relay_output) {
             return std::make_unique<Core>(pool::load_config(path), runtime_dir, relay_output);
           }),
           py::arg("config_path"), py::arg("runtime_dir"), py::arg("relay_output") = false)
      .def_static(
          "from_toml",
          [](const std::string& text, const std::string& source, const std::string& base_dir,
             const std::string& runtime_dir, bool relay_output) {
            return std::make_unique<Core>(pool::parse_config(text, source, base_dir), runtime_dir,
                                          relay_output);
          },
          py::arg("text"), py::arg("source"), py::arg("base_dir"), py::arg("runtime_dir"),
          py::arg("relay_output") = false)
      .def("submit", &Core::submit, py::arg("kind"), py::arg("env"), py::arg("message"),
           py::arg("fds"))
      .def("interrupt", &Core::interrupt, py::arg("pending"), py::arg("grace_seconds"))
      .def("serve_between_calls", &Core::serve_between_calls)
      .def("answer_between_calls", &Core::answer_between_calls, py::arg("token"),
           py::arg("reply_text"))
      .def("take_tells", &Core::take_tells, py::arg("timeout"),
           "None once closed, else [(env, tell or ask as JSON text, token)] sent between calls")
      .def("take_output", &Core::take_output, py::arg("timeout"),
           "None once closed, else ([(env, pid, stream, line)], dropped, through): the workers' "
           "output since the last take")
      .def("status", &Core::status)
      .def("close", &Core::close);
}
