#pragma once

// One worker process and its connection, driven by the host's event loop.
//
//   auto w = Worker::launch(io, options, {.on_ready = ..., .on_exit = ...});
//   // after on_ready(nullptr):
//   w->request({{"op", "call"}, {"target", "m:f"}, {"args", {1}}, {"kwargs", {}}},
//              600s, "m:f", [](Outcome o) { ... });
//
// Thread safety: none. Every member is called on the event loop's thread, and every handler
// runs there. Each request's handler runs exactly once, also when the worker dies: then with
// the error that says why (crash with its exit status and last stderr lines, timeout, protocol
// error). A worker that has died is never reused; the pool starts a new generation.

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error/error.hpp"
#include "proc/exit_status.hpp"
#include "wire/frame.hpp"
#include "wire/socket_io.hpp"
#include "worker/outcome.hpp"
#include "worker/output_line.hpp"
#include "worker/output_pipe.hpp"

namespace isohost::worker {

struct WorkerOptions {
  // The environment's name: prefixes the worker's output and names it in errors.
  std::string env_name;
  // The interpreter: a path, or a name looked up on PATH.
  std::string python = "python3";
  // Directories put in front of the worker's sys.path.
  std::vector<std::string> module_path;
  // Working directory; empty keeps the host's.
  std::string cwd;
  // Variables added to the scrubbed environment.
  std::map<std::string, std::string> env;
  // The directory that holds the isohost_worker package.
  std::string runtime_dir;
  // proc::host_tag() of the host: on the worker's command line for the orphan sweep, and in its
  // environment as ISOHOST_HOST_TAG (proc/process_tree.hpp).
  std::string host_tag;
  unsigned generation = 1;
  std::chrono::milliseconds start_timeout{60000};
  // How long a worker that closed its socket may take to exit before it is killed.
  std::chrono::milliseconds eof_grace{1000};
  // Non-empty: the process is a zygote that imports these modules and forks workers on request
  // (`--zygote --preload a,b`, docs/lifecycle.md#zygotes), not a worker.
  std::vector<std::string> preload;
  // How long the worker polls for its next op before it sleeps (`--poll-microseconds`).
  std::chrono::microseconds poll_window{0};
};

// The host's ends of a new worker's connection (a socket per lane, docs/protocol.md) and output,
// and the ends the worker gets.
struct WorkerChannels {
  wire::UniqueFd host_socket;
  wire::UniqueFd host_side_socket;
  wire::UniqueFd worker_socket;
  wire::UniqueFd worker_side_socket;
  wire::UniqueFd stdout_read;
  wire::UniqueFd stdout_write;
  wire::UniqueFd stderr_read;
  wire::UniqueFd stderr_write;
  // Throws Error(spawn_failed) when the socketpair or a pipe cannot be made.
  static WorkerChannels make();
};

// A running process the host did not spawn itself but is the parent of (a zygote's fork), with
// the host's ends of its channels: Worker::adopt watches it like a spawned one.
struct AdoptedProcess {
  pid_t pid = -1;
  wire::UniqueFd pidfd;
  wire::UniqueFd host_socket;
  wire::UniqueFd host_side_socket;
  wire::UniqueFd stdout_read;
  wire::UniqueFd stderr_read;
  // When the host began to bring this worker up (waiting for its zygote included), reported as
  // spawned_at(); the adoption time where unset.
  std::optional<std::chrono::steady_clock::time_point> start_began;
};

enum class WorkerState {
  starting,  // spawned, waiting for hello
  ready,     // idle, can take a main-lane request
  busy,      // one main-lane request in flight
  stopping,  // asked to shut down, or being killed
  dead,      // reaped; on_exit has run
  // Hibernation (docs/hibernation.md): ready -> hibernating -> hibernated -> waking -> ready.
  // The pool's hibernator moves the GPU state; the worker only keeps the state, so that no
  // main-lane request reaches a process whose CUDA calls would block.
  hibernating,  // idle; its GPU state is being moved into its host RAM
  hibernated,   // idle, alive, holding no VRAM; the next call wakes it first
  waking,       // its GPU state is being restored
  // Sleep (docs/sleep.md): ready -> (the `sleep` request: busy) -> asleep -> (`wake`: busy) ->
  // ready. The worker itself moved its torch storages into its host RAM; it holds only its
  // context. asleep -> hibernating: the driver then moves the context too.
  asleep,  // idle, alive, its models in its host RAM; the next call wakes it first
};
const char* worker_state_name(WorkerState state);

// How a worker ended, for the pool's books.
struct ExitReport {
  proc::ExitStatus status;
  // True when the host asked for it (shutdown, reap); false for a crash, timeout, protocol
  // error or failed start, which count towards the environment's back-off.
  bool expected = false;
  std::string reason;
};

class Worker : public std::enable_shared_from_this<Worker> {
 public:
  using Clock = std::chrono::steady_clock;
  using Handler = std::function<void(Outcome)>;
  // Answers a worker's `ask` with {"ok": true, "value": V} or {"ok": false, "error": {"type",
  // "message"}}; loop thread only, once (later calls, or calls after the worker died, do nothing).
  using AskAnswer = std::function<void(nlohmann::ordered_json reply)>;
  // What the caller of a call does with the `ask` and `tell` frames the worker sends while that
  // call runs (docs/protocol.md, "Asks"): `ask` is the frame's body ({"op", "name", "value"});
  // for a `tell` the answer does nothing. Runs on the loop thread.
  using AskHandler = std::function<void(const nlohmann::ordered_json& ask, AskAnswer answer)>;

