/*
 * idmap-mount: mounts an overlayfs whose read-only lower layers are idmapped.
 *
 *   idmap-mount OUTSIDE COUNT SCRATCH TARGET OPTIONS LAYER...
 *
 * LAYER is INSIDE:PATH. Files of PATH owned (on disk) by INSIDE+k, 0 <= k < COUNT, appear owned by
 * OUTSIDE+k; other ids appear as the overflow id. INSIDE "-" takes PATH as it is. The layers are
 * listed top-most first, like overlayfs's lowerdir. OPTIONS are the overlay's other options
 * (upperdir=...,workdir=...). Exit status 0 on success; otherwise a message on stderr and nothing
 * left mounted.
 *
 * Each layer is cloned (open_tree OPEN_TREE_CLONE), given MOUNT_ATTR_RDONLY and, if mapped,
 * MOUNT_ATTR_IDMAP with a user namespace whose uid_map and gid_map are "INSIDE OUTSIDE COUNT", and
 * attached at SCRATCH/<index> (move_mount). The overlay is mounted with lowerdir=0:1:... relative to
 * SCRATCH (short options whatever the layer paths). overlayfs keeps private clones of its layers,
 * so the SCRATCH mounts are detached and their directories removed once it is mounted: a running
 * sandbox adds one mount to the host's table, not one per layer (and the runtime detaches that one
 * too once the container holds it).
 *
 * The user namespace belongs to a child made with clone(CLONE_NEWUSER) that does nothing but wait
 * for its pipe to close; it exits when we are done or die, and the namespace lives on only in the
 * mounts that use it.
 *
 * Two more commands serve sandbox disks without util-linux and e2fsprogs, whose mount(8) and
 * mkfs.ext4 read the whole mount table (and mount(8) every loop device) on each call: with a
 * thousand sandboxes that is thousands of lines per create.
 *
 *   idmap-mount loop-mount IMAGE TARGET
 *     binds IMAGE to a free loop device with autoclear (LOOP_CONFIGURE) and mounts it as ext4 at
 *     TARGET with noatime; the device is freed when TARGET is unmounted. Nothing is left bound on
 *     failure.
 *   idmap-mount sparse-copy SRC DST
 *     makes DST (new, 0600) a copy of SRC with SRC's holes kept as holes (SEEK_DATA/SEEK_HOLE and
 *     copy_file_range): a formatted empty disk image is a few MiB of data in a sparse file.
 *   idmap-mount dev-mount DEVICE TARGET
 *     mounts the ext4 filesystem already on block device DEVICE (a running sandbox's disk, which its
 *     container holds) once more at TARGET, noatime, nosuid, nodev, noexec: the kernel serves it from
 *     the same superblock. For a snapshot's copy.
 *   idmap-mount detach MOUNTPOINT...
 *     detaches each mount from this mount namespace (umount2 MNT_DETACH, never following a final
 *     symlink); a container that holds it keeps it. Fails at the first that is not a mount point.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

/* struct mount_attr (MOUNT_ATTR_SIZE_VER0), spelled out so that no header version matters. */
struct idmap_mount_attr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};

#define MAX_LAYERS 500
#define MAX_MAPS 8

static const char *scratch;
static int attached;

static void cleanup(void) {
  char path[PATH_MAX];
  for (int i = attached - 1; i >= 0; i--) {
    snprintf(path, sizeof path, "%s/%d", scratch, i);
    umount2(path, MNT_DETACH);
    rmdir(path);
  }
  attached = 0;
}

static void die(const char *what, const char *arg) {
  int e = errno;
  fprintf(stderr, "idmap-mount: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(e));
  cleanup();
  exit(1);
}

static void usage(const char *msg) {
  fprintf(stderr, "idmap-mount: %s\nusage: idmap-mount OUTSIDE COUNT SCRATCH TARGET OPTIONS INSIDE:PATH...\n", msg);
  exit(2);
}

static unsigned long parse_id(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *s == '\0' || *end != '\0' || v > UINT32_MAX) usage(what);
  return v;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace fd mapping INSIDE+k to OUTSIDE+k for uids and gids. */
static int make_userns(unsigned long inside, unsigned long outside, unsigned long count) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) die("pipe", NULL);
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
  if (pid < 0) die("clone(CLONE_NEWUSER)", NULL);
  if (pid == 0) {
    char c;
    close(pipefd[1]);
    while (read(pipefd[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(pipefd[0]);
  char path[64], map[96];
  snprintf(map, sizeof map, "%lu %lu %lu\n", inside, outside, count);
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  int ok = write_file(path, map) == 0;
  if (ok) {
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    ok = write_file(path, map) == 0;
  }
  int fd = -1;
  if (ok) {
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  }
  int e = errno;
  close(pipefd[1]);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  errno = e;
  if (fd < 0) die("user namespace setup", map);
  return fd;
}

static int loop_mount(const char *image, const char *target) {
  int file = open(image, O_RDWR | O_CLOEXEC);
  if (file < 0) die("open", image);
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) die("open", "/dev/loop-control");
  char dev[64];
  int loop = -1;
  /* Another process may take the free device between GET_FREE and CONFIGURE: ask again. */
  for (int attempt = 0; attempt < 100 && loop < 0; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) die("LOOP_CTL_GET_FREE", NULL);
    snprintf(dev, sizeof dev, "/dev/loop%d", n);
    int fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      die("open", dev);
    }
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (uint32_t)file;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    strncpy((char *)cfg.info.lo_file_name, image, LO_NAME_SIZE - 1);
    if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
      loop = fd;
      break;
    }
    int e = errno;
    close(fd);
    errno = e;
    if (e != EBUSY) die("LOOP_CONFIGURE", dev);
  }
  if (loop < 0) die("no free loop device", NULL);
  close(ctl);
  if (mount(dev, target, "ext4", MS_NOATIME, "") != 0) {
    int e = errno;
    ioctl(loop, LOOP_CLR_FD, 0);
    errno = e;
    die("mount", target);
  }
  /* Autoclear: the device goes with the mount, once no fd holds it. */
  close(loop);
  close(file);
  return 0;
}

