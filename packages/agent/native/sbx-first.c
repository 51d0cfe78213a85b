/*
 * sbx-first: the agent's first responder, shipped beside agent.cjs and linked statically.
 *
 *   sbx-first PROGRAM [ARGS...]      (the container's process, under the init; PROGRAM is node)
 *
 * Node takes ~25-35 ms to start inside a sandbox, most of a cold create. The daemon's boot probe
 * (GET /health with `x-sandboxd-probe: boot`) only asks whether the agent's process is up and owns
 * its listening socket (fd 3, SANDBOXD_AGENT_LISTEN_FD), so this answers it at once, while Node
 * starts; every other request is Node's:
 *
 * - Before exec'ing PROGRAM (which keeps our pid, so the init still stops the sandbox when the agent
 *   exits), RELAYS socketpairs are made; Node gets one end of each (SANDBOXD_AGENT_RELAY_FDS) and
 *   serves them as connections, and a pipe (SANDBOXD_AGENT_READY_FD) on which it says it listens.
 * - A grandchild (re-parented to the init, which reaps it) shares the listening socket with Node and
 *   accepts while Node starts, only while a relay is free. A connection whose request is the boot
 *   probe is answered here; any other is relayed byte for byte to Node through a free socketpair,
 *   for its whole life: nothing accepted here is dropped or answered by anyone but Node.
 * - Once Node says it listens (or is gone), this stops accepting and closes its copy of the socket;
 *   it exits when the last relayed connection ends.
 *
 * The binary is execute-only for the sandbox (like the agent's loader, see agent-runtime.ts), so
 * this process too is out of reach of ptrace and pidfd_getfd from code in the sandbox.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define RELAYS 4
#define HEAD_MAX 4096
#define BUF 65536
#define LISTEN_FD 3

#define PROBE_BODY "{\"status\":\"starting\"}"
static const char PROBE_HEAD[] =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\n"
    "x-sandboxd-first-responder: 1\r\nconnection: close\r\ncontent-length: ";

/* One direction of a relay: bytes read from `from`, waiting to be written to `to`. */
struct pipe_dir {
  int from, to;
  char *buf;
  size_t len, off;
  int eof; /* `from` ended; `to` is shut for writing once buf is flushed */
  int done;
};

struct conn {
  int client;   /* accepted connection, -1 when the slot is free */
  int relay;    /* our end of the socketpair, or -1 while the request is being looked at */
  int pair_idx; /* which socketpair */
  struct pipe_dir up, down;
};

static int pair_ours[RELAYS];
static int pair_busy[RELAYS];
static struct conn conns[RELAYS];

