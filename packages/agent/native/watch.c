/*
 * sbx-helper watch ROOT MAX_DIRS: reports changes below ROOT (recursively) on stdout until ROOT is
 * removed, stdin closes or SIGTERM arrives. One record per change, four NUL-terminated fields:
 *
 *   EVENT \0 KIND \0 PATH \0 OLD_PATH \0
 *
 * EVENT is created | modified | deleted | renamed, or one of the notices "ready" (first, once the
 * whole tree is watched), "overflow" (the kernel
 * dropped events), "limit" (more than MAX_DIRS directories; the rest are not watched) and "gone"
 * (ROOT itself was removed or moved; the helper then exits). KIND is "d" for a directory, else
 * "f". OLD_PATH is set for renamed only. A move within ROOT is one renamed record (inotify pairs
 * the two halves by cookie); a move out of ROOT is deleted, a move into it created.
 *
 * A directory that appears is watched at once and what is already inside it is reported as
 * created, so `mkdir -p a/b && touch a/b/f` loses nothing to the race. Runs of modified records for
 * one path within a read are reported once (a program writing in small pieces is one change).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "watch.h"

#define WATCH_MASK                                                                                   \
  (IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |     \
   IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
/* How long the first half of a move waits for its second half before it counts as moved out. */
#define MOVE_PAIR_MS 20

static int ifd = -1;
static char **wd_path; /* watch descriptor -> directory path (NULL when not watched) */
static int wd_cap;
static int watched;
static int max_dirs;
static int root_wd = -1;
static int limit_reported;
static char *last_modified; /* path of the last record when it was `modified` */

static void out_record(const char *event, int is_dir, const char *path, const char *old) {
  if (strcmp(event, "modified") == 0) {
    if (last_modified && strcmp(last_modified, path) == 0) return;
    free(last_modified);
    last_modified = strdup(path);
  } else {
    free(last_modified);
    last_modified = NULL;
  }
  fputs(event, stdout);
  fputc(0, stdout);
  fputc(is_dir ? 'd' : 'f', stdout);
  fputc(0, stdout);
  fputs(path, stdout);
  fputc(0, stdout);
  fputs(old ? old : "", stdout);
  fputc(0, stdout);
}

static char *join_path(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) exit(125);
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static void set_wd_path(int wd, const char *path) {
  if (wd >= wd_cap) {
    int cap = wd_cap ? wd_cap : 64;
    while (cap <= wd) cap *= 2;
    char **grown = realloc(wd_path, (size_t)cap * sizeof *wd_path);
    if (!grown) exit(125);
    memset(grown + wd_cap, 0, (size_t)(cap - wd_cap) * sizeof *grown);
    wd_path = grown;
    wd_cap = cap;
  }
  if (wd_path[wd]) free(wd_path[wd]);
  else watched++;
  wd_path[wd] = strdup(path);
}

static void report_limit(void) {
  if (limit_reported) return;
  limit_reported = 1;
  out_record("limit", 1, "", NULL);
}

/* Watches PATH and every directory below it; with EMIT, reports what it finds as created. */
static void add_tree(const char *path, int emit) {
  if (watched >= max_dirs) {
    report_limit();
    return;
  }
  int wd = inotify_add_watch(ifd, path, WATCH_MASK);
  if (wd < 0) {
    if (errno == ENOSPC) report_limit();
    return;
  }
  set_wd_path(wd, path);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *child = join_path(path, e->d_name);
    int is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = lstat(child, &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (emit) out_record("created", is_dir, child, NULL);
    if (is_dir) add_tree(child, emit);
    free(child);
  }
  closedir(d);
}

static int under(const char *path, const char *dir, size_t dlen) {
  return strncmp(path, dir, dlen) == 0 && (path[dlen] == 0 || path[dlen] == '/');
}

/* A directory moved within the tree: the watches below it keep working under the new name. */
static void rename_prefix(const char *from, const char *to) {
  size_t flen = strlen(from), tlen = strlen(to);
  for (int wd = 0; wd < wd_cap; wd++) {
    char *p = wd_path[wd];
    if (!p || !under(p, from, flen)) continue;
    size_t rest = strlen(p + flen);
    char *np = malloc(tlen + rest + 1);
    if (!np) exit(125);
    memcpy(np, to, tlen);
    memcpy(np + tlen, p + flen, rest + 1);
    free(p);
    wd_path[wd] = np;
  }
}

