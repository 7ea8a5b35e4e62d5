#include "worker/worker.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "proc/process_group.hpp"
#include "proc/process_tree.hpp"
#include "proc/spawn.hpp"
#include "worker/hello.hpp"

namespace isohost::worker {
namespace {

// The worker's descriptors for the main and side lanes' sockets, as docs/protocol.md fixes them.
constexpr int kWorkerSocketFd = 3;
constexpr int kWorkerSideSocketFd = 4;

std::pair<wire::UniqueFd, wire::UniqueFd> make_socketpair() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw Error(ErrorKind::spawn_failed, std::string("socketpair: ") + std::strerror(errno));
  }
  return {wire::UniqueFd(pair[0]), wire::UniqueFd(pair[1])};
}

std::pair<wire::UniqueFd, wire::UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(ErrorKind::spawn_failed, std::string("pipe: ") + std::strerror(errno));
  }
  return {wire::UniqueFd(fds[0]), wire::UniqueFd(fds[1])};
}

ErrorKind kind_for_where(const std::string& where) {
  if (where == "import" || where == "lookup") return ErrorKind::target_not_found;
  if (where == "arguments") return ErrorKind::bad_request;
  if (where == "decode") return ErrorKind::decode_error;
  if (where == "encode") return ErrorKind::encode_error;
  return ErrorKind::worker_exception;
}

std::vector<std::string> worker_argv(const WorkerOptions& options) {
  std::vector<std::string> argv{options.python, "-s",
                                "-u",           options.runtime_dir + "/isohost_worker/__main__.py",
                                "--fd",         std::to_string(kWorkerSocketFd),
                                "--side-fd",    std::to_string(kWorkerSideSocketFd),
                                "--env",        options.env_name,
                                "--host",       options.host_tag,
                                "--poll-microseconds", std::to_string(options.poll_window.count())};
  for (const auto& dir : options.module_path) {
    argv.emplace_back("--path");
    argv.push_back(dir);
  }
  if (!options.preload.empty()) {
    std::string modules;
    for (const auto& m : options.preload) modules += (modules.empty() ? "" : ",") + m;
    argv.insert(argv.end(), {"--zygote", "--preload", modules});
  }
  return argv;
}

// A frame's `op`; a missing or non-string one is the peer's protocol error.
std::string op_of(const nlohmann::ordered_json& body) {
  const auto it = body.find("op");
  if (it == body.end()) throw wire::WireError("frame without an 'op'");
  if (!it->is_string())
    throw wire::WireError("frame whose 'op' is " + it->dump() + ", not a string");
  return it->get<std::string>();
}

// Reads a reply's outcome, field by field, before its handler is taken: a reply whose `ok`,
// `error` or `error`'s fields have the wrong JSON type is the worker's protocol error, and the
// handler still waiting then gets that error when the worker is killed for it.
Outcome reply_outcome(const nlohmann::ordered_json& body, const std::string& what,
                      std::vector<wire::UniqueFd>& buffers) {
  const auto ok = body.find("ok");
  if (ok == body.end() || !ok->is_boolean()) throw wire::WireError("reply without a boolean 'ok'");
  if (*ok) {
    if (const auto pickle = body.find("pickle"); pickle != body.end()) {
      return Outcome::pickled(*pickle, wire::SharedFds(std::move(buffers)));
    }
    const auto value = body.find("value");
    return Outcome::success(value == body.end() ? nlohmann::ordered_json() : *value);
  }
  const auto error = body.find("error");
  if (error == body.end() || !error->is_object())
    throw wire::WireError("failed reply without an 'error' object");
  for (const char* key : {"type", "message", "where"}) {
    const auto field = error->find(key);
    if (field != error->end() && !field->is_string()) {
      throw wire::WireError(std::string("reply's error.") + key + " is " + field->type_name() +
                            ", not a string");
    }
  }
  const auto type = error->value("type", std::string("Exception"));
  const auto message = error->value("message", std::string());
  return Outcome::failure(Error(kind_for_where(error->value("where", std::string("call"))),
                                what + " raised " + type + (message.empty() ? "" : ": " + message),
                                *error));
}

