#include "cli/web_sidecar.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <asio/post.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "proc/process_group.hpp"
#include "proc/spawn.hpp"
#include "worker/output_pipe.hpp"

extern char** environ;

namespace isohost::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Startup stderr kept for the error message; isohost-web says why in a line or two.
constexpr std::size_t kMaxStartErrorBytes = 4096;

std::pair<wire::UniqueFd, wire::UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw WebSidecarError(std::string("cannot start isohost-web: pipe: ") + std::strerror(errno));
  }
  return {wire::UniqueFd(fds[0]), wire::UniqueFd(fds[1])};
}

std::vector<std::string> inherited_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

// Reads what `fd` has now; false at end of file.
bool read_available(int fd, std::string& into, std::size_t limit) {
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const auto room = limit > into.size() ? limit - into.size() : 0;
  into.append(buffer, std::min(room, static_cast<std::size_t>(n)));
  return true;
}

// Whether the child behind `pidfd` ends within `limit`.
bool ends_within(int pidfd, std::chrono::milliseconds limit) {
  pollfd p{pidfd, POLLIN, 0};
  const auto deadline = Clock::now() + limit;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (auto& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

}  // namespace

std::string default_web_program() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "isohost-web" : (exe.parent_path() / "isohost-web").string();
}

WebSidecar::WebSidecar(asio::io_context& io, WebSidecarOptions options)
    : io_(io), options_(std::move(options)) {
  if (options_.program.empty()) options_.program = default_web_program();
  std::vector<std::string> argv{options_.program, "--socket", options_.socket};
  if (options_.metrics) argv.insert(argv.end(), {"--metrics", options_.metrics->to_string()});
  if (options_.http) argv.insert(argv.end(), {"--http", options_.http->to_string()});
  auto [out_read, out_write] = make_pipe();
  auto [err_read, err_write] = make_pipe();
  wire::UniqueFd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  proc::Child child;
  try {
    child = proc::spawn({.program = options_.program,
                         .argv = argv,
                         .env = inherited_environment(),
                         .fds = {{null_in.get(), 0}, {out_write.get(), 1}, {err_write.get(), 2}},
                         .new_process_group = true,
                         .death_signal = SIGKILL});
  } catch (const proc::SpawnError& e) {
    throw WebSidecarError(
        std::string("cannot start isohost-web, the live view's server: ") + e.what() +
        (e.error_number() == ENOENT
             ? " (it is built beside isohost: cmake --build BUILD --target isohost-web)"
             : ""));
  }
  pid_ = child.pid;
  pidfd_ = std::move(child.pidfd);
  out_write.reset();
  err_write.reset();

  // Its stdout until `ready`, its stderr for the reason should it stop instead.
  std::string out_text;
  std::string err_text;
  bool ready = false;
  bool out_open = true;
  bool err_open = true;
  const auto deadline = Clock::now() + options_.ready_timeout;
  while (!ready && out_open) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p[2] = {{out_read.get(), POLLIN, 0}, {err_open ? err_read.get() : -1, POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    if (p[1].revents != 0) err_open = read_available(err_read.get(), err_text, kMaxStartErrorBytes);
    if (p[0].revents == 0) continue;
    out_open = read_available(out_read.get(), out_text, 1 << 16);
    std::size_t newline;
    while (!ready && (newline = out_text.find('\n')) != std::string::npos) {
      const auto line = out_text.substr(0, newline);
      out_text.erase(0, newline + 1);
      std::istringstream words(line);
      std::string verb;
      WebListener l;
      words >> verb >> l.name >> l.url;
      if (verb == "listening" && !l.url.empty()) listeners_.push_back(l);
      ready = line == "ready";
    }
  }
  if (ready) {
    // Anything it said on stderr before `ready` goes to the log now; the rest through watch().
    std::istringstream lines(err_text);
    for (std::string line; std::getline(lines, line);) spdlog::warn("{}", line);
    stderr_ = std::move(err_read);
    return;
  }
  const bool timed_out = out_open;
  if (timed_out || !ends_within(pidfd_.get(), options_.stop_grace)) {
    proc::signal_group(pid_, SIGKILL);
  }
  // It has ended (or been killed); its last words may still be in the pipe.
  while (err_open && read_available(err_read.get(), err_text, kMaxStartErrorBytes)) {
  }
  const auto status = proc::reap(pidfd_.get());
  reaped_ = true;
  std::string message = timed_out ? "isohost-web did not say ready within " +
                                        std::to_string(options_.ready_timeout.count()) + " ms"
                                  : "isohost-web " + status.describe() + " before it was ready";
  if (!err_text.empty()) message += ": " + trimmed(err_text);
  throw WebSidecarError(message);
}

WebSidecar::~WebSidecar() {
  try {
    stop();
  } catch (const std::exception& e) {
    spdlog::error("stopping isohost-web: {}", e.what());
  }
}

void WebSidecar::watch() {
  asio::post(io_, [this] {
    if (unwatched_ || reaped_) return;
    death_ = std::make_unique<asio::posix::stream_descriptor>(
        io_, ::fcntl(pidfd_.get(), F_DUPFD_CLOEXEC, 0));
    death_->async_wait(
        asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& ec) {
          if (ec) return;
          const auto status = proc::try_reap(pidfd_.get());
          if (!status) return;
          reaped_ = true;
          if (relay_) relay_->drain();
          spdlog::error(
              "isohost-web (pid {}), the live view's server, {}: /metrics and the page are gone; "
              "the pool serves on",
              pid_, status->describe());
        });
    relay_ =
        std::make_shared<worker::OutputPipe>(io_, std::move(stderr_), [](const std::string& line) {
          if (!line.empty()) spdlog::warn("{}", worker::printable_line(line));
        });
    relay_->start();
  });
}

void WebSidecar::unwatch() {
  unwatched_ = true;
  if (death_) {
    asio::error_code ignored;
    death_->cancel(ignored);
    death_->close(ignored);
  }
  if (relay_) relay_->close();
}

void WebSidecar::stop() {
  if (!pidfd_ || reaped_) return;
  proc::signal_group(pid_, SIGTERM);
  if (!ends_within(pidfd_.get(), options_.stop_grace)) proc::signal_group(pid_, SIGKILL);
  const auto status = proc::reap(pidfd_.get());
  reaped_ = true;
  spdlog::info("isohost-web (pid {}) stopped: {}", pid_, status.describe());
}

}  // namespace isohost::cli
