#pragma once

// The pool's event loop, run so that a warm call pays as few thread wake-ups as possible.
//
// A call from another thread wakes the loop (the post), the loop wakes the worker (its socket),
// the worker wakes the loop (the reply) and the loop wakes the caller (the future): four
// wake-ups, against two for a bare socketpair round trip. On a virtual machine a wake-up of an
// idle CPU costs several microseconds, the largest part of a warm call (isohost bench rtt). So
// after each burst of work the loop keeps polling, without sleeping, for `window`: the reply,
// and a caller's next request, usually arrive within it and find the loop awake. The cost is at
// most `window` of one core after each burst; a zero window sleeps at once, as io_context::run.

#include <asio/io_context.hpp>

#include <chrono>

namespace isohost::pool {

// Runs `io` until it is stopped or runs out of work.
void run_polling(asio::io_context& io, std::chrono::microseconds window);

}  // namespace isohost::pool
