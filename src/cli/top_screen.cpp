#include "cli/top_screen.hpp"

#include <algorithm>
#include <clocale>
#include <cstdlib>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "cli/top_frame.hpp"

// Last: curses.h defines macros (timeout, erase, clear, OK) that must not meet other headers.
#include <curses.h>

namespace isohost::cli::top {
namespace {

constexpr int kKeyWaitMs = 50;   // how long getch waits: the pace at which answers are picked up
constexpr int kFooterLines = 2;  // the status message and the keys

// Runs `work` on a thread of its own and hands back its future. The thread is detached: a
// request the host never answers must not keep `q` from quitting, and a std::promise's future,
// unlike std::async's, does not wait for it when dropped.
template <typename T>
std::future<T> in_background(std::function<T()> work) {
  std::promise<T> promise;
  auto future = promise.get_future();
  std::thread([promise = std::move(promise), work = std::move(work)]() mutable {
    try {
      promise.set_value(work());
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
  }).detach();
  return future;
}

template <typename T>
bool finished(const std::future<T>& future) {
  return future.valid() && future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Puts the terminal into curses mode for as long as it lives, and back however the screen ends.
class CursesSession {
 public:
  CursesSession() {
    std::setlocale(LC_ALL, "");  // names in UTF-8 are drawn as characters, not bytes
    // newterm, not initscr: initscr ends the program itself on a terminal it does not know.
    screen_ = newterm(nullptr, stdout, stdin);
    if (screen_ == nullptr) {
      const char* term = std::getenv("TERM");
      throw std::runtime_error(
          fmt::format("cannot draw on this terminal (TERM={}); --once prints a plain frame",
                      term != nullptr ? term : "unset"));
    }
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    wtimeout(stdscr, kKeyWaitMs);
    init_colours();
  }
  ~CursesSession() {
    endwin();
    delscreen(screen_);
  }
  CursesSession(const CursesSession&) = delete;
  CursesSession& operator=(const CursesSession&) = delete;

  // The attributes a span of `style` is drawn with.
  chtype attributes(Style style) const {
    switch (style) {
      case Style::normal:
        return A_NORMAL;
      case Style::title:
        return A_BOLD;
      case Style::dim:
      case Style::free:
        return A_DIM;
      default:
        break;
    }
    const auto pair = static_cast<short>(static_cast<int>(style));
    return colours_ ? COLOR_PAIR(pair) | (style == Style::warning ? A_BOLD : A_NORMAL) : A_BOLD;
  }

 private:
  // One colour pair per coloured style, numbered by the style itself.
  void init_colours() {
    if (!has_colors()) return;
    start_color();
    const short background = use_default_colors() == OK ? -1 : COLOR_BLACK;
    const std::pair<Style, short> colours[] = {
        {Style::warning, COLOR_YELLOW},  {Style::fixed, COLOR_MAGENTA},
        {Style::held, COLOR_BLUE},       {Style::reclaimable, COLOR_GREEN},
        {Style::hibernated, COLOR_CYAN}, {Style::foreign, COLOR_RED},
        {Style::other, COLOR_WHITE},     {Style::ram, COLOR_GREEN},
    };
    for (const auto& [style, colour] : colours) {
      init_pair(static_cast<short>(static_cast<int>(style)), colour, background);
    }
    colours_ = true;
  }

  SCREEN* screen_ = nullptr;
  bool colours_ = false;
};

// What the screen keeps between redraws.
struct View {
  std::optional<Sample> previous;
  std::optional<Sample> current;
  std::string error;    // why the last metrics request failed; empty when it worked
  std::string message;  // what the last key's action came to
  std::size_t selected = 0;
  std::size_t scroll = 0;  // the first row shown when they do not all fit
  // The selected row's identity, so the selection follows it when rows come and go.
  std::string selected_env;
  bool selected_zygote = false;
};

void draw_line(const CursesSession& session, int y, const Line& line) {
  move(y, 0);
  int left = COLS;
  for (const auto& span : line) {
    if (left <= 0) break;
    attron(session.attributes(span.style));
    addnstr(span.text.c_str(), static_cast<int>(span.text.size()));
    attroff(session.attributes(span.style));
    left -= static_cast<int>(span.text.size());
  }
}

void draw_text(int y, const std::string& text, chtype attributes) {
  attron(attributes);
  mvaddnstr(y, 0, text.c_str(), COLS);
  attroff(attributes);
}

// Finds the selected row again by its environment after the rows changed.
void follow_selection(View& view, const Frame& frame) {
  for (std::size_t i = 0; i < frame.rows.size(); ++i) {
    if (frame.rows[i].env == view.selected_env && frame.rows[i].zygote == view.selected_zygote) {
      view.selected = i;
      return;
    }
  }
  view.selected = frame.rows.empty() ? 0 : std::min(view.selected, frame.rows.size() - 1);
  if (!frame.rows.empty()) {
    view.selected_env = frame.rows[view.selected].env;
    view.selected_zygote = frame.rows[view.selected].zygote;
  }
}

void draw_rows(const CursesSession& session, View& view, const Frame& frame, int top, int bottom) {
  if (frame.rows.empty()) {
    draw_text(top, "(no workers running)", A_DIM);
    return;
  }
  const auto visible = static_cast<std::size_t>(std::max(1, bottom - top));
  if (view.selected < view.scroll) view.scroll = view.selected;
  if (view.selected >= view.scroll + visible) view.scroll = view.selected + 1 - visible;
  for (std::size_t i = view.scroll; i < frame.rows.size() && top < bottom; ++i, ++top) {
    draw_line(session, top, frame.rows[i].line);
    if (i == view.selected) mvchgat(top, 0, -1, A_REVERSE, 0, nullptr);
  }
}

void draw(const CursesSession& session, View& view, const ScreenOptions& options) {
  erase();
  int y = 0;
  if (!view.error.empty()) {
    const double every = std::chrono::duration<double>(options.interval).count();
    draw_text(y++, fmt::format("{}; trying again every {:g}s", view.error, every),
              session.attributes(Style::warning));
  }
  const int bottom = LINES - kFooterLines;
  if (!view.current) {
    if (view.error.empty()) draw_text(y, "waiting for the host's first answer...", A_DIM);
  } else {
    const auto* previous = view.previous ? &*view.previous : nullptr;
    const auto frame = build_frame(previous, *view.current, {.width = COLS});
    follow_selection(view, frame);
    for (const auto& line : frame.header) {
      if (y < bottom) draw_line(session, y++, line);
    }
    ++y;
    if (y < bottom) draw_line(session, y++, frame.columns);
    if (y < bottom) draw_rows(session, view, frame, y, bottom);
  }
  draw_text(LINES - 2, view.message, A_NORMAL);
  draw_text(LINES - 1,
            "up/down or j/k select   r release   s sleep   h hibernate   w wake   x reap   q quit",
            A_DIM);
  refresh();
}

// The environment's action for a key, or nullptr.
const char* action_for(int key) {
  switch (key) {
    case 'r':
      return "release";
    case 's':
      return "sleep";
    case 'h':
      return "hibernate";
    case 'w':
      return "wake";
    case 'x':
      return "reap";
    default:
      return nullptr;
  }
}

}  // namespace

int run_screen(const HostLink& link, const ScreenOptions& options) {
  CursesSession session;
  View view;
  std::future<Sample> fetch;
  std::future<std::string> action;
  std::string action_name;
  auto next_fetch = Clock::now();
  for (;;) {
    if (!fetch.valid() && Clock::now() >= next_fetch) {
      next_fetch = Clock::now() + options.interval;
      fetch = in_background<Sample>([metrics = link.metrics] {
        auto value = metrics();
        return Sample{.metrics = std::move(value), .taken_at = Clock::now()};
      });
    }
    if (finished(fetch)) {
      try {
        auto sample = fetch.get();
        view.previous = std::move(view.current);
        view.current = std::move(sample);
        view.error.clear();
      } catch (...) {
        view.error = message_of(std::current_exception());
      }
    }
    if (finished(action)) {
      try {
        view.message = action.get();
      } catch (...) {
        view.message = action_name + ": " + message_of(std::current_exception());
      }
      next_fetch = Clock::now();  // show what it did now, not at the next tick
    }
    draw(session, view, options);
    const int key = getch();
    if (key == 'q' || key == 'Q') return 0;
    if (key == KEY_UP || key == 'k') {
      if (view.selected > 0) --view.selected;
      view.selected_env.clear();  // follow_selection takes the row now at the index
    } else if (key == KEY_DOWN || key == 'j') {
      ++view.selected;
      view.selected_env.clear();
    } else if (const char* op = action_for(key)) {
      if (action.valid()) {
        view.message = "still waiting for " + action_name + " to answer";
      } else if (!view.current || view.selected_env.empty()) {
        view.message = "no row selected";
      } else {
        action_name = fmt::format("{} '{}'", op, view.selected_env);
        view.message = action_name + "...";
        action = in_background<std::string>([act = link.act, op = std::string(op),
                                             env = view.selected_env] { return act(op, env); });
      }
    }
    // KEY_RESIZE needs nothing more: ncurses has updated LINES and COLS, and the next draw
    // builds the frame for them.
  }
}

}  // namespace isohost::cli::top
