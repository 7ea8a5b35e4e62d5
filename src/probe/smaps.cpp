#include "probe/smaps.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include "probe/field_line.hpp"
#include "probe/proc_file.hpp"

namespace isohost::probe {
namespace {

// One mapping's fields as the kernel printed them, before the PSS split is settled.
struct MappingFields {
  MemoryFootprint values;
  bool has_pss_anon = false;
  bool has_pss_file = false;
};

void apply_field(std::string_view key, uint64_t bytes, MappingFields& fields) {
  MemoryFootprint& v = fields.values;
  if (key == "Rss") {
    v.rss += bytes;
    v.measured = true;
  } else if (key == "Pss") {
    v.pss += bytes;
  } else if (key == "Pss_Anon") {
    v.pss_anon += bytes;
    fields.has_pss_anon = true;
  } else if (key == "Pss_File") {
    v.pss_file += bytes;
    fields.has_pss_file = true;
  } else if (key == "Pss_Shmem") {
    v.pss_shmem += bytes;
  } else if (key == "Shared_Clean") {
    v.shared_clean += bytes;
  } else if (key == "Shared_Dirty") {
    v.shared_dirty += bytes;
  } else if (key == "Private_Clean") {
    v.private_clean += bytes;
  } else if (key == "Private_Dirty") {
    v.private_dirty += bytes;
  } else if (key == "Anonymous") {
    v.anonymous += bytes;
  } else if (key == "Swap") {
    v.swap += bytes;
  } else if (key == "SwapPss") {
    v.swap_pss += bytes;
  } else if (key == "LazyFree") {
    v.lazy_free += bytes;
  }
}

bool has_split(const MappingFields& fields) { return fields.has_pss_anon && fields.has_pss_file; }

// The path of an smaps header "start-end perms offset dev inode   path": what follows the
// fifth field, possibly with spaces (" (deleted)"); empty for anonymous mappings.
std::string_view mapping_path(std::string_view header) {
  size_t pos = 0;
  for (int field = 0; field < 5; ++field) {
    pos = header.find_first_not_of(' ', pos);
    if (pos == std::string_view::npos) return {};
    pos = header.find(' ', pos);
    if (pos == std::string_view::npos) return {};
  }
  pos = header.find_first_not_of(' ', pos);
  return pos == std::string_view::npos ? std::string_view{} : header.substr(pos);
}

bool names_shared_memory(std::string_view path) {
  for (std::string_view prefix : {"/memfd:", "/dev/zero", "/SYSV", "/dev/shm/", "[anon_shmem:"}) {
    if (path.starts_with(prefix)) return true;
  }
  return false;
}

MemoryFootprint settle_rollup(const MappingFields& fields) {
  MemoryFootprint v = fields.values;
  v.has_pss_split = has_split(fields);
  if (!v.has_pss_split) {
    v.pss_anon = std::min(v.anonymous, v.pss);
    v.pss_file = v.pss - v.pss_anon;
    v.pss_shmem = 0;
  }
  return v;
}

MemoryFootprint settle_mapping(const MappingFields& fields, std::string_view path) {
  MemoryFootprint v = fields.values;
  v.has_pss_split = has_split(fields);
  if (!v.has_pss_split) {
    v.pss_anon = std::min(v.anonymous, v.pss);
    const uint64_t rest = v.pss - v.pss_anon;
    v.pss_file = names_shared_memory(path) ? 0 : rest;
    v.pss_shmem = names_shared_memory(path) ? rest : 0;
  }
  return v;
}

void add_to(MemoryFootprint& total, const MemoryFootprint& part) {
  total.rss += part.rss;
  total.pss += part.pss;
  total.pss_anon += part.pss_anon;
  total.pss_file += part.pss_file;
  total.pss_shmem += part.pss_shmem;
  total.shared_clean += part.shared_clean;
  total.shared_dirty += part.shared_dirty;
  total.private_clean += part.private_clean;
  total.private_dirty += part.private_dirty;
  total.anonymous += part.anonymous;
  total.swap += part.swap;
  total.swap_pss += part.swap_pss;
  total.lazy_free += part.lazy_free;
  total.measured = total.measured || part.measured;
}

MemoryFootprint require_measured(pid_t pid, const MemoryFootprint& footprint) {
  if (!footprint.measured) throw_process_gone(pid);
  return footprint;
}

}  // namespace

MemoryFootprint moved_to_rss(const MemoryFootprint& exact, uint64_t rss_now) {
  MemoryFootprint out = exact;
  const auto move = [&](uint64_t& figure) {
    figure = rss_now >= exact.rss ? figure + (rss_now - exact.rss)
                                  : figure - std::min(figure, exact.rss - rss_now);
  };
  for (uint64_t* figure : {&out.rss, &out.pss, &out.pss_anon, &out.anonymous, &out.private_dirty}) {
    move(*figure);
  }
  return out;
}

MemoryFootprint parse_smaps_rollup(std::string_view text) {
  MappingFields fields;
  for_each_line(text, [&](std::string_view line) {
    const FieldLine field = parse_field_line(line);
    if (field.kind == FieldLine::Kind::size) apply_field(field.key, field.bytes, fields);
  });
  return settle_rollup(fields);
}

MemoryFootprint parse_smaps(std::string_view text) {
  MemoryFootprint total;
  bool every_mapping_split = true;
  bool any_mapping = false;
  MappingFields fields;
  std::string_view path;
  auto close_mapping = [&] {
    if (fields.values.measured) {
      add_to(total, settle_mapping(fields, path));
      every_mapping_split = every_mapping_split && has_split(fields);
      any_mapping = true;
    }
    fields = MappingFields{};
  };
  for_each_line(text, [&](std::string_view line) {
    const FieldLine field = parse_field_line(line);
    if (field.kind == FieldLine::Kind::size) {
      apply_field(field.key, field.bytes, fields);
    } else if (field.kind == FieldLine::Kind::not_a_field && !line.empty()) {
      close_mapping();
      path = mapping_path(line);
    }
  });
  close_mapping();
  total.has_pss_split = any_mapping && every_mapping_split;
  return total;
}

MemoryFootprint read_footprint(pid_t pid) {
  const std::string rollup_path = proc_path(pid, "smaps_rollup");
  const FileRead rollup = read_file(rollup_path.c_str());
  if (rollup.error == 0) return require_measured(pid, parse_smaps_rollup(rollup.text));
  if (rollup.error != ENOENT) throw_read_failure(pid, rollup_path, rollup.error);
  // ENOENT: a kernel before 4.14, or a process that is gone, which reading smaps then tells.
  return require_measured(pid, parse_smaps(read_proc_file(pid, "smaps")));
}

}  // namespace isohost::probe
