#include "probe/proc_status.hpp"

#include "probe/field_line.hpp"
#include "probe/proc_file.hpp"

namespace isohost::probe {

RssCounters parse_proc_status(std::string_view text) {
  RssCounters counters;
  for_each_line(text, [&counters](std::string_view line) {
    const FieldLine field = parse_field_line(line);
    if (field.kind != FieldLine::Kind::size) return;
    if (field.key == "VmRSS") {
      counters.rss = field.bytes;
      counters.measured = true;
    } else if (field.key == "RssAnon") {
      counters.rss_anon = field.bytes;
    } else if (field.key == "RssFile") {
      counters.rss_file = field.bytes;
    } else if (field.key == "RssShmem") {
      counters.rss_shmem = field.bytes;
    } else if (field.key == "VmSwap") {
      counters.swap = field.bytes;
    }
  });
  return counters;
}

RssCounters read_rss_counters(pid_t pid) {
  const RssCounters counters = parse_proc_status(read_proc_file(pid, "status"));
  if (!counters.measured) throw_process_gone(pid);
  return counters;
}

}  // namespace isohost::probe
