#include "web/routes.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace isohost::web {
namespace {

// Answers every method but GET and HEAD with 405 before any route sees it.
void refuse_all_but_get(httplib::Server& server) {
  server.set_pre_routing_handler([](const httplib::Request& request, httplib::Response& response) {
    if (request.method == "GET" || request.method == "HEAD") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    response.status = 405;
    response.set_header("Allow", "GET, HEAD");
    response.set_content(
        "only GET and HEAD: nothing on this port changes the pool (the control socket does)\n",
        "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
  // A request body is never read by any route; keep what a client may send small.
  server.set_payload_max_length(64 << 10);
}

const char* content_type_of(const std::filesystem::path& file) {
  const auto ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  return nullptr;
}

}  // namespace

std::map<std::string, Asset> load_assets(const std::filesystem::path& dir) {
  std::map<std::string, Asset> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) continue;
    const char* type = content_type_of(entry.path());
    if (type == nullptr) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream body;
    body << in.rdbuf();
    const auto name = entry.path().filename().string();
    const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
    });
    if (!plain) continue;
    out["/" + name] = {type, body.str()};
    if (name == "index.html") out["/"] = out["/" + name];
  }
  if (ec || !out.contains("/")) {
    throw std::runtime_error("the page's files are missing: no index.html in " + dir.string() +
                             (ec ? " (" + ec.message() + ")" : ""));
  }
  return out;
}

void add_metrics_routes(httplib::Server& server, const HostCollectable& host) {
  refuse_all_but_get(server);
  server.Get("/metrics", [&host](const httplib::Request&, httplib::Response& response) {
    try {
      const auto families = host.Collect();
      response.set_content(prometheus::TextSerializer().Serialize(families),
                           "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      response.status = 503;
      response.set_content(std::string("no metrics: ") + e.what() + "\n",
                           "text/plain; charset=utf-8");
    }
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("isohost metrics: GET /metrics\n", "text/plain; charset=utf-8");
  });
}

void add_page_routes(httplib::Server& server, std::map<std::string, Asset> assets,
                     const StatusHistory& history) {
  refuse_all_but_get(server);
  server.set_default_headers({
      // Nothing from anywhere else: no CDN, no third-party script, no network.
      {"Content-Security-Policy",
       "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
  });
  server.Get("/api/status",
             [&history](const httplib::Request& request, httplib::Response& response) {
               double since = 0;
               if (request.has_param("since"))
                 since = std::strtod(request.get_param_value("since").c_str(), nullptr);
               response.set_header("Cache-Control", "no-store");
               response.set_content(history.to_json(since).dump(), "application/json");
             });
  for (auto& [path, asset] : assets) {
    // httplib's patterns are regular expressions; asset names are letters, digits, '-', '_'
    // and '.' (load_assets), so escaping the dots makes each pattern match its name only.
    std::string pattern;
    for (char c : path) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
    // `asset = asset`: clang before 16 (clang-tidy's on Debian 12) cannot capture a binding.
    server.Get(pattern, [asset = asset](const httplib::Request&, httplib::Response& response) {
      response.set_header("Cache-Control", "no-cache");
      response.set_content(asset.body, asset.content_type);
    });
  }
}

}  // namespace isohost::web
