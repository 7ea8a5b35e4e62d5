#include "wire/cache_demote.hpp"

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace isohost::wire {

namespace {

constexpr std::size_t kLine = 64;

bool cpu_has_cldemote() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  constexpr unsigned kCldemoteBit = 1U << 25U;  // CPUID.(EAX=7,ECX=0):ECX[25]
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & kCldemoteBit) != 0;
#else
  return false;
#endif
}

}  // namespace

bool cache_demote_enabled() {
  static const bool enabled = [] {
    const char* chosen = std::getenv("ISOHOST_COPY_DEMOTE");
    return cpu_has_cldemote() && (chosen == nullptr || std::string_view(chosen) != "0");
  }();
  return enabled;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("cldemote"))) void demote_to_shared_cache(const std::byte* begin,
                                                                std::size_t size) {
  for (std::size_t offset = 0; offset < size; offset += kLine) {
    __builtin_ia32_cldemote(begin + offset);
  }
}
#else
void demote_to_shared_cache(const std::byte* /*begin*/, std::size_t /*size*/) {}
#endif

}  // namespace isohost::wire
