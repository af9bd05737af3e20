/* Small helper for the benchmarks in bench/; compiled by lib.sh's build_helper into their temporary
 * directory (not part of the CMake build). Timestamps are CLOCK_REALTIME in nanoseconds, so they
 * compare with Redis MONITOR's.
 *
 *   helper loop START_NS N PAUSE_MS -- CMD [ARG...]
 *       sleep until START_NS, then run CMD N times one after the other (posix_spawnp, wait; the
 *       command's stdout is /dev/null), sleeping PAUSE_MS after each run;
 *       print "END_NS FAILED LAST_BAD_STATUS CHILD_CPU_NS" (FAILED = runs whose exit status was not 0;
 *       CHILD_CPU_NS = user + system time of the runs, their waited-for descendants included).
 *   helper stamp LOG ID [HOLD_MS]
 *       append "START_NS END_NS ID" to LOG with one O_APPEND write: START_NS is taken first thing
 *       in main, END_NS right before the write, after sleeping HOLD_MS; then exit 0.
 *   helper lead LOG ID
 *       append "START_NS PID ID" to LOG with one O_APPEND write (START_NS taken first thing in main),
 *       then sleep until a signal: SIGUSR1 appends "END_NS PID ID end" and exits 0 (the leader's
 *       command ending on its own), any other ends it as by default. bench/failover.sh's command
 *       under dlock elect.
 *   helper spawnlat N
 *       N times: take T0, posix_spawn this helper ("startfd"), read the child's first timestamp from
 *       a pipe, wait for it; print one line per run "START_LATENCY_NS TOTAL_NS" (TOTAL = until reaped).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int run_loop(int argc, char **argv)
{
  if (argc < 7 || strcmp(argv[5], "--") != 0) {
    fprintf(stderr, "usage: helper loop START_NS N PAUSE_MS -- CMD [ARG...]\n");
    return 64;
  }
  int64_t start = strtoll(argv[2], NULL, 10);
  long n = strtol(argv[3], NULL, 10);
  long pause_ms = strtol(argv[4], NULL, 10);
  struct timespec pause = {.tv_sec = pause_ms / 1000, .tv_nsec = pause_ms % 1000 * 1000000};
  char **cmd = argv + 6;
  struct timespec ts = {.tv_sec = start / 1000000000, .tv_nsec = start % 1000000000};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
  /* The commands' stdout goes to /dev/null (etcdctl lock prints the lock's key); stdout is ours. */
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  long failed = 0;
  int last_bad = 0;
  for (long i = 0; i < n; i++) {
    pid_t pid;
    int rc = posix_spawnp(&pid, cmd[0], &actions, NULL, cmd, environ);
    if (rc != 0) {
      failed++;
      last_bad = 1000 + rc;
      continue;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) {
      failed++;
      last_bad = code;
    }
    if (pause_ms > 0)
      nanosleep(&pause, NULL);
  }
  int64_t end = now_ns();
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  int64_t cpu = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
                ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
  printf("%lld %ld %d %lld\n", (long long)end, failed, last_bad, (long long)cpu);
  return 0;
}

static int run_stamp(int argc, char **argv)
{
  int64_t start = now_ns();
  if (argc < 4)
    return 64;
  int fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0)
    return 1;
  if (argc >= 5) {
    long hold_ms = strtol(argv[4], NULL, 10);
    struct timespec hold = {.tv_sec = hold_ms / 1000, .tv_nsec = hold_ms % 1000 * 1000000};
    nanosleep(&hold, NULL);
  }
  char buf[128];
  int64_t end = now_ns();
  int len = snprintf(buf, sizeof buf, "%lld %lld %s\n", (long long)start, (long long)end, argv[3]);
  if (write(fd, buf, (size_t)len) != len)
    return 1;
  _exit(0);
}

static int lead_fd = -1;
static char lead_id[64];

/* SIGUSR1 in `lead`: the end's stamp, the last thing before the exit (run_lead waits in pause(),
 * so nothing here is re-entered). */
static void stamp_and_exit(int sig)
{
  (void)sig;
  int64_t end = now_ns();
  char buf[160];
  int len = snprintf(buf, sizeof buf, "%lld %d %s end\n", (long long)end, (int)getpid(), lead_id);
  _exit(write(lead_fd, buf, (size_t)len) == len ? 0 : 1);
}

static int run_lead(int argc, char **argv)
{
  int64_t start = now_ns();
  if (argc < 4)
    return 64;
  /* SIGUSR1 is handled, and not blocked (whatever mask was inherited), before the line tells
   * anyone the pid. */
  snprintf(lead_id, sizeof lead_id, "%s", argv[3]);
  lead_fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (lead_fd < 0)
    return 1;
  struct sigaction sa = {.sa_handler = stamp_and_exit};
  sigaction(SIGUSR1, &sa, NULL);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR1);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_UNBLOCK, &mask, NULL);
  char buf[160];
  int len = snprintf(buf, sizeof buf, "%lld %d %s\n", (long long)start, (int)getpid(), lead_id);
  if (write(lead_fd, buf, (size_t)len) != len)
    return 1;
  for (;;)
    pause();
}

static int run_startfd(int argc, char **argv)
{
  int64_t start = now_ns();
  if (argc < 3)
    return 64;
  int fd = atoi(argv[2]);
  if (write(fd, &start, sizeof start) != sizeof start)
    return 1;
  _exit(0);
}

static int run_spawnlat(int argc, char **argv)
{
  if (argc < 3)
    return 64;
  long n = strtol(argv[2], NULL, 10);
  for (long i = 0; i < n; i++) {
    int p[2];
    if (pipe(p) != 0)
      return 1;
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", p[1]);
    char *args[] = {argv[0], "startfd", fdarg, NULL};
    pid_t pid;
    int64_t t0 = now_ns();
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0)
      return 1;
    close(p[1]);
    int64_t child = 0;
    ssize_t got = read(p[0], &child, sizeof child);
    int status;
    waitpid(pid, &status, 0);
    int64_t t1 = now_ns();
    close(p[0]);
    if (got != sizeof child)
      return 1;
    printf("%lld %lld\n", (long long)(child - t0), (long long)(t1 - t0));
  }
  return 0;
}

int main(int argc, char **argv)
{
  if (argc >= 2 && strcmp(argv[1], "stamp") == 0)
    return run_stamp(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "startfd") == 0)
    return run_startfd(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "loop") == 0)
    return run_loop(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "spawnlat") == 0)
    return run_spawnlat(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "lead") == 0)
    return run_lead(argc, argv);
  fprintf(stderr, "usage: helper loop|stamp|spawnlat|lead ...\n");
  return 64;
}
