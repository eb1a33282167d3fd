#include "test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/exec/weight_reader.h"

namespace qrepack::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "qrepack-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("write failed: " + path.string());
}

void write_raw_safetensors(const std::filesystem::path& path,
                           const std::vector<RawTensor>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  std::vector<std::uint8_t> data;
  for (const RawTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header += ' ';
  std::vector<std::uint8_t> file(8);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<std::uint8_t>(n >> (8 * i));
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  write_bytes(path, file);
}

std::vector<float> decode_weight(const std::string& dir, const std::string& name,
                                 const std::string& encoding) {
  auto ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (!ck.ok()) return {};
  auto rec = recognize_weights(*ck, nullptr);
  EXPECT_TRUE(rec.ok()) << rec.error().message();
  if (!rec.ok()) return {};
  for (const LogicalWeight& w : rec->weights) {
    if (w.name != name) continue;
    if (!encoding.empty()) EXPECT_EQ(source_encoding_name(w), encoding) << name;
    WeightReader r(*ck, 128, 128);
    const Status opened = r.open(w);
    EXPECT_TRUE(opened.ok()) << opened.error().message();
    std::vector<float> out(r.rows() * r.cols());
    const Status st = r.read_rows(0, r.rows(), out);
    EXPECT_TRUE(st.ok()) << st.error().message();
    return out;
  }
  ADD_FAILURE() << name << " not recognised";
  return {};
}

std::string recognition_error(const std::string& dir) {
  auto ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.ok());
  if (!ck.ok()) return ck.error().message();
  auto rec = recognize_weights(*ck, nullptr);
  return rec.ok() ? std::string() : rec.error().message();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  write_bytes(path, std::vector<std::uint8_t>(text.begin(), text.end()));
}

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path.string());
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), {});
}

nlohmann::json read_json(const std::filesystem::path& path) {
  const auto b = read_bytes(path);
  return nlohmann::json::parse(b.begin(), b.end());
}

std::string joined_ids(const nlohmann::json& ids) {
  std::string s;
  for (const auto& v : ids) s += (s.empty() ? "" : ",") + std::to_string(v.get<int>());
  return s;
}

std::vector<std::string> list_dir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::uint8_t> tensor_bytes(const Checkpoint& ck, std::string_view name) {
  const auto t = ck.find(name);
  EXPECT_TRUE(t.has_value()) << name;
  if (!t) return {};
  std::vector<std::uint8_t> b(t->entry->byte_size());
  EXPECT_TRUE(ck.read(*t, 0, b).ok()) << name;
  return b;
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string python_command(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 " +
                    shell_quote(std::string(QREPACK_SOURCE_DIR) + "/tests/python/" + script);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd;
}

/// "pid command line" of each live (not zombie) process whose environment holds `needle`.
std::vector<std::string> processes_with_env(const std::string& needle) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    std::string env = slurp(e.path() / "environ");
    std::string stat = slurp(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || stat.compare(close, 3, ") Z") == 0) continue;
    bool tagged = false;
    for (std::size_t at = 0; at < env.size();) {
      const std::size_t end = std::min(env.find('\0', at), env.size());
      if (env.compare(at, end - at, needle) == 0) tagged = true;
      at = end + 1;
    }
    if (!tagged) continue;
    std::string cmd = slurp(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    found.push_back(pid + " " + cmd);
  }
  return found;
}

}  // namespace

int run_test_python(const std::string& script, const std::vector<std::string>& args) {
  return std::system(python_command(script, args).c_str());
}

std::string Leftovers::describe() const {
  std::string s;
  for (const auto& p : processes) s += "left running: " + p + "\n";
  for (const auto& f : files) s += "left in TMPDIR: " + f + "\n";
  return s;
}

IsolatedRun run_isolated_python(const std::string& script, const std::vector<std::string>& args) {
  TempDir tmp;
  const std::string tag = "QREPACK_LEFTOVER_TAG=" + tmp.path().filename().string();
  const std::string cmd =
      tag + " TMPDIR=" + shell_quote(tmp.path().string()) + " " + python_command(script, args);
  IsolatedRun r{std::system(cmd.c_str()), {}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(r.left.processes = processes_with_env(tag)).empty() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const auto& p : r.left.processes) {
    ::kill(static_cast<pid_t>(std::stol(p.substr(0, p.find(' ')))), SIGKILL);
  }
  r.left.files = list_dir(tmp.path());
  return r;
}

void expect_script_case(const std::string& script, const std::string& name) {
  const auto r = run_isolated_python(script, {QREPACK_CLI_PATH, name});
  EXPECT_EQ(r.status, 0) << "tests/python/" << script << " " << name;
  EXPECT_TRUE(r.left.empty()) << r.left.describe();
}

CliResult run_cli(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = shell_quote(QREPACK_CLI_PATH);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote((tmp / "out").string()) + " 2>" + shell_quote((tmp / "err").string());
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.out = slurp(tmp / "out");
  r.err = slurp(tmp / "err");
  return r;
}

std::string write_fixture(const TempDir& d, const std::string& name, const std::string& encoding) {
  const std::string out = (d.path() / (name + (encoding.empty() ? "" : "-" + encoding))).string();
  if (std::filesystem::exists(out)) return out;  // written before in this directory
  std::vector<std::string> args{"fixture", name, "-o", out};
  if (!encoding.empty()) {
    args.push_back("--encoding");
    args.push_back(encoding);
  }
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << name << " " << encoding << ": " << r.err;
  return out;
}

void poke_tensor_byte(const std::string& dir, const std::string& name, std::uint64_t index,
                      std::uint8_t value) {
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".safetensors") continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t n = 0;
    io.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    io.read(header.data(), static_cast<std::streamsize>(n));
    const auto j = nlohmann::json::parse(header);
    if (!j.contains(name)) continue;
    const std::uint64_t at = 8 + n + j[name]["data_offsets"][0].get<std::uint64_t>() + index;
    io.seekp(static_cast<std::streamoff>(at));
    io.put(static_cast<char>(value));
    return;
  }
  ADD_FAILURE() << name << " not found in " << dir;
}

void expect_oracle_same_for_any_thread_count(const std::string& ckpt,
                                             const std::filesystem::path& dir,
                                             const std::vector<std::string>& args) {
  std::vector<std::vector<std::uint8_t>> refs, logits;
  for (const char* t : {"1", "2", "3"}) {
    const auto ref = dir / (std::string("ref-") + t), l = dir / (std::string("logits-") + t);
    std::vector<std::string> a = {"oracle",   ckpt,       "-o",        ref.string(),
                                  "--logits", l.string(), "--threads", t};
    a.insert(a.end(), args.begin(), args.end());
    const auto r = run_cli(a);
    ASSERT_EQ(r.exit_code, 0) << ckpt << " at " << t << " threads: " << r.err;
    refs.push_back(read_bytes(ref));
    logits.push_back(read_bytes(l));
  }
  EXPECT_EQ(refs[0], refs[1]) << ckpt;
  EXPECT_EQ(refs[0], refs[2]) << ckpt;
  EXPECT_EQ(logits[0], logits[1]) << ckpt;
  EXPECT_EQ(logits[0], logits[2]) << ckpt;
}

nlohmann::json eval_json(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.push_back("--json");
  const auto r = run_cli(a);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

}  // namespace qrepack::testing