bool is_hibernation_state(WorkerState state) {
  return state == WorkerState::hibernating || state == WorkerState::hibernated || state == WorkerState::waking;
}

}  // namespace

const char* worker_state_name(WorkerState state) {
  switch (state) {
    case WorkerState::starting: return "starting";
    case WorkerState::ready: return "ready";
    case WorkerState::busy: return "busy";
    case WorkerState::stopping: return "stopping";
    case WorkerState::dead: return "dead";
    case WorkerState::hibernating: return "hibernating";
    case WorkerState::hibernated: return "hibernated";
    case WorkerState::waking: return "waking";
    case WorkerState::asleep:
      return "asleep";
  }
  return "unknown";
}

Worker::Worker(asio::io_context& io, WorkerOptions options, Events events)
    : io_(io),
      options_(std::move(options)),
      events_(std::move(events)),
      main_(io, "main"),
      side_(io, "side"),
      pidfd_(io),
      deadlines_(io) {}

Worker::~Worker() {
  // The pool lets go of a worker only once it is dead; anything else is a bug that must not
  // leave a process behind.
  if (pid_ > 0 && state_ != WorkerState::dead) proc::kill_tree(pid_);
}

std::shared_ptr<Worker> Worker::launch(asio::io_context& io, WorkerOptions options,
                                       Events events) {
  auto channels = WorkerChannels::make();
  // A worker reads nothing from stdin; /dev/null keeps fd 0 from being reused by its first open.
  wire::UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  std::shared_ptr<Worker> self(new Worker(io, std::move(options), std::move(events)));
  const auto& o = self->options_;
  // Passed on by fork and exec to everything the worker starts: what leaves its tree is still
  // known as this host's (proc/process_tree.hpp).
  auto variables = o.env;
  if (!o.host_tag.empty()) variables[proc::kHostTagVariable] = o.host_tag;
  proc::SpawnOptions spawn_options{
      .program = o.python,
      .argv = worker_argv(o),
      .env = proc::scrubbed_environment(variables),
      .cwd = o.cwd,
      .fds = {{dev_null.get(), 0},
              {channels.worker_socket.get(), kWorkerSocketFd},
              {channels.worker_side_socket.get(), kWorkerSideSocketFd},
              {channels.stdout_write.get(), 1},
              {channels.stderr_write.get(), 2}},
  };
  proc::Child child;
  try {
    child = proc::spawn(spawn_options);
  } catch (const proc::SpawnError& e) {
    throw Error(ErrorKind::spawn_failed,
                "cannot start a worker for environment '" + o.env_name + "': " + e.what());
  }
  self->pid_ = child.pid;
  self->spawned_at_ = Clock::now();
  self->start(std::move(channels.host_socket), std::move(channels.host_side_socket),
              std::move(child.pidfd), std::move(channels.stdout_read),
              std::move(channels.stderr_read));
  return self;
}

WorkerChannels WorkerChannels::make() {
  WorkerChannels c;
  std::tie(c.host_socket, c.worker_socket) = make_socketpair();
  std::tie(c.host_side_socket, c.worker_side_socket) = make_socketpair();
  std::tie(c.stdout_read, c.stdout_write) = make_pipe();
  std::tie(c.stderr_read, c.stderr_write) = make_pipe();
  return c;
}

std::shared_ptr<Worker> Worker::adopt(asio::io_context& io, WorkerOptions options,
                                      AdoptedProcess process, Events events) {
  std::shared_ptr<Worker> self(new Worker(io, std::move(options), std::move(events)));
  self->pid_ = process.pid;
  self->spawned_at_ = process.start_began.value_or(Clock::now());
  self->start(std::move(process.host_socket), std::move(process.host_side_socket),
              std::move(process.pidfd), std::move(process.stdout_read),
              std::move(process.stderr_read));
  return self;
}

