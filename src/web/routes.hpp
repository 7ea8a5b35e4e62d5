#pragma once

// What isohost-web answers (docs/live-view.md). Read-only: GET and HEAD only, anything else
// 405, and every figure comes from the control socket, so nothing here can change the pool.
//
//   metrics listener: /metrics   Prometheus text format, one control request per scrape;
//                                503 with the reason when the host does not answer.
//   page listener:    /          web/index.html, and the other files of web/ by name
//                     /api/status  StatusHistory::to_json (?since=T: only newer points)

#include <httplib.h>

#include <filesystem>
#include <map>
#include <string>

#include "web/metric_families.hpp"
#include "web/status_history.hpp"

namespace isohost::web {

// A file of the page, read once at start.
struct Asset {
  std::string content_type;
  std::string body;
};

// The .html, .js, .css, .svg and .png files directly in `dir`, by "/name" ("/" for
// index.html). Throws std::runtime_error when `dir` has no index.html.
std::map<std::string, Asset> load_assets(const std::filesystem::path& dir);

void add_metrics_routes(httplib::Server& server, const HostCollectable& host);
void add_page_routes(httplib::Server& server, std::map<std::string, Asset> assets,
                     const StatusHistory& history);

}  // namespace isohost::web