/* A directory moved out of the tree: stop watching it (inotify would follow it wherever it went). */
static void unwatch_prefix(const char *dir) {
  size_t len = strlen(dir);
  for (int wd = 0; wd < wd_cap; wd++) {
    if (wd_path[wd] && wd != root_wd && under(wd_path[wd], dir, len)) inotify_rm_watch(ifd, wd);
  }
}

struct pending_move {
  uint32_t cookie;
  char *from;
  int is_dir;
};

static void flush_move(struct pending_move *m) {
  if (!m->from) return;
  out_record("deleted", m->is_dir, m->from, NULL);
  if (m->is_dir) unwatch_prefix(m->from);
  free(m->from);
  m->from = NULL;
}

/* Returns 1 when ROOT is gone and the helper should stop. */
static int handle(const struct inotify_event *ev, struct pending_move *move) {
  if (ev->mask & IN_Q_OVERFLOW) {
    flush_move(move);
    out_record("overflow", 1, "", NULL);
    return 0;
  }
  if (ev->wd < 0 || ev->wd >= wd_cap || !wd_path[ev->wd]) return 0;
  if (ev->mask & IN_IGNORED) {
    if (ev->wd == root_wd) return 1;
    free(wd_path[ev->wd]);
    wd_path[ev->wd] = NULL;
    watched--;
    return 0;
  }
  if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) return ev->wd == root_wd;
  if (ev->len == 0) return 0;
  char *full = join_path(wd_path[ev->wd], ev->name);
  int is_dir = (ev->mask & IN_ISDIR) != 0;
  if (move->from && !((ev->mask & IN_MOVED_TO) && ev->cookie == move->cookie)) flush_move(move);
  if (ev->mask & IN_CREATE) {
    out_record("created", is_dir, full, NULL);
    if (is_dir) add_tree(full, 1);
  } else if (ev->mask & IN_DELETE) {
    out_record("deleted", is_dir, full, NULL);
  } else if (ev->mask & (IN_MODIFY | IN_ATTRIB)) {
    out_record("modified", is_dir, full, NULL);
  } else if (ev->mask & IN_MOVED_FROM) {
    move->cookie = ev->cookie;
    move->from = full;
    move->is_dir = is_dir;
    return 0;
  } else if (ev->mask & IN_MOVED_TO) {
    if (move->from) {
      out_record("renamed", is_dir, full, move->from);
      if (is_dir) rename_prefix(move->from, full);
      free(move->from);
      move->from = NULL;
    } else {
      out_record("created", is_dir, full, NULL);
      if (is_dir) add_tree(full, 1);
    }
  }
  free(full);
  return 0;
}

int watch_mode(const char *root, int limit, volatile sig_atomic_t *stop) {
  max_dirs = limit > 0 ? limit : 1;
  ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ifd < 0) {
    perror("sbx-helper: inotify");
    return 125;
  }
  add_tree(root, 0);
  if (watched == 0) {
    perror("sbx-helper: watch");
    return 2;
  }
  for (int wd = 0; wd < wd_cap; wd++) {
    if (wd_path[wd] && strcmp(wd_path[wd], root) == 0) root_wd = wd;
  }
  /* The agent waits for this record before it tells the client the watch is on. */
  out_record("ready", 1, root, NULL);
  if (fflush(stdout) != 0) return 0;
  static char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  struct pending_move move = {0, NULL, 0};
  struct pollfd fds[2] = {{ifd, POLLIN, 0}, {0, POLLIN, 0}};
  while (!*stop) {
    int n = poll(fds, 2, move.from ? MOVE_PAIR_MS : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 125;
    }
    if (n == 0) {
      flush_move(&move);
    } else if (fds[1].revents) {
      /* The agent closed our stdin (or went away): stop. */
      char c;
      if (read(0, &c, 1) <= 0) return 0;
    }
    if (fds[0].revents & POLLIN) {
      ssize_t len = read(ifd, buf, sizeof buf);
      if (len < 0 && errno != EAGAIN && errno != EINTR) return 125;
      for (ssize_t off = 0; len > 0 && off < len;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        if (handle(ev, &move)) {
          flush_move(&move);
          out_record("gone", 1, root, NULL);
          fflush(stdout);
          return 0;
        }
        off += (ssize_t)(sizeof *ev + ev->len);
      }
    }
    /* The reader is gone (EPIPE; SIGPIPE is ignored): nothing left to report to. */
    if (fflush(stdout) != 0) return 0;
  }
  return 0;
}