void Worker::start(wire::UniqueFd main_end, wire::UniqueFd side_end, wire::UniqueFd child_pidfd,
                   wire::UniqueFd out, wire::UniqueFd err) {
  main_.socket.assign(main_end.release());
  main_.socket.non_blocking(true);
  side_.socket.assign(side_end.release());
  side_.socket.non_blocking(true);
  pidfd_.assign(child_pidfd.release());
  stdout_ =
      std::make_shared<OutputPipe>(io_, std::move(out), output_handler(OutputLine::Stream::out));
  stderr_ =
      std::make_shared<OutputPipe>(io_, std::move(err), output_handler(OutputLine::Stream::err));
  stdout_->start();
  stderr_->start();
  watch_exit();
  read_frames(main_);
  read_frames(side_);
  deadlines_.start.expires_after(options_.start_timeout);
  deadlines_.start.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec || self->state_ != WorkerState::starting) return;
    self->condemn(Error(ErrorKind::start_timeout,
                        self->identity() + " did not say hello within " +
                            std::to_string(self->options_.start_timeout.count()) +
                            " ms; it was killed"));
  });
}

OutputPipe::OnLine Worker::output_handler(OutputLine::Stream stream) const {
  if (!events_.on_output) {
    return [prefix = "[" + options_.env_name + ":" + std::to_string(pid_) + "] "](
               const std::string& line) { spdlog::info("{}{}", prefix, printable_line(line)); };
  }
  return [on_output = events_.on_output, env = options_.env_name, pid = pid_,
          stream](std::string line) {
    on_output(OutputLine{.env = env, .pid = pid, .stream = stream, .text = std::move(line)});
  };
}

std::string Worker::identity() const {
  return "worker '" + options_.env_name + "' (pid " + std::to_string(pid_) + ", generation " +
         std::to_string(options_.generation) + ")";
}

std::string Worker::stderr_tail() const {
  if (!stderr_ || stderr_->tail().empty()) return "";
  std::string out = "; last stderr lines:";
  for (const auto& line : stderr_->tail()) out += "\n  " + line;
  return out;
}

void Worker::watch_exit() {
  pidfd_.async_wait(asio::posix::stream_descriptor::wait_read,
                    [self = shared_from_this()](const asio::error_code& ec) {
                      if (!ec) self->on_process_exit();
                    });
}

void Worker::read_frames(Lane& lane) {
  lane.socket.async_wait(
      asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this(), &lane](const asio::error_code& ec) {
        if (ec || self->state_ == WorkerState::dead) return;
        try {
          for (;;) {
            const auto status = wire::receive_some(lane.socket.native_handle(), lane.reader);
            if (status == wire::ReceiveStatus::would_block) break;
            if (status == wire::ReceiveStatus::end_of_file) {
              self->on_socket_closed(lane);
              return;
            }
            while (auto frame = lane.reader.next()) {
              self->handle_frame(lane, std::move(*frame));
              if (self->state_ == WorkerState::dead || self->ending_.cause) return;
            }
          }
        } catch (const wire::WireError& e) {
          self->condemn(Error(ErrorKind::protocol_error, self->identity() +
                                                             " broke the protocol: " + e.what()));
          return;
        } catch (const nlohmann::ordered_json::exception& e) {
          // A field of a type no check above foresaw: still the worker's error, never a silent
          // end of this lane's reading with its callers left waiting.
          self->condemn(Error(ErrorKind::protocol_error,
                              self->identity() + " sent a malformed frame: " + e.what()));
          return;
        } catch (const std::system_error& e) {
          // A worker that dies with our request unread resets the connection: that is an end,
          // like end-of-file, and its exit status says how. Any other error is ours to act on.
          if (e.code() == std::errc::connection_reset) {
            self->on_socket_closed(lane);
          } else {
            self->condemn(Error(ErrorKind::protocol_error, self->identity() + " " + lane.name +
                                                               " socket failed: " + e.what()));
          }
          return;
        }
        self->read_frames(lane);
      });
}

