// The default thread count of kronpe's CPU kernels and the busy-core back-off (kronpe/threads.h).
#include "kronpe/threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>


#if defined(__linux__)
#include <fcntl.h>
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

// The share of recent judged teams that came late, in 1/kShareOne: each judged team moves it a
// quarter of the way to 1 (late) or 0 (on time); forgotten after kShareResetMilliseconds without
// a judged team.
constexpr int kShareOne = 1024;
std::atomic<int> g_late_share{0};
std::atomic<long long> g_last_judged{-(1LL << 60)};

// Records a judged team ending at time t; returns the late share with it.
int judged_team(long long t, bool late) {
  const long long before = g_last_judged.exchange(t, std::memory_order_relaxed);
  int share = t - before > 1000 * kShareResetMilliseconds ? 0 : g_late_share.load(std::memory_order_relaxed);
  share = (3 * share + (late ? kShareOne : 0)) / 4;
  g_late_share.store(share, std::memory_order_relaxed);
  return share;
}

// A late or lopsided team at time t, with the late share `share`. Where the kernel's run queue
// can be read, the cores are marked busy when more tasks are runnable than there are CPUs and
// the late share reaches kBusyShare (a thread waking on an idle core is late too: on this
// machine's virtual CPUs that took up to 7-11 ms after a pause, with nothing else running; and
// one late team in a while is the price of any team on a shared machine); elsewhere when the two
// late teams before it were within kLateWindowMilliseconds.
void late_team(long long t, int share) {
  const int over = oversubscription();
  if (over >= 0) {
    if (over == 0 || share * 100 < kBusyShare * kShareOne) return;
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
}  // namespace

TeamClock::TeamClock(int threads, bool judged)
    : t0_(now_us()),
      cold_(t0_ - g_last_team_end.load(std::memory_order_relaxed) > kColdMicroseconds),
      judged_(judged),
      first_done_(-1),
      last_done_(-1),
      late_start_(false) {
  (void)threads;
}

void TeamClock::started() const {
  const long long t = now_us();
  if (judged_ && t - t0_ > kLateMicroseconds) late_start_.store(true, std::memory_order_relaxed);
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
  const long long first = first_done_.load(std::memory_order_relaxed), last = last_done_.load(std::memory_order_relaxed);
  g_last_team_end.store(std::max(last, t0_), std::memory_order_relaxed);
  if (!judged_ || first < 0) return;
  const long long spread = last - first;
  const bool lopsided = spread > kLateMicroseconds && 4 * spread > last - t0_;
  const bool late = lopsided || late_start_.load(std::memory_order_relaxed);
  // A cold team counts only when it came late while more tasks are runnable than there are CPUs:
  // another library's threads on the cores (NumPy's OpenBLAS workers spin after each call, so a
  // pipeline that alternates NumPy's products and kronpe's meets every kronpe call's first team
  // cold and late by a scheduler tick: on two cores both took about ten times as long); late with
  // the cores free, it only woke slowly.
  if (!team_is_judged(cold_, late, cold_ && late ? oversubscription() : 0)) return;
  const int share = judged_team(last, late);
  if (late) late_team(last, share);
}

bool team_is_judged(bool cold, bool late, int oversubscribed) { return !cold || (late && oversubscribed > 0); }

bool cores_busy() { return now_us() < g_busy_until.load(std::memory_order_relaxed); }

long long busy_marks() { return g_busy_marks.load(std::memory_order_relaxed); }

}  // namespace kronpe
