#include "remote/paths.h"

#include <map>
#include <mutex>
#include <thread>

#include "remote/remote_file.h"

namespace qrepack::remote {
namespace {

struct Registry {
  std::mutex m;
  std::map<std::string, std::shared_ptr<Repo>> by_key;  ///< the URL given, and the base
};

Registry& registry() {
  static Registry* r = new Registry();  // lives as long as the process (pool threads use it)
  return *r;
}

std::string without_trailing_slash(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

bool is_remote_path(std::string_view p) {
  return p.rfind("hf://", 0) == 0 || p.rfind("https://", 0) == 0 || p.rfind("http://", 0) == 0;
}

Result<std::string> open_remote_directory(const std::string& url) {
  const std::string key = without_trailing_slash(url);
  {
    std::lock_guard lock(registry().m);
    if (const auto it = registry().by_key.find(key); it != registry().by_key.end()) {
      return it->second->base();
    }
  }
  QR_ASSIGN_OR_RETURN(repo, Repo::open(url));
  std::lock_guard lock(registry().m);
  const auto [it, added] = registry().by_key.emplace(repo->base(), repo);
  registry().by_key.emplace(key, it->second);
  return it->second->base();
}

std::optional<Located> locate(const std::string& path) {
  if (!is_remote_path(path)) return std::nullopt;
  std::lock_guard lock(registry().m);
  for (const auto& [key, repo] : registry().by_key) {
    if (path == key || path == key + "/") return Located{repo, ""};
    if (path.size() > key.size() + 1 && path.compare(0, key.size(), key) == 0 &&
        path[key.size()] == '/') {
      return Located{repo, path.substr(key.size() + 1)};
    }
  }
  return std::nullopt;
}

std::vector<std::shared_ptr<Repo>> opened_repos() {
  std::lock_guard lock(registry().m);
  std::vector<std::shared_ptr<Repo>> out;
  for (const auto& [key, repo] : registry().by_key) {
    if (key == repo->base()) out.push_back(repo);
  }
  return out;
}

Status verify_opened_files(bool only_data_read) {
  std::vector<std::shared_ptr<RemoteFile>> files;
  for (const auto& repo : opened_repos()) {
    for (auto& f : repo->opened()) {
      if (!only_data_read || f->data_read()) files.push_back(std::move(f));
    }
  }
  // Each file streams on the shared pool; finishing them one after another keeps memory to
  // one window while the pool keeps every connection busy.
  for (const auto& f : files) {
    QR_TRY(f->finish());
    f->trim(0);
  }
  return ok_status();
}

Result<std::string> published_sha256(const std::string& path) {
  const auto loc = locate(path);
  if (!loc || loc->name.empty()) {
    return Error(ErrorKind::kInputNotFound, "no such remote file").in_file(path);
  }
  QR_ASSIGN_OR_RETURN(info, loc->repo->file(loc->name));
  if (!info) return Error(ErrorKind::kInputNotFound, "no such remote file").in_file(path);
  if (info->sha256.empty()) {
    return Error(ErrorKind::kRemoteProtocol, "the server publishes no SHA-256 for this file")
        .in_file(path)
        .with_rule("remote.no_hash");
  }
  return info->sha256;
}

bool read_files_verified() {
  for (const auto& repo : opened_repos()) {
    for (const auto& f : repo->opened()) {
      if (f->data_read() && !f->stats().verified) return false;
    }
  }
  return true;
}

nlohmann::ordered_json remote_source_record(const std::string& directory) {
  const auto loc = locate(directory);
  if (!loc) return nullptr;
  const Repo& r = *loc->repo;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& [name, info] : r.small_files_read()) {
    files.push_back(
        {{"name", name}, {"bytes", info.size}, {"sha256", info.sha256}, {"verified", true}});
  }
  for (const auto& f : r.opened()) {
    const auto slash = f->name().find_last_of('/');
    files.push_back({{"name", f->name().substr(slash + 1)},
                     {"bytes", f->size()},
                     {"sha256", f->sha256()},
                     {"verified", f->stats().verified}});
  }
  nlohmann::ordered_json rec = {{"url", r.base()}};
  if (!r.commit().empty()) {
    rec["revision"] = r.revision();
    rec["commit"] = r.commit();
  }
  rec["files"] = std::move(files);
  return rec;
}

TransferTotals transfer_totals() {
  TransferTotals t;
  for (const auto& repo : opened_repos()) {
    const HttpCounters& c = repo->http().counters();
    t.bytes += c.bytes.load();
    t.requests += c.requests.load();
    t.retries += c.retries.load();
    for (const auto& f : repo->opened()) t.refetched_chunks += f->stats().chunks_refetched;
  }
  return t;
}

}  // namespace qrepack::remote