void Worker::on_socket_closed(const Lane& lane) {
  // The process is ending; its pidfd says how. One that lingers is killed (a worker asked to
  // shut down keeps its grace timer).
  if (ending_.expected) return;
  deadlines_.stop.expires_after(options_.eof_grace);
  deadlines_.stop.async_wait([self = shared_from_this(),
                              name = lane.name](const asio::error_code& e) {
    if (e || self->state_ == WorkerState::dead) return;
    self->condemn(
        Error(ErrorKind::protocol_error,
              fmt::format("{} closed its {} socket but did not exit", self->identity(), name)));
  });
}

void Worker::handle_frame(Lane& lane, wire::Frame frame) {
  const auto& body = frame.body;
  if (state_ == WorkerState::starting) {
    if (&lane != &main_) throw wire::WireError("a frame on the side socket before hello");
    handle_hello(body);
    return;
  }
  const auto op = op_of(body);
  if (op == "reply") {
    handle_reply(body, std::move(frame.buffers));
  } else if (is_worker_request(op)) {
    if (&lane != &side_) throw wire::WireError("worker request '" + op + "' on the main socket");
    handle_worker_request(body);
  } else {
    throw wire::WireError("unexpected message '" + op + "' from the worker");
  }
}

bool Worker::is_worker_request(const std::string& op) {
  return op == "reserve_vram" || op == "reserve_done" || op == "ask" || op == "tell";
}

nlohmann::ordered_json failed_answer(const std::string& type, const std::string& message) {
  return {{"ok", false}, {"error", {{"type", type}, {"message", message}}}};
}

void Worker::handle_worker_request(const nlohmann::ordered_json& body) {
  std::optional<std::int64_t> id;
  if (const auto field = body.find("id"); field != body.end()) {
    if (!field->is_number_integer()) throw wire::WireError("worker request with a non-integer id");
    id = field->get<std::int64_t>();
  }
  const auto op = op_of(body);
  if (op == "ask" || op == "tell") {
    handle_ask(body, op == "ask" ? id : std::nullopt);
    return;
  }
  if (!events_.on_worker_request) {
    if (id)
      send_answer(*id, failed_answer("Unsupported", "this host does not serve worker requests"));
    return;
  }
  auto answer = [weak = weak_from_this(), id](nlohmann::ordered_json value) {
    auto self = weak.lock();
    if (!id || !self) return;
    self->send_answer(*id, {{"ok", true}, {"value", std::move(value)}});
  };
  events_.on_worker_request(body, std::move(answer));
}

void Worker::handle_ask(const nlohmann::ordered_json& body, std::optional<std::int64_t> id) {
  if (op_of(body) == "ask" && !id) throw wire::WireError("ask without an integer id");
  // Sends an ask's whole reply ({"ok": ...}) once; nothing for a tell or once the worker died.
  auto answer_once = [weak = weak_from_this(), id,
                      answered = std::make_shared<bool>(false)](nlohmann::ordered_json reply) {
    auto self = weak.lock();
    if (!id || !self || *answered) return;
    *answered = true;
    self->send_answer(*id, std::move(reply));
  };
  const auto name = body.find("name");
  std::string refusal;
  if (name == body.end() || !name->is_string()) {
    refusal = "an ask needs a string 'name'";
  } else if (!request_.handler && events_.on_worker_request) {
    // Between calls: the worker's own tell or ask (a thread or a task of its own), for the pool.
    events_.on_worker_request(body, std::move(answer_once));
    return;
  } else if (!request_.on_ask) {
    refusal = request_.handler ? "the caller of " + request_.what + " serves no asks"
                               : "no call is in flight to ask";
  }
  if (!refusal.empty()) {
    if (id) {
      send_answer(*id, failed_answer("Unsupported", refusal));
    } else {
      spdlog::warn("{}: a tell was dropped: {}", identity(), refusal);
    }
    return;
  }
  request_.on_ask(body, std::move(answer_once));
}

