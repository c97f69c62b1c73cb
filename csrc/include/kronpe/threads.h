// kronpe C++ core: how many threads kronpe's own CPU kernels (blending, embedders, the smoother,
// the packed GEMM) use when a call does not say (kronpe.set_num_threads / get_num_threads). The
// kernels run on the process's OpenMP runtime, which torch shares when it is loaded (one
// libgomp.so.1 per process), so they add no thread pool of their own.
//
// Busy cores. Threads of another library busy on our cores (OpenBLAS's workers spin for about
// 0.1 s after every threaded BLAS call, an LLVM OpenMP runtime's for 0.2 s) start a team's
// threads late or take their core away mid-work, and every barrier waits for them: a 2-thread fill
// of a 451 x 300 photograph took 55-141 ms right after a NumPy matmul against 29-36 ms on a quiet
// machine. Every parallel region of the kernels times its team (TeamClock): a thread that starts
// more than kLateMicroseconds after the team was launched, or threads that finish further apart
// than that and than a quarter of the region's time, make a late team; a late team marks the
// cores busy when more tasks are runnable than there are CPUs (Linux: /proc/loadavg; a thread
// waking on an idle core is late too, with nothing else running: 7-11 ms on this machine's
// virtual CPUs after a pause) and the team before it came late too (kBusyShare: on a shared
// machine a thread loses its core for a scheduler tick now and then, which costs that one team
// the tick, while falling back to one thread would halve the next 100 ms of calls; late teams in
// a row mean the cores are busy), elsewhere when three
// came within kLateWindowMilliseconds; then
// the cores are busy and for kBusyMilliseconds after that the default count is halved, and halved
// again by every late team while they are busy (at least one; one on two cores) (calls that name
// their threads keep them). Halving, not one thread at once: on a 16-CPU H100 machine
// (Firecracker) teams of all 16 threads came late with nothing else running (the window rule: 42
// marks in 7 scattered fits of a 512^2 photograph, on two machines of that kind 19-24 in 7 fits
// after one halving, 2-7 at 8 threads), and one thread for 100 ms took the fit from 45-50 ms (4-12
// threads) to 81-88 ms.
#pragma once
#include <atomic>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe {

// n >= 1 threads, or 0 for OpenMP's default (omp_get_max_threads()); callers check the range.
void set_default_threads(int n);
// The count in force: the one set, else OpenMP's default; 1 without OpenMP.
int default_threads();
// What a kernel's team takes when its call gives no count: default_threads(), or fewer while the
// cores are marked busy (above).
int kernel_threads();

// While one lives, default_threads() (and so kernel_threads()) is at most `cap` on the thread
// that made it (two tasks sharing the cores, each on one: LeadSolve::beside in multigrid.h).
class ThreadsCap {
 public:
  explicit ThreadsCap(int cap);
  ~ThreadsCap();
  ThreadsCap(const ThreadsCap&) = delete;
  ThreadsCap& operator=(const ThreadsCap&) = delete;

 private:
  int previous_;
};

constexpr long long kLateMicroseconds = 500;
constexpr long long kBusyMilliseconds = 100;
constexpr long long kLateWindowMilliseconds = 20;
// Linux: the late share (the share of recent judged teams that came late, each team weighing a
// quarter) at which a late team marks the cores busy, in percent: two late teams in a row. The
// share is kept through pauses (a benchmark's peers run for seconds between two of kronpe's
// calls; under a heavy load its first late team then marks the cores again) and forgotten after
// kShareResetMilliseconds without a judged team.
constexpr int kBusyShare = 40;
constexpr long long kShareResetMilliseconds = 10000;
// A team launched longer than this after the last one ended is cold: its threads have gone to
// sleep (or their idle virtual CPUs been descheduled) and wake late with nothing else running, so
// its lateness alone says nothing about busy cores: it is judged only when more tasks are
// runnable than there are CPUs at its end (where that can be read). (The benchmark harness waits
// for every thread to sleep before each call: judging every cold team marked the cores busy for
// the timed call behind it on a quiet machine, which then ran on one thread.)
constexpr long long kColdMicroseconds = 2000;

// Constructed by the launching thread just before a parallel region of `threads` threads and
// destroyed after it (its destructor judges the finish times); started() and finished() are
// called by every thread of the team, first and last thing in the region.
class TeamClock {
 public:
  // judged false: lateness and finish times mark nothing (a team of unlike tasks)
  explicit TeamClock(int threads, bool judged = true);
  ~TeamClock();
  TeamClock(const TeamClock&) = delete;
  TeamClock& operator=(const TeamClock&) = delete;
  void started() const;
  void finished() const;

 private:
  long long t0_;
  bool cold_;  // launched more than kColdMicroseconds after the last team ended
  bool judged_;
  mutable std::atomic<long long> first_done_, last_done_;
  mutable std::atomic<bool> late_start_;  // a thread started more than kLateMicroseconds late
};

// body(t, count) on a team of nt threads (an OpenMP parallel region timed by a TeamClock; t the
// thread's number, count the team's size), or body(0, 1) directly on the calling thread when
// nt <= 1: no region and no clock (a region of one thread still cost libgomp a futex wake per
// call, 50 per multigrid V-cycle: a third of a 128^2 V-cycle's time). The worksharing directives
// inside body (omp for, barrier, single) bind to the team, or to the calling thread alone.
template <typename F>
void run_team(int nt, F&& body) {
#ifdef KRONPE_OPENMP
  if (nt > 1) {
    const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
    {
      clock.started();
      body(omp_get_thread_num(), omp_get_num_threads());
      clock.finished();
    }
    return;
  }
#endif
  (void)nt;
  body(0, 1);
}

// Whether a team's lateness is judged (TeamClock's destructor): every warm team; a cold one only
// when it came late and `oversubscribed` tasks beyond the CPUs were runnable at its end (< 0:
// none, or the run queue cannot be read).
bool team_is_judged(bool cold, bool late, int oversubscribed);

// Whether the cores are marked busy now; how many times they were marked since the process
// started (diagnostics and tests).
bool cores_busy();
long long busy_marks();

}  // namespace kronpe
