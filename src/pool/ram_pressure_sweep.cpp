#include "pool/ram_pressure_sweep.hpp"

#include <spdlog/spdlog.h>

namespace isohost::pool {

void RamPressureSweep::arm() {
  timer_.expires_after(interval_);
  timer_.async_wait([this](const asio::error_code& ec) {
    if (!ec && !stopped_) sweep();
  });
}

void RamPressureSweep::sweep() {
  read_([weak = std::weak_ptr<RamPressureSweep*>(self_)](PressureReading reading) {
    const auto alive = weak.lock();
    if (!alive) return;
    RamPressureSweep& self = **alive;
    if (self.stopped_) return;
    self.arm();
    ++self.sweeps_;
    if (!reading.system) {
      spdlog::warn("RAM pressure sweep skipped: {}", reading.error);
      return;
    }
    self.relieve_(reading);
  });
}

}  // namespace isohost::pool