void Worker::send_answer(std::int64_t id, nlohmann::ordered_json reply) {
  if (state_ == WorkerState::dead) return;
  reply["op"] = "answer";
  reply["id"] = id;
  send(side_, reply);
}

void Worker::interrupt(std::chrono::milliseconds grace) {
  if (!request_.handler || request_.interrupted_id == request_.id) return;
  request_.interrupted_id = request_.id;
  const auto query_id = next_id_++;
  side_handlers_.emplace(query_id, [](const Outcome&) {});
  send(side_, {{"op", "interrupt"}, {"id", query_id}, {"call", request_.id}});
  deadlines_.interrupt.expires_after(grace);
  deadlines_.interrupt.async_wait(
      [self = shared_from_this(), id = request_.id, grace](const asio::error_code& ec) {
        if (ec || self->request_.id != id || !self->request_.handler) return;
        self->condemn(
            Error(ErrorKind::interrupted,
                  fmt::format("{} did not stop within {:g} s of its interrupt; {} and its "
                              "process group were killed",
                              self->request_.what, grace.count() / 1000.0, self->identity())));
      });
}

void Worker::handle_hello(const nlohmann::ordered_json& body) {
  check_hello(body);
  hello_ = body;
  ready_at_ = Clock::now();
  state_ = WorkerState::ready;
  deadlines_.start.cancel();
  if (events_.on_ready) events_.on_ready(nullptr);
}

void Worker::handle_reply(const nlohmann::ordered_json& body, std::vector<wire::UniqueFd> buffers) {
  const auto id_field = body.find("id");
  if (id_field == body.end() || !id_field->is_number_integer()) {
    throw wire::WireError("reply without an integer id");
  }
  const auto id = id_field->get<std::int64_t>();
  const bool main = id == request_.id && request_.handler;
  const auto side = main ? side_handlers_.end() : side_handlers_.find(id);
  if (!main && side == side_handlers_.end()) {
    throw wire::WireError("reply to unknown request id " + std::to_string(id));
  }
  auto outcome = reply_outcome(body, main ? request_.what : "query", buffers);
  Handler handler;
  if (main && events_.on_output) {
    // What the call printed is in the pipes by now, but the loop may not have read it yet.
    stdout_->read_available();
    stderr_->read_available();
  }
  if (main) {
    handler = std::move(request_.handler);
    request_.handler = nullptr;
    request_.on_ask = nullptr;
    request_.id = 0;
    deadlines_.call.cancel();
    deadlines_.interrupt.cancel();
    if (state_ == WorkerState::busy)
      state_ = ending_.expected ? WorkerState::stopping : WorkerState::ready;
  } else {
    handler = std::move(side->second);
    side_handlers_.erase(side);
  }
  handler(std::move(outcome));
}

void Worker::request(nlohmann::ordered_json message, std::chrono::milliseconds timeout,
                     std::string what, Handler handler, std::vector<wire::UniqueFd> buffers,
                     AskHandler on_ask) {
  if (state_ != WorkerState::ready) {
    handler(Outcome::failure(Error(ErrorKind::bad_request,
                                   identity() + " cannot take a request while " +
                                       worker_state_name(state_))));
    return;
  }
  request_.id = next_id_++;
  request_.what = std::move(what);
  request_.handler = std::move(handler);
  request_.on_ask = std::move(on_ask);
  state_ = WorkerState::busy;
  message["id"] = request_.id;
  if (timeout.count() > 0) {
    deadlines_.call.expires_after(timeout);
    deadlines_.call.async_wait(
        [self = shared_from_this(), id = request_.id, timeout](const asio::error_code& ec) {
          if (ec || self->request_.id != id) return;
          self->condemn(
              Error(ErrorKind::call_timeout,
                    fmt::format("{} exceeded its timeout of {:g} s; {} and its process "
                                "group were killed",
                                self->request_.what, timeout.count() / 1000.0, self->identity())));
        });
  }
  send(main_, message, std::move(buffers));
}