  struct Events {
    // Once: nullptr when hello arrived, else the reason the start failed.
    std::function<void(const Error*)> on_ready;
    // Once, after the process is reaped and every pending handler has run.
    std::function<void(const ExitReport&)> on_exit;
    // A request the worker makes of the host itself, mid-call (docs/protocol.md, "Worker
    // requests"): `reserve_vram` with an id, answered through `answer`; `reserve_done` without
    // one (`answer` then does nothing); a `tell` or an `ask` sent while no call is in flight,
    // which has no caller to go to (for an ask, `answer` takes its whole reply, {"ok": ...}; for
    // a tell it does nothing). `answer` may be called later, once, on the loop thread; after the
    // worker died it does nothing. Unset: such requests are refused as unsupported.
    std::function<void(const nlohmann::ordered_json& request,
                       std::function<void(nlohmann::ordered_json)> answer)>
        on_worker_request;
    // Runs, off the loop, the pass that ends what an ended worker left outside the host's tree
    // (proc::end_escaped walks /proc: 0.6 to 14 ms). Unset: the pass runs on the loop.
    std::function<void(std::function<void()> pass)> run_escape_pass;
    // Each line the worker writes to its stdout or stderr, on the loop thread, which it must
    // not hold up. The lines written before a main-lane reply come before that reply's handler
    // runs (the pipes are read once more as the reply arrives). Unset: each line goes to the
    // host's log ("[env:pid] line", printable_line's form).
    std::function<void(OutputLine line)> on_output;
  };

  // The ops a worker may send besides hello and reply.
  static bool is_worker_request(const std::string& op);

  // Spawns the worker. Throws Error(spawn_failed) when the interpreter cannot be started.
  static std::shared_ptr<Worker> launch(asio::io_context& io, WorkerOptions options, Events events);

  // Takes over a process that already runs the worker runtime (forked by a zygote): from here
  // on it is a worker like a spawned one, waiting for hello.
  static std::shared_ptr<Worker> adopt(asio::io_context& io, WorkerOptions options,
                                       AdoptedProcess process, Events events);

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker();

  // Main lane: valid only in state ready. `timeout` zero means none; past it the worker's
  // group is killed and the handler gets CallTimeout. `what` names the request in errors.
  // `buffers` ride with the message (a pickled value's memfds) and are closed here once sent;
  // descriptors that come with the reply reach the handler in Outcome::buffers().
  // `on_ask` serves the asks and tells the worker makes during this request; without one they
  // are answered as unsupported.
  void request(nlohmann::ordered_json message, std::chrono::milliseconds timeout, std::string what,
               Handler handler, std::vector<wire::UniqueFd> buffers = {},
               AskHandler on_ask = nullptr);

  // Asks the worker to stop the main-lane request in flight (the side lane's `interrupt`: the
  // runtime raises in the call's thread). If that request has not ended after `grace`, the
  // worker's group is killed and its handler gets Interrupted. No request in flight, or one
  // already interrupted: nothing happens.
  void interrupt(std::chrono::milliseconds grace);

  // Side lane (ping, memory), on its own socket: answered even while a call runs, and while
  // hibernated (the worker's Python threads run; its memory report then touches no CUDA).
  // Fails at once while starting, stopping or dead.
  void query(const std::string& op, Handler handler);

  // Asks the worker to exit after the request in flight; kills its group after `grace`.
  void shutdown(std::chrono::milliseconds grace);

  // Kills the worker's group now; pending handlers get `reason`.
  void kill(Error reason);

