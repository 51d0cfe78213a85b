/*
 * sbx-splice: the gateway's in-kernel byte relay. Node has no splice(2), and relaying a large body
 * through JavaScript costs the daemon a core; this helper moves the bytes between two sockets it
 * inherits (fd 3 and fd 4) through pipes, so they never reach user space.
 *
 *   sbx-splice copy BYTES IDLE_MS   move exactly BYTES from fd 3 to fd 4 (one HTTP body, whose head
 *                                   the gateway checked); nothing more is read from fd 3
 *   sbx-splice relay IDLE_MS        move bytes both ways between fd 3 and fd 4 until both directions
 *                                   ended; an end of input is passed on as a half-close
 *
 * Both give up when no byte moved for IDLE_MS. The sockets are shared with the daemon (non-blocking
 * already), which keeps its own descriptors and closes them once this exits. It dies with its parent.
 *
 * Exit status: 0 done; 2 bad arguments; 3 could not start (nothing was moved: the caller may relay in
 * JavaScript instead); 4 idle; 5 the source ended early (copy); 6 a socket failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXIT_BAD_ARGS 2
#define EXIT_NO_START 3
#define EXIT_IDLE 4
#define EXIT_SHORT 5
#define EXIT_FAILED 6

/* One direction: src -> pipe -> dst. */
struct dir {
  int src, dst;
  int pipe[2];
  size_t in_pipe;  /* bytes in the pipe, not yet written to dst */
  long long left;  /* bytes still to read from src; -1: until its end */
  int eof;         /* src ended (or left reached 0) */
  int done;        /* everything passed on, dst half-closed */
  size_t cap;      /* the pipe's size */
};

static int open_pipe(struct dir *d) {
  if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0) return -1;
  /* A bigger pipe moves more per call; the default (64 KiB) is kept when the system refuses. */
  int sz = fcntl(d->pipe[1], F_SETPIPE_SZ, 1 << 20);
  d->cap = sz > 0 ? (size_t)sz : 65536;
  return 0;
}

/* src -> pipe while there is room; 1 moved, 0 nothing to do now, -1 failed. */
static int fill(struct dir *d) {
  int moved = 0;
  while (!d->eof && d->in_pipe < d->cap) {
    size_t want = d->cap - d->in_pipe;
    if (d->left >= 0 && (long long)want > d->left) want = (size_t)d->left;
    ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d->in_pipe += (size_t)n;
      if (d->left >= 0 && (d->left -= n) == 0) d->eof = 1;
      moved = 1;
      continue;
    }
    if (n == 0) {
      d->eof = 1;
      if (d->left > 0) return -1; /* copy: the source ended before the body did */
      break;
    }
    if (errno == EAGAIN || errno == EINTR) break;
    return -1;
  }
  return moved;
}

/* pipe -> dst; 1 moved, 0 nothing to do now, -1 failed. */
static int drain(struct dir *d) {
  int moved = 0;
  while (d->in_pipe > 0) {
    ssize_t n = splice(d->pipe[0], NULL, d->dst, NULL, d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d->in_pipe -= (size_t)n;
      moved = 1;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    return -1;
  }
  return moved;
}

/* Moves what can be moved now; on the source's end with an empty pipe, passes the end on. */
static int step(struct dir *d, int half_close) {
  if (d->done) return 0;
  int a = fill(d);
  if (a < 0) return -1;
  int b = drain(d);
  if (b < 0) return -1;
  if (d->eof && d->in_pipe == 0) {
    d->done = 1;
    if (half_close) shutdown(d->dst, SHUT_WR);
  }
  return a || b;
}

static long long number(const char *s, long long max) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > max) return -1;
  return v;
}

/* What poll must wait for on fd 3 (p[0]) and fd 4 (p[1]), for the directions still running. */
static void want(struct dir *ds, int n, struct pollfd *p) {
  p[0].events = p[1].events = 0;
  for (int i = 0; i < n; i++) {
    struct dir *d = &ds[i];
    if (d->done) continue;
    if (!d->eof && d->in_pipe < d->cap) p[d->src == 3 ? 0 : 1].events |= POLLIN;
    if (d->in_pipe > 0) p[d->dst == 3 ? 0 : 1].events |= POLLOUT;
  }
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);

  struct dir ds[2];
  memset(ds, 0, sizeof ds);
  int ndirs;
  long long idle;
  if (argc == 4 && strcmp(argv[1], "copy") == 0) {
    long long bytes = number(argv[2], LLONG_MAX);
    idle = number(argv[3], INT_MAX);
    if (bytes < 0 || idle < 1) return EXIT_BAD_ARGS;
    ndirs = 1;
    ds[0] = (struct dir){.src = 3, .dst = 4, .left = bytes, .eof = bytes == 0};
  } else if (argc == 3 && strcmp(argv[1], "relay") == 0) {
    idle = number(argv[2], INT_MAX);
    if (idle < 1) return EXIT_BAD_ARGS;
    ndirs = 2;
    ds[0] = (struct dir){.src = 3, .dst = 4, .left = -1};
    ds[1] = (struct dir){.src = 4, .dst = 3, .left = -1};
  } else {
    return EXIT_BAD_ARGS;
  }
  for (int i = 0; i < ndirs; i++) {
    if (fcntl(ds[i].src, F_GETFD) < 0 || fcntl(ds[i].dst, F_GETFD) < 0 || open_pipe(&ds[i]) < 0) return EXIT_NO_START;
  }

  for (;;) {
    int moved = 0;
    for (int i = 0; i < ndirs; i++) {
      int r = step(&ds[i], ndirs == 2);
      if (r < 0) return ds[i].eof && ds[i].left > 0 ? EXIT_SHORT : EXIT_FAILED;
      moved |= r;
    }
    int running = 0;
    for (int i = 0; i < ndirs; i++) running |= !ds[i].done;
    if (!running) return 0;
    if (moved) continue;
    struct pollfd p[2] = {{.fd = 3}, {.fd = 4}};
    want(ds, ndirs, p);
    /* An fd nobody waits on is left out: its hang-up would otherwise wake poll at once, forever. */
    if (!p[0].events) p[0].fd = -1;
    if (!p[1].events) p[1].fd = -1;
    int n = poll(p, 2, (int)idle);
    if (n == 0) return EXIT_IDLE;
    if (n < 0 && errno != EINTR) return EXIT_FAILED;
  }
}