static int sparse_copy(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) die("open", src);
  struct stat st;
  if (fstat(in, &st) != 0) die("stat", src);
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) die("create", dst);
  if (ftruncate(out, st.st_size) != 0) goto fail;
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break; /* only a hole is left */
      goto fail;
    }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) goto fail;
    off_t from = data, to = data;
    while (from < hole) {
      ssize_t n = copy_file_range(in, &from, out, &to, (size_t)(hole - from), 0);
      if (n < 0) goto fail;
      if (n == 0) break;
    }
    pos = hole;
  }
  if (fsync(out) != 0) goto fail;
  close(out);
  close(in);
  return 0;
fail: {
  int e = errno;
  unlink(dst);
  errno = e;
  die("sparse copy to", dst);
  return 1;
}
}

static int detach(int n, char **points) {
  for (int i = 0; i < n; i++) {
    if (points[i][0] != '/') usage("MOUNTPOINT must be absolute");
    if (umount2(points[i], MNT_DETACH | UMOUNT_NOFOLLOW) != 0) die("detach", points[i]);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "detach") == 0) return detach(argc - 2, argv + 2);
  if (argc == 4 && strcmp(argv[1], "loop-mount") == 0) {
    if (argv[2][0] != '/' || argv[3][0] != '/') usage("IMAGE and TARGET must be absolute");
    return loop_mount(argv[2], argv[3]);
  }
  if (argc == 4 && strcmp(argv[1], "dev-mount") == 0) {
    if (strncmp(argv[2], "/dev/loop", 9) != 0 || argv[3][0] != '/') usage("DEVICE must be /dev/loopN and TARGET absolute");
    if (mount(argv[2], argv[3], "ext4", MS_NOATIME | MS_NOSUID | MS_NODEV | MS_NOEXEC, "") != 0) die("mount", argv[3]);
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "sparse-copy") == 0) {
    if (argv[2][0] != '/' || argv[3][0] != '/') usage("SRC and DST must be absolute");
    return sparse_copy(argv[2], argv[3]);
  }
  if (argc < 7) usage("too few arguments");
  unsigned long outside = parse_id(argv[1], "bad OUTSIDE");
  unsigned long count = parse_id(argv[2], "bad COUNT");
  scratch = argv[3];
  const char *target = argv[4];
  const char *options = argv[5];
  int nlayers = argc - 6;
  if (count == 0 || outside + count - 1 > UINT32_MAX - 1) usage("bad id range");
  if (nlayers > MAX_LAYERS) usage("too many layers");
  if (scratch[0] != '/' || target[0] != '/') usage("SCRATCH and TARGET must be absolute");

  unsigned long map_inside[MAX_MAPS];
  int map_fd[MAX_MAPS];
  int nmaps = 0;
  char path[PATH_MAX];

  for (int i = 0; i < nlayers; i++) {
    char *spec = argv[6 + i];
    char *colon = strchr(spec, ':');
    if (!colon || colon[1] != '/') usage("a layer is INSIDE:/absolute/path");
    *colon = '\0';
    const char *src = colon + 1;
    int userns = -1;
    if (strcmp(spec, "-") != 0) {
      unsigned long inside = parse_id(spec, "bad INSIDE");
      if (inside + count - 1 > UINT32_MAX - 1) usage("bad INSIDE range");
      for (int m = 0; m < nmaps; m++)
        if (map_inside[m] == inside) userns = map_fd[m];
      if (userns < 0) {
        if (nmaps == MAX_MAPS) usage("too many distinct INSIDE offsets");
        userns = make_userns(inside, outside, count);
        map_inside[nmaps] = inside;
        map_fd[nmaps++] = userns;
      }
    }

    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | O_CLOEXEC);
    if (fd < 0) die("open_tree", src);
    struct idmap_mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
    if (userns >= 0) {
      attr.attr_set |= MOUNT_ATTR_IDMAP;
      attr.userns_fd = (uint64_t)userns;
    }
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) die("mount_setattr", src);
    snprintf(path, sizeof path, "%s/%d", scratch, i);
    if (mkdir(path, 0700) < 0 && errno != EEXIST) die("mkdir", path);
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
      rmdir(path);
      die("move_mount", path);
    }
    attached = i + 1;
    close(fd);
  }

  /* lowerdir=0:1:...,OPTIONS, relative to SCRATCH. */
  size_t len = strlen("lowerdir=") + (size_t)nlayers * 5 + 1 + strlen(options) + 1;
  char *data = malloc(len);
  if (!data) die("malloc", NULL);
  char *p = data + sprintf(data, "lowerdir=");
  for (int i = 0; i < nlayers; i++) p += sprintf(p, i ? ":%d" : "%d", i);
  if (options[0]) sprintf(p, ",%s", options);
  if (chdir(scratch) < 0) die("chdir", scratch);
  if (mount("overlay", target, "overlay", 0, data) < 0) die("mount overlay on", target);
  cleanup();
  return 0;
}