void Worker::query(const std::string& op, Handler handler) {
  if (state_ == WorkerState::starting || state_ == WorkerState::stopping || state_ == WorkerState::dead) {
    handler(Outcome::failure(Error(ErrorKind::bad_request,
                                   identity() + " cannot answer '" + op + "' while " +
                                       worker_state_name(state_))));
    return;
  }
  const auto id = next_id_++;
  side_handlers_.emplace(id, std::move(handler));
  send(side_, {{"op", op}, {"id", id}});
}

void Worker::send(Lane& lane, const nlohmann::ordered_json& body,
                  std::vector<wire::UniqueFd> buffers) {
  if (socket_failed_) return;
  lane.outgoing.push(body, std::move(buffers));
  flush(lane);
}

void Worker::flush(Lane& lane) {
  if (lane.waiting_to_write || socket_failed_) return;
  try {
    if (lane.outgoing.flush(lane.socket.native_handle())) return;
  } catch (const std::system_error& e) {
    // The worker is gone or going; its exit will fail what is pending.
    socket_failed_ = true;
    spdlog::debug("{}: {}", identity(), e.what());
    return;
  }
  lane.waiting_to_write = true;
  lane.socket.async_wait(asio::posix::stream_descriptor::wait_write,
                         [self = shared_from_this(), &lane](const asio::error_code& ec) {
                           lane.waiting_to_write = false;
                           if (!ec) self->flush(lane);
                         });
}

void Worker::shutdown(std::chrono::milliseconds grace) {
  if (state_ == WorkerState::dead) return;
  ending_.expected = true;
  if (state_ == WorkerState::starting) {
    condemn(Error(ErrorKind::shutting_down, identity() + " was stopped before it was ready"));
    return;
  }
  if (is_hibernation_state(state_)) {
    // Its interpreter's exit would block in CUDA until a restore; moving the whole GPU state
    // back only to exit costs seconds, so a hibernated worker is ended at once.
    condemn(Error(ErrorKind::shutting_down,
                  identity() + " was " + worker_state_name(state_) + "; it was ended without waking"));
    return;
  }
  state_ = state_ == WorkerState::busy ? WorkerState::busy : WorkerState::stopping;
  send(main_, {{"op", "shutdown"}});
  deadlines_.stop.expires_after(grace);
  deadlines_.stop.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec || self->state_ == WorkerState::dead) return;
    self->condemn(Error(ErrorKind::shutting_down,
                        self->identity() + " did not exit within its shutdown grace period; it was killed"));
  });
}

void Worker::kill(Error reason) { condemn(std::move(reason)); }

bool Worker::move_state(std::initializer_list<WorkerState> from, WorkerState to) {
  for (auto state : from) {
    if (state_ == state) {
      state_ = to;
      return true;
    }
  }
  return false;
}

bool Worker::mark_asleep() { return move_state({WorkerState::ready}, WorkerState::asleep); }
bool Worker::mark_hibernating() {
  return move_state({WorkerState::ready, WorkerState::asleep}, WorkerState::hibernating);
}
bool Worker::mark_hibernated() { return move_state({WorkerState::hibernating}, WorkerState::hibernated); }
bool Worker::mark_waking() { return move_state({WorkerState::hibernated}, WorkerState::waking); }
bool Worker::mark_awake() {
  return move_state({WorkerState::hibernating, WorkerState::waking, WorkerState::asleep},
                    WorkerState::ready);
}