  // Hibernation and sleep steps, in order. Each moves one state on and returns true, or returns
  // false and changes nothing when the worker is not where the step starts (it died meanwhile).
  bool mark_asleep();       // ready -> asleep (its `sleep` request answered that it slept)
  bool mark_hibernating();  // ready or asleep -> hibernating
  bool mark_hibernated();   // hibernating -> hibernated
  bool mark_waking();       // hibernated -> waking
  // hibernating, waking or asleep -> ready (a lock refused, a restore done, a `wake` to send)
  bool mark_awake();

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] unsigned generation() const { return options_.generation; }
  [[nodiscard]] WorkerState state() const { return state_; }
  [[nodiscard]] const nlohmann::ordered_json& hello() const { return hello_; }
  [[nodiscard]] Clock::time_point spawned_at() const { return spawned_at_; }
  [[nodiscard]] std::optional<Clock::time_point> ready_at() const { return ready_at_; }
  [[nodiscard]] const std::string& env_name() const { return options_.env_name; }
  // "worker 'NAME' (pid P, generation G)", as every log line and error names it.
  [[nodiscard]] std::string identity() const;

 private:
  Worker(asio::io_context& io, WorkerOptions options, Events events);

  // One socket of the connection: the main lane's (hello, call, release, shutdown and their
  // replies) or the side lane's (queries, worker requests, answers). Two sockets, so that a
  // worker's main thread reads its calls itself and a query never waits behind a large frame.
  struct Lane {
    Lane(asio::io_context& io, const char* name) : socket(io), name(name) {}
    asio::posix::stream_descriptor socket;
    const char* name;
    wire::FrameReader reader;
    wire::SendQueue outgoing;
    bool waiting_to_write = false;
  };

  void start(wire::UniqueFd main_end, wire::UniqueFd side_end, wire::UniqueFd child_pidfd,
             wire::UniqueFd out, wire::UniqueFd err);
  // Where the lines of the worker's `stream` go: events_.on_output, else the host's log.
  [[nodiscard]] OutputPipe::OnLine output_handler(OutputLine::Stream stream) const;
  void read_frames(Lane& lane);
  void on_socket_closed(const Lane& lane);
  void handle_frame(Lane& lane, wire::Frame frame);
  void handle_hello(const nlohmann::ordered_json& body);
  void handle_reply(const nlohmann::ordered_json& body, std::vector<wire::UniqueFd> buffers = {});
  void handle_worker_request(const nlohmann::ordered_json& body);
  void handle_ask(const nlohmann::ordered_json& body, std::optional<std::int64_t> id);
  void send_answer(std::int64_t id, nlohmann::ordered_json reply);
  void send(Lane& lane, const nlohmann::ordered_json& body,
            std::vector<wire::UniqueFd> buffers = {});
  void flush(Lane& lane);
  void watch_exit();
  void on_process_exit();
  // Records why the worker must die (the first reason wins) and kills its tree and group.
  void condemn(Error reason);
  // Ends what this host's workers started and left outside the host's tree (proc::end_escaped).
  void end_escaped() const;
  bool move_state(std::initializer_list<WorkerState> from, WorkerState to);
  [[nodiscard]] std::string stderr_tail() const;
  Error death_error(const proc::ExitStatus& status) const;

  asio::io_context& io_;
  WorkerOptions options_;
  Events events_;
  WorkerState state_ = WorkerState::starting;
  pid_t pid_ = -1;
  Lane main_;
  Lane side_;
  asio::posix::stream_descriptor pidfd_;
  std::shared_ptr<OutputPipe> stdout_;
  std::shared_ptr<OutputPipe> stderr_;
  bool socket_failed_ = false;
  // Each bounds one wait on the process, in real time.
  struct Deadlines {
    explicit Deadlines(asio::io_context& io) : start(io), call(io), stop(io), interrupt(io) {}
    asio::steady_timer start;  // for hello
    asio::steady_timer call;   // for the main-lane request's reply
    asio::steady_timer stop;   // for the process's end once asked to end
    // Runs from an interrupt of the main-lane request until that request ends.
    asio::steady_timer interrupt;
  } deadlines_;
  nlohmann::ordered_json hello_;
  Clock::time_point spawned_at_;
  std::optional<Clock::time_point> ready_at_;
  std::int64_t next_id_ = 1;
  // The main-lane request in flight (id 0: none).
  struct MainRequest {
    std::int64_t id = 0;
    std::string what;
    Handler handler;
    AskHandler on_ask;
    // The main-lane request already interrupted (0: none).
    std::int64_t interrupted_id = 0;
  } request_;
  std::map<std::int64_t, Handler> side_handlers_;
  // Why the worker dies (the first reason wins), and whether the host asked for it.
  struct Ending {
    std::optional<Error> cause;
    bool expected = false;
  } ending_;
};

// An ask's answer that carries no value: {"ok": false, "error": {"type", "message"}}, as the
// worker raises it (isohost_worker.AskFailed; "Unsupported" when nobody serves the ask).
nlohmann::ordered_json failed_answer(const std::string& type, const std::string& message);

}  // namespace isohost::worker
