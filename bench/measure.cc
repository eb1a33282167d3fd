// measure CMD ARGS...: runs a command and prints its wall time and peak resident set size
// (getrusage of the child), for whole-process benchmarks without extra packages.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: measure CMD [ARGS...]\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    std::perror("exec");
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "measure: wall %.3f s, peak RSS %.1f MiB, exit %d\n", secs,
               static_cast<double>(ru.ru_maxrss) / 1024.0,
               WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
