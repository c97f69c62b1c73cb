// The default thread count of kronpe's CPU kernels and the busy-core back-off (kronpe/threads.h).
#include "kronpe/threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include <cstdio>
#include <memory>

#if defined(__linux__)
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe {
namespace {
std::atomic<int> g_threads{0};
std::atomic<long long> g_busy_until{0};  // steady-clock microseconds
std::atomic<long long> g_busy_marks{0};
std::atomic<int> g_busy_level{0};  // marks in a row while busy: the default teams halved that often

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void set_default_threads(int n) { g_threads.store(n > 0 ? n : 0); }

namespace {
thread_local int t_cap = 0;  // ThreadsCap's (0: none)
}  // namespace

ThreadsCap::ThreadsCap(int cap) : previous_(t_cap) { t_cap = cap > 0 ? cap : 0; }
ThreadsCap::~ThreadsCap() { t_cap = previous_; }

int default_threads() {
  int n = g_threads.load();
#ifdef KRONPE_OPENMP
  if (n <= 0) n = omp_get_max_threads();
#else
  if (n <= 0) n = 1;
#endif
  return t_cap > 0 && n > t_cap ? t_cap : n;
}

int kernel_threads() {
  const int n = default_threads();
  if (n <= 1 || !cores_busy()) return n;
  // halved by every mark while busy (one on two cores)
  const int level = g_busy_level.load(std::memory_order_relaxed);
  return level >= 30 ? 1 : std::max(1, n >> level);
}

namespace {
std::atomic<long long> g_late[2] = {-(1LL << 60), -(1LL << 60)};  // the two last late teams

// Runnable tasks now, system-wide, and the online CPUs (Linux: /proc/loadavg's fourth field);
// -1 where that cannot be read.
int oversubscription() {
#if defined(__linux__)
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  int fields = 0;
  const char* p = buf;
  while (*p && fields < 3) {  // skip the three load averages
    if (*p == ' ') ++fields;
    ++p;
  }
  const long running = std::strtol(p, nullptr, 10);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (running <= 0 || cpus <= 0) return -1;
  return int(running - cpus);
#else
  return -1;
#endif
}

// A late or lopsided team at time t. Where the kernel's run queue can be read, the cores are
// marked busy when more tasks are runnable than there are CPUs (a thread waking on an idle core
// is late too: on this machine's virtual CPUs that took up to 7-11 ms after a pause, with nothing
// else running); elsewhere when the two late teams before it were within kLateWindowMilliseconds.
void late_team(long long t) {
  const int over = oversubscription();
  if (over >= 0) {
    if (over == 0) return;
  } else {
    const long long older = g_late[0].exchange(g_late[1].exchange(t, std::memory_order_relaxed), std::memory_order_relaxed);
    if (t - older > 1000 * kLateWindowMilliseconds) return;
  }
  g_busy_level.store(cores_busy() ? std::min(g_busy_level.load(std::memory_order_relaxed) + 1, 30) : 1,
                     std::memory_order_relaxed);
  g_busy_until.store(t + 1000 * kBusyMilliseconds, std::memory_order_relaxed);
  g_busy_marks.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

namespace {
std::atomic<long long> g_last_team_end{-(1LL << 60)};  // steady-clock microseconds
std::atomic<bool> g_steering{true};
std::atomic<long long> g_steered{0};

// Team slots whose workers are remembered (a launching thread's table: thread ids by team number,
// as its last top-level team saw them; 0: not seen).
constexpr int kSlots = 256;
struct WorkerTable {
  std::atomic<int> tid[kSlots];
};
thread_local WorkerTable t_workers{};

#if defined(__linux__)
int own_tid() {
  thread_local const int tid = int(::syscall(SYS_gettid));
  return tid;
}
#endif
}  // namespace

void set_cold_wake_steering(bool on) { g_steering.store(on); }
bool cold_wake_steering() { return g_steering.load(); }
long long cold_wake_steered() { return g_steered.load(std::memory_order_relaxed); }

#if defined(__linux__) && defined(KRONPE_OPENMP)
// The workers a cold team moved off the launching thread's CPU, and the CPU sets to put back.
struct TeamClock::Steer {
  explicit Steer(int n)
      : n(n), tid(new int[std::size_t(n)]()), saved(new cpu_set_t[std::size_t(n)]),
        pending(new std::atomic<bool>[std::size_t(n)]) {
    for (int i = 0; i < n; ++i) pending[i].store(false, std::memory_order_relaxed);
  }
  int n;
  std::unique_ptr<int[]> tid;
  std::unique_ptr<cpu_set_t[]> saved;
  std::unique_ptr<std::atomic<bool>[]> pending;

  // Moves the remembered workers of slots 1..threads-1 off `cpu`; null when none was moved.
  static Steer* make(int threads, const std::atomic<int>* table, int cpu) {
    Steer* s = nullptr;
    const int n = std::min(threads, kSlots);
    for (int i = 1; i < n; ++i) {
      const int tid = table[i].load(std::memory_order_relaxed);
      if (tid <= 0) continue;
      char path[48];
      std::snprintf(path, sizeof(path), "/proc/self/task/%d", tid);
      if (::access(path, F_OK) != 0) continue;  // not a thread of this process (any more)
      cpu_set_t now;
      CPU_ZERO(&now);
      if (::sched_getaffinity(tid, sizeof(now), &now) != 0) continue;
      if (!CPU_ISSET(cpu, &now) || CPU_COUNT(&now) < 2) continue;  // kept off it, or pinned
      cpu_set_t moved = now;
      CPU_CLR(cpu, &moved);
      if (::sched_setaffinity(tid, sizeof(moved), &moved) != 0) continue;
      if (!s) s = new Steer(n);
      s->tid[i] = tid;
      s->saved[i] = now;
      s->pending[i].store(true, std::memory_order_release);
      g_steered.fetch_add(1, std::memory_order_relaxed);
    }
    return s;
  }
  // The worker of slot t puts its own CPU set back (if it is the thread that was moved).
  void arrived(int t, int tid_now) {
    if (t <= 0 || t >= n || tid[t] != tid_now) return;
    if (pending[t].exchange(false, std::memory_order_acq_rel))
      ::sched_setaffinity(0, sizeof(cpu_set_t), &saved[t]);
  }
  // Every moved worker that did not come to the region: its set put back by the launcher.
  void restore() {
    for (int i = 1; i < n; ++i)
      if (pending[i].exchange(false, std::memory_order_acq_rel))
        ::sched_setaffinity(tid[i], sizeof(cpu_set_t), &saved[i]);
  }
};
#else
struct TeamClock::Steer {
  void arrived(int, int) {}
  void restore() {}
};
#endif

TeamClock::TeamClock(int threads, bool judged)
    : t0_(now_us()),
      cold_(t0_ - g_last_team_end.load(std::memory_order_relaxed) > kColdMicroseconds),
      judged_(judged),
      first_done_(-1),
      last_done_(-1) {
#if defined(__linux__) && defined(KRONPE_OPENMP)
  if (omp_in_parallel()) return;  // a nested team: not this thread's pool of workers
  tids_ = t_workers.tid;
  if (cold_ && threads > 1 && g_steering.load(std::memory_order_relaxed)) {
    const int cpu = ::sched_getcpu();
    if (cpu >= 0 && cpu < CPU_SETSIZE) steer_ = Steer::make(threads, tids_, cpu);
  }
#else
  (void)threads;
#endif
}

void TeamClock::started() const {
  const long long t = now_us();
#if defined(__linux__) && defined(KRONPE_OPENMP)
  if (tids_) {
    const int slot = omp_get_thread_num();
    if (slot < kSlots) {
      const int tid = own_tid();
      tids_[slot].store(tid, std::memory_order_relaxed);
      if (steer_) steer_->arrived(slot, tid);
    }
  }
#endif
  if (judged_ && !cold_ && t - t0_ > kLateMicroseconds) late_team(t);
}

void TeamClock::finished() const {
  const long long t = now_us();
  long long first = first_done_.load(std::memory_order_relaxed);
  while ((first < 0 || t < first) && !first_done_.compare_exchange_weak(first, t, std::memory_order_relaxed)) {
  }
  long long last = last_done_.load(std::memory_order_relaxed);
  while (t > last && !last_done_.compare_exchange_weak(last, t, std::memory_order_relaxed)) {
  }
}

TeamClock::~TeamClock() {
  if (steer_) {
    steer_->restore();
    delete steer_;
  }
  const long long first = first_done_.load(std::memory_order_relaxed), last = last_done_.load(std::memory_order_relaxed);
  g_last_team_end.store(std::max(last, t0_), std::memory_order_relaxed);
  if (!judged_ || cold_ || first < 0 || last <= first) return;
  const long long spread = last - first;
  if (spread > kLateMicroseconds && 4 * spread > last - t0_) late_team(last);
}

bool cores_busy() { return now_us() < g_busy_until.load(std::memory_order_relaxed); }

long long busy_marks() { return g_busy_marks.load(std::memory_order_relaxed); }

}  // namespace kronpe
