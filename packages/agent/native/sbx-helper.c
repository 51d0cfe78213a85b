/*
 * sbx-helper: the agent's process supervisor, shipped beside agent.cjs and linked statically so it
 * runs from the agent's read-only mount on any base image.
 *
 *   sbx-helper run -- ARGV...            run ARGV in its own session; exit with its status
 *   sbx-helper zrun SOCKET -- ARGV...    have the warm Python at SOCKET (sbx_zygote.py) run ARGV with
 *                                        our fds, directory and environment; plain `run` when it is
 *                                        not there
 *   sbx-helper pty COLS ROWS -- ARGV...  run ARGV on a new pseudo-terminal; relay fd 0 -> pty -> fd 1;
 *                                        fd 3 carries "COLS ROWS\n" resize requests
 *   sbx-helper watch ROOT MAX_DIRS       report changes below ROOT on stdout (see watch.c)
 *   sbx-helper relay FD_A FD_B           move bytes both ways between two connected sockets with
 *                                        splice(2), in the kernel, until one side's end has been
 *                                        passed on to the other (a port tunnel; exit 0, 1 on error)
 *
 * Node cannot make itself a child subreaper, so this helper is one: every process ARGV starts,
 * even one that double-forks and calls setsid(), stays below it. On SIGTERM it kills that whole
 * tree and exits, so a timeout or a kill leaves nothing running. When ARGV exits on its own the
 * helper exits at once with its status (background jobs the user started keep running, re-parented
 * to PID 1, as in a shell).
 *
 * Exit status: ARGV's exit code; 128+N if it died of signal N; 127 (not found) / 126 (not
 * executable) when exec fails; 125 for the helper's own errors.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "watch.h"

static volatile sig_atomic_t kill_requested = 0;
static pid_t child_pid = -1;
/* zrun: the zygote's supervisor of our run, which kills the run's tree on SIGTERM. */
static volatile pid_t remote_supervisor = -1;

static void on_term(int sig) {
  (void)sig;
  kill_requested = 1;
  /* Async-signal-safe part now (this also wakes waitpid); the rest of the tree in kill_tree(). */
  if (child_pid > 0) {
    kill(-child_pid, SIGKILL);
    kill(child_pid, SIGKILL);
  }
  if (remote_supervisor > 0) kill(remote_supervisor, SIGTERM);
}

static int status_code(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 125;
}

/* SIGKILLs every direct child; as a subreaper, orphaned grandchildren become direct children. */
static int kill_direct_children(void) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  pid_t self = getpid();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = 0;
    /* "pid (comm) S ppid ...": comm may contain spaces and parens, so parse after the last ')'. */
    char *rp = strrchr(buf, ')');
    if (!rp) continue;
    char state;
    int ppid;
    if (sscanf(rp + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == self) {
      kill((pid_t)atoi(e->d_name), SIGKILL);
      n++;
    }
  }
  closedir(d);
  return n;
}

static void kill_tree(void) {
  if (child_pid > 0) kill(-child_pid, SIGKILL);
  for (int round = 0; round < 1000; round++) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (kill_direct_children() == 0) {
      if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD) return;
      usleep(1000);
    }
  }
}

static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static void child_setup(void) {
  /* Undo the helper's signal setup: the user's program starts with default dispositions. */
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* Under memory pressure the kernel should pick user code, not the agent. Raising is unprivileged. */
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "500", 3) < 0) {
    }
    close(fd);
  }
}

static void exec_or_die(char **argv) {
  execvp(argv[0], argv);
  int err = errno;
  dprintf(2, "%s: %s\n", argv[0], err == ENOENT ? "command not found" : strerror(err));
  _exit(err == ENOENT ? 127 : 126);
}

/* Waits for the main child; returns its exit code, killing the tree first if asked to. */
static int supervise(void) {
  int st = 0;
  for (;;) {
    if (kill_requested) {
      kill_tree();
      return 128 + SIGKILL;
    }
    pid_t p = waitpid(-1, &st, 0);
    if (p == child_pid) {
      if (kill_requested) {
        kill_tree();
        return 128 + SIGKILL;
      }
      return status_code(st);
    }
    if (p < 0 && errno == ECHILD) return 125;
  }
}

static int run_mode(char **argv) {
  child_pid = fork();
  if (child_pid < 0) {
    perror("sbx-helper: fork");
    return 125;
  }
  if (child_pid == 0) {
    setsid();
    child_setup();
    exec_or_die(argv);
  }
  return supervise();
}

extern char **environ;

struct buf {
  char *p;
  size_t len, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->len + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len++] = 0;
  return 0;
}

static int buf_add_str(struct buf *b, const char *s) { return buf_add(b, s, strlen(s)); }