void Worker::condemn(Error reason) {
  if (state_ == WorkerState::dead) return;
  if (!ending_.cause) ending_.cause = std::move(reason);
  // A starting or busy worker keeps its state: its death fails the start or the request.
  if (state_ == WorkerState::ready || state_ == WorkerState::asleep ||
      is_hibernation_state(state_)) {
    state_ = WorkerState::stopping;
  }
  // Its group, and what left the group but stays in its tree (it is a child subreaper).
  const auto ended = proc::kill_tree(pid_);
  if (!ended.empty()) {
    spdlog::info("{}: ended {} process(es) it started, pids {}", identity(), ended.size(),
                 fmt::join(ended, ", "));
  }
}

void Worker::end_escaped() const {
  // A worker that ended on its own (a crash, a kill from outside) could not take its tree with
  // it: what it started was re-parented to init. Its environment still names this host.
  auto pass = [tag = options_.host_tag, who = identity()] {
    for (pid_t pid : proc::end_escaped(tag)) {
      spdlog::warn(
          "ended pid {} that a worker of this host started and left behind when it "
          "ended ({} had just ended)",
          pid, who);
    }
  };
  if (events_.run_escape_pass) {
    events_.run_escape_pass(std::move(pass));
  } else {
    pass();
  }
}

Error Worker::death_error(const proc::ExitStatus& status) const {
  if (ending_.cause) {
    return Error(ending_.cause->kind(), std::string(ending_.cause->what()) + stderr_tail(),
                 ending_.cause->detail());
  }
  if (ending_.expected) {
    return Error(ErrorKind::shutting_down, identity() + " was shut down (" + status.describe() + ")");
  }
  const std::string during = state_ == WorkerState::starting ? " before saying hello"
                             : request_.handler              ? " during " + request_.what
                             : is_hibernation_state(state_) || state_ == WorkerState::asleep
                                 ? std::string(" while ") + worker_state_name(state_)
                                 : " while idle";
  return Error(ErrorKind::crashed, identity() + " " + status.describe() + during + stderr_tail(),
               nlohmann::ordered_json{{"exit", status.describe()}});
}

void Worker::on_process_exit() {
  // Take any processes the worker started before its group id can be reused.
  proc::signal_group(pid_, SIGKILL);
  const auto status = proc::reap(pidfd_.native_handle());
  stdout_->drain();
  stderr_->drain();
  const bool was_starting = state_ == WorkerState::starting;
  const Error error = death_error(status);
  state_ = WorkerState::dead;
  for (auto* timer : {&deadlines_.start, &deadlines_.call, &deadlines_.stop, &deadlines_.interrupt})
    timer->cancel();
  request_.on_ask = nullptr;
  asio::error_code ignored;
  main_.socket.close(ignored);
  side_.socket.close(ignored);
  pidfd_.close(ignored);
  stdout_->close();
  stderr_->close();
  if (was_starting && events_.on_ready) events_.on_ready(&error);
  if (request_.handler) {
    auto handler = std::move(request_.handler);
    request_.handler = nullptr;
    handler(Outcome::failure(error));
  }
  auto side = std::move(side_handlers_);
  side_handlers_.clear();
  for (auto& [id, handler] : side) handler(Outcome::failure(error));
  // A worker killed because its caller's interrupt went unheeded did what it was asked to stop
  // doing: that is no crash, and counts nothing towards the environment's back-off.
  const bool interrupted = ending_.cause && ending_.cause->kind() == ErrorKind::interrupted;
  const bool expected =
      interrupted ||
      (ending_.expected && (!ending_.cause || ending_.cause->kind() == ErrorKind::shutting_down));
  spdlog::log(expected ? spdlog::level::info : spdlog::level::warn, "{} ended: {}", identity(),
              expected && !interrupted ? status.describe() : std::string(error.what()));
  if (events_.on_exit) events_.on_exit(ExitReport{status, expected, error.what()});
  // After its callers have heard: a pass over /proc, about 1 ms per 70 processes of this uid.
  end_escaped();
}

}  // namespace isohost::worker