static void die(const char *what) {
  fprintf(stderr, "sbx-first: %s: %s\n", what, strerror(errno));
  exit(125);
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Whether `head` (NUL-terminated, a complete request head) is the boot probe with no body. */
static int is_probe(const char *head) {
  if (strncmp(head, "GET /health HTTP/1.", 19) != 0) return 0;
  int probe = 0;
  for (const char *line = strstr(head, "\r\n"); line && line[2] != '\r'; line = strstr(line + 2, "\r\n")) {
    const char *h = line + 2;
    if (strncasecmp(h, "content-length:", 15) == 0 || strncasecmp(h, "transfer-encoding:", 18) == 0) {
      const char *v = strchr(h, ':') + 1;
      while (*v == ' ') v++;
      if (strncmp(v, "0\r", 2) != 0) return 0;
    }
    if (strncasecmp(h, "x-sandboxd-probe:", 17) == 0) {
      const char *v = h + 17;
      while (*v == ' ') v++;
      if (strncmp(v, "boot\r", 5) == 0) probe = 1;
    }
  }
  return probe;
}

static void free_conn(struct conn *c) {
  if (c->client >= 0) close(c->client);
  if (c->relay >= 0) {
    /* The socketpair carried a connection; Node sees its end close and is done with it. */
    close(c->relay);
  }
  free(c->up.buf);
  free(c->down.buf);
  memset(c, 0, sizeof *c);
  c->client = c->relay = -1;
}

static void start_relay(struct conn *c) {
  c->relay = pair_ours[c->pair_idx];
  c->up = (struct pipe_dir){c->client, c->relay, malloc(BUF), 0, 0, 0, 0};
  c->down = (struct pipe_dir){c->relay, c->client, malloc(BUF), 0, 0, 0, 0};
  if (!c->up.buf || !c->down.buf) die("malloc");
}

/*
 * Looks at what the client sent so far (without consuming it): answer the probe, or relay. `ended`:
 * the client sent all it will (a hang-up), so a head still incomplete goes to Node as it is.
 */
static void decide(struct conn *c, int ended) {
  char head[HEAD_MAX + 1];
  ssize_t n = recv(c->client, head, HEAD_MAX, MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    /* Closed or failed before a request: nothing to relay. */
    pair_busy[c->pair_idx] = 0;
    free_conn(c);
    return;
  }
  head[n] = '\0';
  size_t cmp = (size_t)n < 11 ? (size_t)n : 11;
  char *end = strstr(head, "\r\n\r\n");
  if (memcmp(head, "GET /health", cmp) == 0 && !end && n < HEAD_MAX && !ended) return; /* wait for the head */
  if (end && is_probe(head)) {
    /* Consume exactly the head; the answer closes the connection. */
    size_t len = (size_t)(end + 4 - head);
    if (recv(c->client, head, len, 0) == (ssize_t)len) {
      int fl = fcntl(c->client, F_GETFL);
      fcntl(c->client, F_SETFL, fl & ~O_NONBLOCK);
      char answer[sizeof PROBE_HEAD + 32 + sizeof PROBE_BODY];
      int n_answer = snprintf(answer, sizeof answer, "%s%zu\r\n\r\n%s", PROBE_HEAD, sizeof PROBE_BODY - 1, PROBE_BODY);
      ssize_t w = write(c->client, answer, (size_t)n_answer);
      (void)w;
    }
    pair_busy[c->pair_idx] = 0;
    free_conn(c);
    return;
  }
  start_relay(c);
}

/* One step of a direction after poll said it can move; returns -1 when the relay must end. */
static int pump(struct pipe_dir *d, short rev_from, short rev_to) {
  if (d->done) return 0;
  if (d->len == d->off && !d->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
    ssize_t n = read(d->from, d->buf, BUF);
    if (n > 0) {
      d->len = (size_t)n;
      d->off = 0;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      if (n < 0 && errno != ECONNRESET) return -1;
      d->eof = 1;
    }
  }
  if (d->len > d->off && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
    ssize_t n = write(d->to, d->buf + d->off, d->len - d->off);
    if (n > 0) d->off += (size_t)n;
    else if (errno != EAGAIN && errno != EINTR) return -1;
    if (d->off == d->len) d->off = d->len = 0;
  }
  if (d->eof && d->len == 0) {
    shutdown(d->to, SHUT_WR);
    d->done = 1;
  }
  return 0;
}

static void serve(int ready_fd) {
  int listening = 1;
  for (int i = 0; i < RELAYS; i++) conns[i].client = conns[i].relay = -1;
  for (;;) {
    struct pollfd pfd[2 + 2 * RELAYS];
    int n = 0, live = 0, free_slot = -1;
    for (int i = 0; i < RELAYS; i++) {
      if (conns[i].client >= 0) live++;
      else if (!pair_busy[i] && free_slot < 0) free_slot = i;
    }
    if (!listening && live == 0) return;
    pfd[n++] = (struct pollfd){ready_fd, POLLIN, 0};
    /* Accept only while a relay is free: what is not accepted waits in the backlog for Node. */
    pfd[n++] = (struct pollfd){listening && free_slot >= 0 ? LISTEN_FD : -1, POLLIN, 0};
    for (int i = 0; i < RELAYS; i++) {
      struct conn *c = &conns[i];
      pfd[n] = (struct pollfd){-1, 0, 0};
      pfd[n + 1] = (struct pollfd){-1, 0, 0};
      if (c->client >= 0 && c->relay < 0) pfd[n] = (struct pollfd){c->client, POLLIN | POLLRDHUP, 0};
      else if (c->client >= 0) {
        short cl = 0, rl = 0;
        if (!c->up.done && c->up.len > c->up.off) rl |= POLLOUT;
        else if (!c->up.done && !c->up.eof) cl |= POLLIN;
        if (!c->down.done && c->down.len > c->down.off) cl |= POLLOUT;
        else if (!c->down.done && !c->down.eof) rl |= POLLIN;
        /* A side with nothing to wait for is left out: its hang-up alone must not wake us. */
        pfd[n] = (struct pollfd){cl ? c->client : -1, cl, 0};
        pfd[n + 1] = (struct pollfd){rl ? c->relay : -1, rl, 0};
      }
      n += 2;
    }
    if (poll(pfd, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (pfd[0].revents && listening) {
      /* Node listens (a byte) or is gone (EOF): from now on the backlog is its own. The pipe
       * stays readable, so it leaves the poll set. */
      listening = 0;
      close(LISTEN_FD);
      close(ready_fd);
      ready_fd = -1;
    }
    if (listening && pfd[1].revents & POLLIN && free_slot >= 0) {
      int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        conns[free_slot].client = fd;
        conns[free_slot].relay = -1;
        conns[free_slot].pair_idx = free_slot;
        pair_busy[free_slot] = 1;
        decide(&conns[free_slot], 0);
      }
    }
    for (int i = 0; i < RELAYS; i++) {
      struct conn *c = &conns[i];
      struct pollfd *cp = &pfd[2 + 2 * i], *rp = &pfd[3 + 2 * i];
      if (c->client < 0 || (!cp->revents && !rp->revents)) continue;
      if (c->relay < 0) {
        decide(c, (cp->revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
        continue;
      }
      if (pump(&c->up, cp->revents, rp->revents) < 0 || pump(&c->down, rp->revents, cp->revents) < 0 || (c->up.done && c->down.done)) {
        /* The socketpair stays busy: it carried this connection, and Node sees its end close. */
        free_conn(c);
      }
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sbx-first PROGRAM [ARGS...]\n");
    return 125;
  }
  prctl(PR_SET_DUMPABLE, 0);
  int node_ends[RELAYS];
  for (int i = 0; i < RELAYS; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
    pair_ours[i] = sv[0];
    node_ends[i] = sv[1];
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) die("pipe");

  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    /* The responder: a grandchild, so that the init (not Node) reaps it. */
    if (fork() != 0) _exit(0);
    setsid();
    signal(SIGPIPE, SIG_IGN);
    close(ready[1]);
    for (int i = 0; i < RELAYS; i++) {
      close(node_ends[i]);
      if (set_nonblock(pair_ours[i]) < 0) die("fcntl");
    }
    if (set_nonblock(LISTEN_FD) < 0) die("listening socket");
    serve(ready[0]);
    _exit(0);
  }
  waitpid(child, NULL, 0);

  /* Node: its ends of the socketpairs and the pipe's writing end, nothing of the responder's. */
  close(ready[0]);
  char fds[RELAYS * 12 + 1] = "";
  for (int i = 0; i < RELAYS; i++) {
    close(pair_ours[i]);
    fcntl(node_ends[i], F_SETFD, 0);
    snprintf(fds + strlen(fds), sizeof fds - strlen(fds), "%s%d", i ? "," : "", node_ends[i]);
  }
  fcntl(ready[1], F_SETFD, 0);
  char rfd[12];
  snprintf(rfd, sizeof rfd, "%d", ready[1]);
  setenv("SANDBOXD_AGENT_RELAY_FDS", fds, 1);
  setenv("SANDBOXD_AGENT_READY_FD", rfd, 1);
  execv(argv[1], argv + 1);
  fprintf(stderr, "sbx-first: exec %s: %s\n", argv[1], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