static int buf_add_int(struct buf *b, long v) {
  char num[32];
  snprintf(num, sizeof num, "%ld", v);
  return buf_add_str(b, num);
}

static int read_full(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) {
      if (kill_requested && remote_supervisor > 0) kill(remote_supervisor, SIGTERM);
      continue;
    }
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Returns the run's exit status, or -1 when the zygote is not there (nothing was started). */
static int zygote_mode(const char *sock_path, char **argv) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(sock_path) >= sizeof addr.sun_path) return -1;
  strcpy(addr.sun_path, sock_path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
    close(s);
    return -1;
  }
  struct buf b = {0};
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
  int argc = 0, envc = 0;
  while (argv[argc]) argc++;
  while (environ && environ[envc]) envc++;
  int bad = buf_add_str(&b, "v1") || buf_add_str(&b, cwd) || buf_add_int(&b, argc);
  for (int i = 0; i < argc && !bad; i++) bad = buf_add_str(&b, argv[i]);
  bad = bad || buf_add_int(&b, envc);
  for (int i = 0; i < envc && !bad; i++) bad = buf_add_str(&b, environ[i]);
  if (bad) {
    close(s);
    return -1;
  }
  unsigned char hdr[4] = {(unsigned char)b.len, (unsigned char)(b.len >> 8), (unsigned char)(b.len >> 16), (unsigned char)(b.len >> 24)};
  int fds[3] = {0, 1, 2};
  char ctl[CMSG_SPACE(sizeof fds)];
  memset(ctl, 0, sizeof ctl);
  struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(cm), fds, sizeof fds);
  ssize_t sent;
  do {
    sent = sendmsg(s, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != (ssize_t)sizeof hdr) {
    close(s);
    return -1;
  }
  for (size_t off = 0; off < b.len;) {
    ssize_t w = send(s, b.p + off, b.len - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(s);
      return -1;
    }
    off += (size_t)w;
  }
  free(b.p);
  unsigned char pidb[4];
  if (read_full(s, pidb, 4) < 0) {
    close(s);
    return -1; /* no supervisor was made: nothing runs */
  }
  remote_supervisor = (pid_t)(pidb[0] | pidb[1] << 8 | pidb[2] << 16 | (pid_t)pidb[3] << 24);
  if (kill_requested) kill(remote_supervisor, SIGTERM);
  unsigned char st[4];
  if (read_full(s, st, 4) < 0) return 125;
  return (int)(st[0] | st[1] << 8 | st[2] << 16 | (unsigned)st[3] << 24);
}

static void write_all(int fd, const char *p, ssize_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, (size_t)n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= w;
  }
}

static int pty_mode(int cols, int rows, char **argv) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0) {
    perror("sbx-helper: openpt");
    return 125;
  }
  char *slave_name = ptsname(master);
  if (!slave_name) {
    perror("sbx-helper: ptsname");
    return 125;
  }
  struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  ioctl(master, TIOCSWINSZ, &ws);

  child_pid = fork();
  if (child_pid < 0) {
    perror("sbx-helper: fork");
    return 125;
  }
  if (child_pid == 0) {
    setsid();
    int slave = open(slave_name, O_RDWR);
    if (slave < 0) {
      perror("sbx-helper: open pty");
      _exit(125);
    }
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    if (slave > 2) close(slave);
    close(3);
    child_setup();
    exec_or_die(argv);
  }

  char buf[16384], ctl[256];
  size_t ctl_len = 0;
  int in_open = 1, ctl_open = 1, code = -1, st;
  for (;;) {
    if (kill_requested) {
      kill_tree();
      return 128 + SIGKILL;
    }
    pid_t p = waitpid(child_pid, &st, WNOHANG);
    if (p == child_pid) code = status_code(st);
    struct pollfd fds[3] = {
        {.fd = master, .events = POLLIN},
        {.fd = in_open ? 0 : -1, .events = POLLIN},
        {.fd = ctl_open ? 3 : -1, .events = POLLIN},
    };
    int r = poll(fds, 3, code >= 0 ? 0 : 200);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) {
      if (code >= 0) break; /* exited and nothing left to read */
      continue;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(master, buf, sizeof buf);
      if (n > 0) {
        write_all(1, buf, n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        break; /* EIO: every slave fd is closed */
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n > 0) {
        write_all(master, buf, n);
      } else if (n == 0 || errno != EINTR) {
        in_open = 0; /* the client went away: hang up the terminal */
        kill(-child_pid, SIGHUP);
      }
    }
    if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(3, ctl + ctl_len, sizeof ctl - 1 - ctl_len);
      if (n <= 0) {
        if (n == 0 || errno != EINTR) ctl_open = 0;
      } else {
        ctl_len += (size_t)n;
        ctl[ctl_len] = 0;
        char *nl;
        while ((nl = strchr(ctl, '\n')) != NULL) {
          *nl = 0;
          int c, rr;
          if (sscanf(ctl, "%d %d", &c, &rr) == 2 && c > 0 && rr > 0 && c < 10000 && rr < 10000) {
            struct winsize w2 = {.ws_row = (unsigned short)rr, .ws_col = (unsigned short)c};
            ioctl(master, TIOCSWINSZ, &w2); /* the kernel sends SIGWINCH to the foreground group */
          }
          size_t rest = ctl_len - (size_t)(nl + 1 - ctl);
          memmove(ctl, nl + 1, rest + 1);
          ctl_len = rest;
        }
        if (ctl_len >= sizeof ctl - 1) ctl_len = 0;
      }
    }
  }
  if (code < 0) {
    if (waitpid(child_pid, &st, 0) == child_pid) code = status_code(st);
    else code = 125;
  }
  return code;
}

/* relay: one direction, src -> pipe -> dst. */
struct relay_dir {
  int src, dst, pipe[2];
  size_t in_pipe;
  int eof;
};

/* Moves what can move now: 1 moved, 0 nothing, -1 failed; at the source's end with an empty pipe
 * the end is passed on (shutdown) and the direction is over (2). */
static int relay_step(struct relay_dir *d) {
  int moved = 0;
  while (!d->eof && d->in_pipe < (1 << 20)) {
    ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, (1 << 20) - d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d->in_pipe += (size_t)n;
      moved = 1;
    } else if (n == 0) {
      d->eof = 1;
    } else if (errno == EAGAIN || errno == EINTR) {
      break;
    } else {
      return -1;
    }
  }
  while (d->in_pipe > 0) {
    ssize_t n = splice(d->pipe[0], NULL, d->dst, NULL, d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d->in_pipe -= (size_t)n;
      moved = 1;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      break;
    } else {
      return -1;
    }
  }
  if (d->eof && d->in_pipe == 0) {
    shutdown(d->dst, SHUT_WR);
    return 2;
  }
  return moved;
}

/* Both ways between fds a and b (the agent's tunnel: it closes both once this exits, as its own
 * relay does when either side ended). The fds are non-blocking already (the agent's sockets). */
static int relay_mode(int a, int b) {
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct relay_dir ds[2] = {{.src = a, .dst = b}, {.src = b, .dst = a}};
  for (int i = 0; i < 2; i++) {
    if (pipe2(ds[i].pipe, O_NONBLOCK | O_CLOEXEC) < 0) return 1;
    fcntl(ds[i].pipe[1], F_SETPIPE_SZ, 1 << 20);
  }
  while (!kill_requested) {
    int moved = 0;
    for (int i = 0; i < 2; i++) {
      int r = relay_step(&ds[i]);
      if (r < 0) return 1;
      if (r == 2) return 0;
      moved |= r;
    }
    if (moved) continue;
    struct pollfd p[2] = {{.fd = a}, {.fd = b}};
    for (int i = 0; i < 2; i++) {
      struct relay_dir *d = &ds[i];
      if (!d->eof && d->in_pipe < (1 << 20)) p[d->src == a ? 0 : 1].events |= POLLIN;
      if (d->in_pipe > 0) p[d->dst == a ? 0 : 1].events |= POLLOUT;
    }
    /* A socket nobody waits on now is left out: its hang-up would wake poll at once, forever. */
    for (int i = 0; i < 2; i++)
      if (!p[i].events) p[i].fd = -1;
    if (poll(p, 2, -1) < 0 && errno != EINTR) return 1;
  }
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    dprintf(2, "usage: sbx-helper run -- ARGV... | sbx-helper pty COLS ROWS -- ARGV... | sbx-helper watch ROOT MAX_DIRS\n");
    return 125;
  }
  install_handlers();
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) perror("sbx-helper: subreaper");
  if (strcmp(argv[1], "run") == 0 && strcmp(argv[2], "--") == 0) return run_mode(argv + 3);
  if (strcmp(argv[1], "zrun") == 0 && argc >= 5 && strcmp(argv[3], "--") == 0) {
    int code = zygote_mode(argv[2], argv + 4);
    return code >= 0 ? code : run_mode(argv + 4);
  }
  if (strcmp(argv[1], "watch") == 0) return watch_mode(argv[2], atoi(argv[3]), &kill_requested);
  if (strcmp(argv[1], "relay") == 0) return relay_mode(atoi(argv[2]), atoi(argv[3]));
  if (strcmp(argv[1], "pty") == 0 && argc >= 6 && strcmp(argv[4], "--") == 0) {
    return pty_mode(atoi(argv[2]), atoi(argv[3]), argv + 5);
  }
  dprintf(2, "sbx-helper: bad arguments\n");
  return 125;
}
